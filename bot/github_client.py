"""The GitHub adapter: PyGithub over real HTTP, authenticated as a GitHub App or with a token.

Every public method is one idempotent operation wrapped in `_retrying`: GitHub 5xx and dropped
connections are retried with exponential backoff (bounded), rate limits (403/429 with
`X-RateLimit-Remaining: 0`, `X-RateLimit-Reset` or `Retry-After`) are waited out when the wait is
short and otherwise raised as `GitHubUnavailable(retry_after=...)` so the Celery task retries
later instead of blocking a worker. The policy is tenacity's `Retrying`; PyGithub's own urllib3
retry is disabled (it would sleep up to an hour on a rate limit inside the request).

The summary comment is found by a hidden marker *and* the bot's login, edited only when the body
changed, under a per-PR lock so two tasks never both create it. Tokens never reach logs:
`install_redaction()` adds a filter that masks them.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

import requests
import tenacity
from redis.exceptions import LockError
from github import Auth, Github, GithubException

log = logging.getLogger(__name__)

SUMMARY_MARKER = "<!-- etriage:summary -->"
CHECK_RUN_NAME = "etriage"
ANNOTATIONS_PER_REQUEST = 50  # GitHub rejects more in one create/update
PERMISSIONS = ("admin", "maintain", "write", "triage", "read", "none")
FAILED_CONCLUSIONS = frozenset({"failure", "timed_out", "cancelled", "startup_failure"})


class GitHubError(Exception):
    """GitHub refused the request for a reason retrying will not fix (404, 422, 401...)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class GitHubUnavailable(GitHubError):
    """A transient failure (5xx, rate limit, network) that outlasted the inline retries."""

    def __init__(self, message: str, retry_after: float, status: int | None = None):
        super().__init__(message, status)
        self.retry_after = retry_after


@dataclass(frozen=True)
class GitHubConfig:
    base_url: str = "https://api.github.com"
    token: str | None = field(default=None, repr=False)
    app_id: str | None = None
    private_key: str | None = field(default=None, repr=False)
    bot_login: str = "etriage[bot]"
    attempts: int = 4  # per operation, for 5xx / network errors
    backoff_seconds: float = 0.5  # doubled after each failed attempt
    max_inline_wait: float = 10.0  # longer rate-limit waits go back to the task queue
    seconds_between_writes: float | None = 1.0  # GitHub's guidance for content-creating calls
    timeout: float = 15.0

    @classmethod
    def from_settings(cls, settings, **overrides) -> "GitHubConfig":
        key = None
        if getattr(settings, "github_private_key_path", None) and not settings.github_token:
            key = Path(settings.github_private_key_path).read_text()
        values = dict(base_url=settings.github_api_url, token=settings.github_token,
                      app_id=getattr(settings, "github_app_id", None), private_key=key,
                      bot_login=settings.bot_login)
        values.update(overrides)
        return cls(**values)


def make_auth(config: GitHubConfig, installation_id: int | None) -> Auth.Auth:
    """A personal token when configured (local use), else the App's installation token.

    `AppInstallationAuth` signs a JWT with the App key, exchanges it for an installation token
    via POST /app/installations/{id}/access_tokens on the configured base URL, and refreshes it
    shortly before `expires_at`.
    """
    if config.token:
        return Auth.Token(config.token)
    if not (config.app_id and config.private_key):
        raise GitHubError("no GitHub credentials: set a token or an App id + private key")
    if installation_id is None:
        raise GitHubError("GitHub App authentication needs the installation id of the event")
    return InstallationAuth(Auth.AppAuth(config.app_id, config.private_key), int(installation_id))


class InstallationAuth(Auth.AppInstallationAuth):
    """PyGithub's installation auth with a token cache of our own that can be dropped: GitHub
    may revoke a token before its `expires_at` (App suspended and restored, key rotated, the
    token revoked by DELETE /installation/token), and only a fresh exchange helps then."""

    _authorization = None  # InstallationAuthorization: token and expires_at

    @property
    def token(self) -> str:
        margin = Auth.TOKEN_REFRESH_THRESHOLD_TIMEDELTA  # renew shortly before expiry, as PyGithub
        if self._authorization is None or \
                self._authorization.expires_at - margin < datetime.now(timezone.utc):
            self._authorization = self._get_installation_authorization()
        return self._authorization.token

    def forget_token(self) -> None:
        self._authorization = None


# ---- secrets in logs --------------------------------------------------------------------------
_SECRET_PATTERNS = [
    re.compile(r"\bgh[pousr]_[A-Za-z0-9_]{16,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # JWTs
    re.compile(r"(?i)(authorization:?\s*(?:token|bearer|basic)\s+)\S+"),
]


def redact(text: str) -> str:
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "***", text)
    return text


class RedactTokensFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def install_redaction(logger: logging.Logger | None = None) -> None:
    """Mask tokens in everything the given (default: root) logger's handlers write."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, RedactTokensFilter) for f in handler.filters):
            handler.addFilter(RedactTokensFilter())


# ---- the client -------------------------------------------------------------------------------
def _local_lock(_key: str):
    return _LOCAL_LOCKS.setdefault(_key, threading.Lock())


_LOCAL_LOCKS: dict[str, threading.Lock] = {}


@dataclass(frozen=True)
class Annotation:
    path: str
    start_line: int
    message: str
    title: str = ""
    level: str = "failure"  # notice | warning | failure

    def to_api(self) -> dict:
        data = {"path": self.path, "start_line": self.start_line, "end_line": self.start_line,
                "annotation_level": self.level, "message": self.message[:64000]}
        if self.title:
            data["title"] = self.title[:255]
        return data


class GitHubClient:
    def __init__(self, config: GitHubConfig, installation_id: int | None = None, *,
                 lock: Callable[[str], contextlib.AbstractContextManager] = _local_lock,
                 sleep: Callable[[float], None] = time.sleep):
        self.config = config
        self.bot_login = config.bot_login
        self._lock = lock
        self._sleep = sleep
        self._auth = make_auth(config, installation_id)
        self._gh = Github(auth=self._auth, base_url=config.base_url,
                          timeout=int(config.timeout), retry=None, lazy=True,
                          seconds_between_requests=None,
                          seconds_between_writes=config.seconds_between_writes)

    # -- retry policy --
    def _retrying(self, what: str, operation: Callable):
        """operation() under the one retry policy, in tenacity: 5xx and network errors back off
        exponentially (backoff_seconds, doubled), a short rate limit is waited out, a long one
        or the last attempt raises GitHubUnavailable (the Celery task retries later), other 4xx
        raise GitHubError at once."""
        backoff = tenacity.wait_exponential(multiplier=self.config.backoff_seconds, exp_base=2, min=0)

        def wait(state: tenacity.RetryCallState) -> float:
            limited = _rate_limit_wait(state.outcome.exception())
            return limited if limited is not None else backoff(state)

        def transient(exc: BaseException) -> bool:
            if isinstance(exc, (requests.ConnectionError, requests.Timeout)):
                return True
            if not isinstance(exc, GithubException):
                return False
            limited = _rate_limit_wait(exc)
            if limited is not None:
                return limited <= self.config.max_inline_wait
            return exc.status is None or exc.status >= 500

        def before_sleep(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception()
            log.warning("%s: %s, retrying in %.1fs (attempt %d/%d)", what, _failure(exc),
                        state.next_action.sleep, state.attempt_number, self.config.attempts)

        retrying = tenacity.Retrying(stop=tenacity.stop_after_attempt(self.config.attempts), wait=wait,
                                     retry=tenacity.retry_if_exception(transient), sleep=self._sleep,
                                     before_sleep=before_sleep, reraise=True)
        try:
            return retrying(lambda: (self._wait_if_exhausted(), self._authorized(what, operation))[1])
        except GithubException as exc:
            limited = _rate_limit_wait(exc)
            if limited is not None:
                raise GitHubUnavailable(f"{what}: rate limited for {limited:.0f}s", limited, exc.status) from None
            if exc.status is not None and exc.status < 500:
                raise GitHubError(f"{what}: GitHub answered {exc.status} {_message(exc)}", exc.status) from None
            raise GitHubUnavailable(f"{what}: {_failure(exc)} after {self.config.attempts} attempts",
                                    self._last_backoff(), exc.status) from None
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise GitHubUnavailable(f"{what}: {_failure(exc)} after {self.config.attempts} attempts",
                                    self._last_backoff(), None) from None

    def _last_backoff(self) -> float:
        """The delay the next attempt would have waited: the Celery task's hint."""
        return self.config.backoff_seconds * 2 ** (self.config.attempts - 1)

    def _authorized(self, what: str, operation: Callable):
        """operation(); a 401 with an installation token drops the token, and the operation
        runs once more with a freshly fetched one. A second 401 is a GitHubError."""
        try:
            return operation()
        except GithubException as exc:
            if exc.status != 401 or not isinstance(self._auth, InstallationAuth):
                raise
            log.warning("%s: GitHub refused the installation token (401); fetching a new one", what)
            self._auth.forget_token()
        try:
            return operation()
        except GithubException as exc:
            if exc.status != 401:
                raise
            raise GitHubError(f"{what}: GitHub refused a freshly fetched installation token too "
                              f"(401 {_message(exc)}); is the App still installed, not suspended, "
                              "and its private key current?", 401) from None

    def _wait_if_exhausted(self) -> None:
        """Honour X-RateLimit-Remaining/Reset of the previous response before the next call."""
        remaining, _limit = self._gh.requester.rate_limiting
        reset = self._gh.requester.rate_limiting_resettime
        if remaining == 0 and reset:
            wait = reset - time.time() + 1
            if wait > self.config.max_inline_wait:
                raise GitHubUnavailable(f"rate limit exhausted until {reset}", wait)
            if wait > 0:
                self._sleep(wait)

    def _json(self, verb: str, path: str, *, parameters=None, input=None):
        _headers, data = self._gh.requester.requestJsonAndCheck(
            verb, f"{self._gh.requester.base_url}{path}", parameters=parameters, input=input)
        return data

    def _repo(self, repo: str):
        return self._gh.get_repo(repo)  # lazy (Github(lazy=True)): no request until needed

    # -- contract methods (bot.commands uses these) --
    def permission(self, repo: str, user: str) -> str:
        def op():
            try:
                data = self._json("GET", f"/repos/{repo}/collaborators/{user}/permission")
            except GithubException as exc:
                if exc.status == 404:
                    return "none"
                raise
            role = data.get("role_name")
            return role if role in PERMISSIONS else data.get("permission", "none")
        return self._retrying(f"permission of {user} on {repo}", op)

    def react(self, repo: str, comment_id: int, content: str = "eyes") -> None:
        self._retrying(f"reaction on comment {comment_id}", lambda: self._json(
            "POST", f"/repos/{repo}/issues/comments/{comment_id}/reactions",
            input={"content": content}))

    def reply(self, repo: str, pr: int, body: str, *, in_reply_to: int | None = None) -> int:
        """Post a reply; with `in_reply_to` (the comment being answered) it is posted once:
        a hidden marker names that comment and the reply's text, and every attempt (a retry
        after a 502 that GitHub had applied, a redelivered task) first looks for it."""
        if in_reply_to is None:
            return self._retrying(f"reply on {repo}#{pr}", lambda: self._repo(repo).get_issue(pr)
                                  .create_comment(body).id)
        digest = hashlib.sha256(body.encode()).hexdigest()[:12]
        marker = f"<!-- etriage:reply-to {int(in_reply_to)} {digest} -->"
        text = f"{body}\n\n{marker}"  # at the end: the reply reads as written

        def op():
            issue = self._repo(repo).get_issue(pr)
            for comment in issue.get_comments():
                if comment.user.login == self.bot_login and marker in (comment.body or ""):
                    return comment.id
            return issue.create_comment(text).id

        with self._lock(f"reply:{repo}#{pr}:{in_reply_to}"):
            return self._retrying(f"reply on {repo}#{pr}", op)

    def labels(self, repo: str, pr: int) -> list[str]:
        return self._retrying(f"labels of {repo}#{pr}", lambda: [
            label.name for label in self._repo(repo).get_issue(pr).get_labels()])

    def add_labels(self, repo: str, pr: int, labels) -> None:
        labels = list(labels)
        if labels:
            self._retrying(f"labels on {repo}#{pr}", lambda: self._json(
                "POST", f"/repos/{repo}/issues/{pr}/labels", input={"labels": labels}))

    def remove_label(self, repo: str, pr: int, label: str) -> None:
        def op():
            try:
                self._repo(repo).get_issue(pr).remove_from_labels(label)
            except GithubException as exc:
                if exc.status != 404:  # already gone: the goal is reached
                    raise
        self._retrying(f"label removal on {repo}#{pr}", op)

    def read_file(self, repo: str, path: str, ref: str | None = None) -> str | None:
        def op():
            try:
                kwargs = {"ref": ref} if ref else {}
                content = self._repo(repo).get_contents(path, **kwargs)
            except GithubException as exc:
                if exc.status == 404:
                    return None
                raise
            return content.decoded_content.decode()
        return self._retrying(f"read {path} in {repo}", op)

    def git_token(self, fresh: bool = False) -> str | None:
        """The token git fetches with (tasks/repos.py gives it to one git command at a time):
        the configured token, or the installation's, renewed before it expires; `fresh` after
        git was refused drops the cached installation token and exchanges a new one."""
        if isinstance(self._auth, InstallationAuth):
            if fresh:
                self._auth.forget_token()
            return self._auth.token
        return getattr(self._auth, "token", None)

    def pull(self, repo: str, pr: int) -> dict:
        def op():
            pull = self._repo(repo).get_pull(pr)
            return {"number": pull.number, "head_sha": pull.head.sha, "head_ref": pull.head.ref,
                    "base_sha": pull.base.sha, "base_ref": pull.base.ref, "state": pull.state,
                    "author": pull.user.login, "author_association": pull.raw_data.get(
                        "author_association", "NONE"), "draft": bool(pull.draft)}
        return self._retrying(f"pull {repo}#{pr}", op)

    def pull_files(self, repo: str, pr: int) -> list[tuple[str, str]]:
        return self._retrying(f"files of {repo}#{pr}", lambda: [
            (f.filename, f.status) for f in self._repo(repo).get_pull(pr).get_files()])

    def pulls_for_commit(self, repo: str, sha: str) -> list[int]:
        return self._retrying(f"pulls of {sha[:12]}", lambda: [
            p["number"] for p in self._json("GET", f"/repos/{repo}/commits/{sha}/pulls")
            if p.get("state", "open") == "open"])

    # -- the summary comment --
    def find_summary(self, repo: str, pr: int):
        for comment in self._repo(repo).get_issue(pr).get_comments():
            if comment.user.login == self.bot_login and SUMMARY_MARKER in (comment.body or ""):
                return comment
        return None

    def upsert_summary(self, repo: str, pr: int, body: str | Callable[[], str]) -> tuple[int, bool]:
        """Create or edit the one summary comment; (comment id, whether GitHub was changed).

        Listing and writing happen under the per-PR lock, and a retry re-lists first, so a
        POST that GitHub applied but answered 502 is found instead of posted twice. `body` may
        be a callable, evaluated under the lock (callers composing from shared state).
        """
        def op():
            text = body() if callable(body) else body
            text = text if SUMMARY_MARKER in text else f"{SUMMARY_MARKER}\n{text}"
            existing = self.find_summary(repo, pr)
            if existing is None:
                return self._repo(repo).get_issue(pr).create_comment(text).id, True
            if existing.body == text:
                return existing.id, False
            existing.edit(text)
            return existing.id, True

        with self._lock(f"summary:{repo}#{pr}"):
            return self._retrying(f"summary comment on {repo}#{pr}", op)

    # -- issues (bot/trunk_issues.py): one per hidden marker, found again by it, never doubled --
    def _own_issue(self, repo: str, number: int, marker: str) -> dict | None:
        """Issue `number` when it is the bot's and carries `marker`, else None (deleted, moved,
        or a number that was never ours)."""
        try:
            data = self._json("GET", f"/repos/{repo}/issues/{int(number)}")
        except GithubException as exc:
            if exc.status in (404, 410):
                return None
            raise
        return data if _is_own_issue(data, self.bot_login, marker) else None

    def _find_issue(self, repo: str, marker: str, label: str) -> dict | None:
        url, params = f"{self._gh.requester.base_url}/repos/{repo}/issues", {
            "state": "all", "labels": label, "per_page": 100}
        for _ in range(ISSUE_PAGES):
            headers, data = self._gh.requester.requestJsonAndCheck("GET", url, parameters=params)
            found = next((issue for issue in data or [] if _is_own_issue(issue, self.bot_login, marker)), None)
            if found:
                return found
            url, params = _next_link(headers), None
            if not url:
                return None
        return None

    def find_issue(self, repo: str, marker: str, *, label: str) -> dict | None:
        """The bot's issue carrying `marker` among the repository's issues labelled `label`
        (open or closed, newest first, at most ISSUE_PAGES pages), or None."""
        return self._retrying(f"issues of {repo}", lambda: self._find_issue(repo, marker, label))

    def upsert_issue(self, repo: str, marker: str, *, title: str, body: str, label: str,
                     number: int | None = None) -> tuple[int, str]:
        """Open or update the one issue of `marker`: (its number, "created" | "reopened" |
        "updated" | "unchanged"). It is looked up by `number` first (the store's), else by the
        marker, under a lock and again on every retry, so a POST GitHub applied but answered
        502 is found instead of opened twice."""
        text = body if marker in body else f"{marker}\n{body}"

        def op():
            existing = (self._own_issue(repo, number, marker) if number else None) \
                or self._find_issue(repo, marker, label)
            if existing is None:
                created = self._json("POST", f"/repos/{repo}/issues",
                                     input={"title": title, "body": text, "labels": [label]})
                return created["number"], "created"
            change = {k: v for k, v in (("title", title), ("body", text)) if existing.get(k) != v}
            reopened = existing.get("state") != "open"
            if reopened:
                change["state"] = "open"
            if not change:
                return existing["number"], "unchanged"
            self._json("PATCH", f"/repos/{repo}/issues/{existing['number']}", input=change)
            return existing["number"], "reopened" if reopened else "updated"

        with self._lock(f"issue:{repo}:{marker}"):
            return self._retrying(f"issue {marker} on {repo}", op)

    def close_issue(self, repo: str, number: int, marker: str, comment: str) -> bool:
        """Say why in a comment (once: it carries its own hidden marker) and close the bot's issue
        of `marker`; False when there is no such open issue (closed already, or not ours)."""
        def op():
            issue = self._own_issue(repo, number, marker)
            if issue is None or issue.get("state") != "open":
                return False
            said = _marker_of(comment)
            if not any(c.user.login == self.bot_login and said in (c.body or "")
                       for c in self._repo(repo).get_issue(int(number)).get_comments()):
                self._json("POST", f"/repos/{repo}/issues/{int(number)}/comments", input={"body": comment})
            self._json("PATCH", f"/repos/{repo}/issues/{int(number)}",
                       input={"state": "closed", "state_reason": "completed"})
            return True

        with self._lock(f"issue:{repo}:{marker}"):
            return self._retrying(f"closing issue #{number} on {repo}", op)

    # -- check runs --
    def create_check_run(self, repo: str, head_sha: str, *, status: str = "queued",
                         title: str = "", summary: str = "", details_url: str | None = None,
                         external_id: str | None = None) -> int:
        def op():
            kwargs = {"status": status}
            if title or summary:
                kwargs["output"] = {"title": title or CHECK_RUN_NAME, "summary": summary or title}
            if details_url:
                kwargs["details_url"] = details_url
            if external_id:
                kwargs["external_id"] = external_id
            return self._repo(repo).create_check_run(CHECK_RUN_NAME, head_sha, **kwargs).id
        return self._retrying(f"check run for {head_sha[:12]}", op)

    def find_check_run(self, repo: str, head_sha: str) -> int | None:
        data = self._retrying(f"check runs of {head_sha[:12]}", lambda: self._json(
            "GET", f"/repos/{repo}/commits/{head_sha}/check-runs",
            parameters={"check_name": CHECK_RUN_NAME}))
        runs = [r for r in data.get("check_runs", []) if r.get("name") == CHECK_RUN_NAME]
        return max(r["id"] for r in runs) if runs else None

    def update_check_run(self, repo: str, check_run_id: int, *, status: str | None = None,
                         conclusion: str | None = None, title: str = "", summary: str = "",
                         text: str = "", annotations: list[Annotation] = ()) -> None:
        """PATCH the run; annotations go in batches of 50 (GitHub appends them per request)."""
        annotations = [a.to_api() for a in annotations]
        batches = [annotations[i:i + ANNOTATIONS_PER_REQUEST]
                   for i in range(0, len(annotations), ANNOTATIONS_PER_REQUEST)] or [[]]
        output = {"title": title or CHECK_RUN_NAME, "summary": summary or title or CHECK_RUN_NAME}
        if text:
            output["text"] = text[:65535]
        for index, batch in enumerate(batches):
            payload: dict = {"output": dict(output, annotations=batch) if batch else output}
            if index == len(batches) - 1:  # completing ends the run: only with the last batch
                if conclusion:
                    payload.update(conclusion=conclusion, completed_at=_now_iso())
                elif status:
                    payload["status"] = status
            elif status and status != "completed":
                payload["status"] = status
            self._retrying(f"check run {check_run_id}", lambda p=payload: self._json(
                "PATCH", f"/repos/{repo}/check-runs/{check_run_id}", input=p))

    # -- Actions: jobs and logs --
    def workflow_run(self, repo: str, run_id: int) -> dict:
        return self._retrying(f"workflow run {run_id}", lambda: self._json(
            "GET", f"/repos/{repo}/actions/runs/{run_id}"))

    def runs_for_check_suite(self, repo: str, check_suite_id: int) -> list[dict]:
        data = self._retrying(f"runs of check suite {check_suite_id}", lambda: self._json(
            "GET", f"/repos/{repo}/actions/runs", parameters={"check_suite_id": check_suite_id}))
        return data.get("workflow_runs", [])

    def run_jobs(self, repo: str, run_id: int) -> list[dict]:
        def op():
            jobs, page = [], 1
            while True:
                data = self._json("GET", f"/repos/{repo}/actions/runs/{run_id}/jobs",
                                  parameters={"per_page": 100, "page": page})
                jobs.extend(data.get("jobs", []))
                if len(jobs) >= data.get("total_count", 0) or not data.get("jobs"):
                    return jobs
                page += 1
        return self._retrying(f"jobs of run {run_id}", op)

    def job(self, repo: str, job_id: int) -> dict:
        return self._retrying(f"job {job_id}", lambda: self._json(
            "GET", f"/repos/{repo}/actions/jobs/{job_id}"))

    def failed_workflow_runs(self, repo: str, head_sha: str) -> list[dict]:
        """The workflow runs of `head_sha` that completed and failed (one page of 100: the newest)."""
        data = self._retrying(f"workflow runs of {head_sha[:12]}", lambda: self._json(
            "GET", f"/repos/{repo}/actions/runs", parameters={"head_sha": head_sha, "per_page": 100}))
        return [run for run in data.get("workflow_runs", [])
                if run.get("head_sha") == head_sha and run.get("status") == "completed"
                and run.get("conclusion") in FAILED_CONCLUSIONS]

    def rerun_failed_jobs(self, repo: str, run_id: int) -> None:
        """POST /repos/{repo}/actions/runs/{run_id}/rerun-failed-jobs: GitHub re-runs the run's
        failed jobs and the jobs that depend on them (201, an empty object). A run GitHub will
        not re-run (still running, too old, no permission) is a GitHubError with its status."""
        self._retrying(f"re-run of workflow run {run_id}", lambda: self._json(
            "POST", f"/repos/{repo}/actions/runs/{int(run_id)}/rerun-failed-jobs", input={}))

    def job_log(self, repo: str, job_id: int) -> str:
        """The job's plain-text log: the API answers 302 to a pre-signed URL, fetched without
        our token (it goes to another host in production)."""
        def op():
            location = self._repo(repo).get_workflow_job(job_id).logs_url()
            response = requests.get(location, timeout=self.config.timeout)
            if response.status_code >= 500:
                raise GithubException(response.status_code, None, dict(response.headers))
            if response.status_code != 200:
                raise GitHubError(f"log of job {job_id}: {response.status_code}",
                                  response.status_code)
            return response.text
        return self._retrying(f"log of job {job_id}", op)


ISSUE_PAGES = 10  # pages of 100 issues looked through for a marker (the label keeps them few)


def _is_own_issue(issue: dict, bot_login: str, marker: str) -> bool:
    return (isinstance(issue, dict) and "pull_request" not in issue
            and (issue.get("user") or {}).get("login") == bot_login and marker in (issue.get("body") or ""))


def _next_link(headers: dict) -> str | None:
    link = {k.lower(): v for k, v in (headers or {}).items()}.get("link", "")
    found = re.search(r'<([^>]+)>;\s*rel="next"', link)
    return found.group(1) if found else None


def _marker_of(comment: str) -> str:
    """The hidden marker a comment carries (its first `<!-- ... -->`), or the whole text."""
    found = re.search(r"<!-- [^>]{1,200} -->", comment)
    return found.group(0) if found else comment


# ---- where a line of a job's log is on GitHub ----------------------------------------------
_STAMP = re.compile(r"^\ufeff?(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?Z ")  # how Actions starts each log line
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


def job_url(repo: str, job: dict, web: str = "https://github.com") -> str:
    """The job's page, https://github.com/OWNER/REPO/actions/runs/RUN/job/JOB (the form GitHub
    links today; the API's html_url may be the older /runs/JOB form). Its host is the job's
    html_url's when that is https (GitHub Enterprise), else `web`; "" without ids."""
    run_id, job_id = job.get("run_id"), job.get("id")
    owner, _, name = repo.partition("/")
    if not (isinstance(run_id, int) and isinstance(job_id, int) and _NAME.fullmatch(owner) and _NAME.fullmatch(name)):
        return ""
    match = re.match(r"(https://[A-Za-z0-9.-]{1,100}(?::\d{1,5})?)/", str(job.get("html_url") or ""))
    host = match.group(1) if match else web.rstrip("/")
    return f"{host}/{owner}/{name}/actions/runs/{run_id}/job/{job_id}"


def job_line_url(repo: str, job: dict, log: str, line_no: int, web: str = "https://github.com") -> str:
    """The job's page at line `line_no` (1-based, of the whole downloaded log) of `log`:
    `#step:S:L`, the step whose time span holds that line's timestamp and the line's number
    within that step's log, as GitHub's log viewer anchors it. Without timestamps or steps
    to place the line: the job's page."""
    url = job_url(repo, job, web)
    where = _step_line(job.get("steps") or [], log, line_no) if url else None
    return f"{url}#step:{where[0]}:{where[1]}" if where else url


def _second(value: str | None) -> datetime | None:
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).replace(microsecond=0)


def _step_line(steps: list[dict], log: str, line_no: int) -> tuple[int, int] | None:
    lines = log.splitlines()
    if not 1 <= line_no <= len(lines):
        return None
    stamps = [_second(m.group(1) + "Z") if (m := _STAMP.match(line)) else None for line in lines]
    at = stamps[line_no - 1]
    if at is None:
        return None
    spans = [(s["number"], _second(s.get("started_at")), _second(s.get("completed_at")), s.get("conclusion"))
             for s in steps if isinstance(s, dict) and isinstance(s.get("number"), int)]
    spans = sorted((span for span in spans if span[1] is not None), key=lambda span: (span[1], span[0]))
    holding = [span for span in spans if span[1] <= at and (span[2] is None or at <= span[2])]
    # Steps of the same second all hold the line: the failed one wrote it, else the latest.
    chosen = ([span for span in holding if span[3] == "failure"] or holding
              or [span for span in spans if span[1] <= at])
    if not chosen:
        return None
    number, moment = chosen[-1][0], chosen[-1][1]
    first = next(i for i, stamp in enumerate(stamps) if stamp is not None and stamp >= moment)
    return number, line_no - first


def _message(exc: GithubException) -> str:
    data = exc.data if isinstance(exc.data, dict) else {}
    return str(data.get("message", ""))[:200]


def _failure(exc: BaseException) -> str:
    if isinstance(exc, GithubException):
        return f"GitHub answered {exc.status}"
    return f"network error {type(exc).__name__}"


def _rate_limit_wait(exc: BaseException | None) -> float | None:
    """Seconds to wait when `exc` is a primary or secondary rate limit, else None."""
    if not isinstance(exc, GithubException):
        return None
    headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
    if exc.status not in (403, 429):
        return None
    if "retry-after" in headers:
        return max(float(headers["retry-after"]), 0.0)
    if headers.get("x-ratelimit-remaining") == "0" and "x-ratelimit-reset" in headers:
        return max(float(headers["x-ratelimit-reset"]) - time.time(), 0.0) + 1.0
    if exc.status == 429 or "rate limit" in _message(exc).lower():
        return 60.0  # secondary limit without a hint: GitHub asks for at least a minute
    return None


def _now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@contextlib.contextmanager
def redis_lock(redis_client, key: str, *, timeout: float = 120, wait: float = 60) -> Iterator[None]:
    """The per-PR lock: a Redis lock that expires if its holder dies (a killed worker)."""
    lock = redis_client.lock(f"etriage:lock:{key}", timeout=timeout, blocking_timeout=wait)
    if not lock.acquire():
        raise GitHubUnavailable(f"lock {key} busy for {wait}s", wait)
    try:
        yield
    finally:
        try:
            lock.release()
        except LockError as exc:  # expired while held: the write already happened
            log.warning("lock %s: %s", key, exc)
