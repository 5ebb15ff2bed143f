"""A local GitHub REST API double: a real HTTP server on 127.0.0.1 for tests and `etriage demo`.

Responses are built from GitHub's own examples (shared/fixtures/github/rest, loaded once and
adjusted to the request: ids, bodies, urls pointing back at this server). State is kept per
repository: pull requests, issue comments, reactions, labels, check runs, workflow runs/jobs and
their logs, file contents, user permissions. Every request is recorded (method, path, query,
headers without Authorization, JSON body). Faults are programmable per route: the next N answers
can be a status with headers (502, 403 + X-RateLimit-Remaining: 0, 429 + Retry-After), either
instead of the work or after it (`applied=True`: GitHub did it but the answer was lost), and a
route can be held (the request blocks until the test releases it) to freeze a worker mid-task.
Installation tokens it issues live `token_lifetime` seconds; an expired one is refused (401), and
so is one the test revoked early (`revoke_tokens`).
"""
from __future__ import annotations

import copy
import json
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

from etriage.dev import git_http

GITHUB_API = "https://api.github.com"


def default_fixtures_dir() -> Path:
    """GitHub's REST examples shipped with the package (byte-identical to shared/fixtures/github/rest)."""
    return Path(__file__).resolve().parent / "fixtures" / "github" / "rest"


def _now_iso(delta: float = 0.0) -> str:
    moment = datetime.now(timezone.utc) + timedelta(seconds=delta)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Recorded:
    method: str
    path: str
    query: dict
    headers: dict
    body: object
    status: int = 0
    token: str | None = None  # the installation token used, when this double issued it


@dataclass
class Fault:
    status: int
    headers: dict
    message: str
    times: int
    applied: bool = False  # the request takes effect, only the answer is the fault


@dataclass
class Hold:
    """Requests to a route block on `release` once `reached` is set (for mid-task kills)."""

    times: int
    reached: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.released.set()


@dataclass
class PullState:
    number: int
    head_sha: str
    base_sha: str
    head_ref: str = "changes"
    base_ref: str = "master"
    author: str = "Codertocat"
    author_association: str = "CONTRIBUTOR"
    files: list = field(default_factory=list)  # [(filename, status)]
    labels: list = field(default_factory=list)
    head_repo: str | None = None  # where the head lives (a fork); None: the base repository


class GitHubDouble:
    def __init__(self, fixtures_dir: Path | None = None, *, bot_login: str = "etriage[bot]"):
        self.fixtures_dir = Path(fixtures_dir or default_fixtures_dir())
        if not self.fixtures_dir.is_dir():
            raise FileNotFoundError(f"GitHub REST examples not found at {self.fixtures_dir}")
        self.bot_login = bot_login
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.requests: list[Recorded] = []
        self.pulls: dict[tuple[str, int], PullState] = {}
        self.comments: dict[int, dict] = {}  # id -> {"repo","issue","body","user","reactions"}
        self.check_runs: dict[int, dict] = {}
        self.permissions: dict[tuple[str, str], str] = {}
        self.contents: dict[tuple[str, str, str], str] = {}  # (repo, path, ref or "") -> text
        self.workflow_runs: dict[tuple[str, int], dict] = {}
        self.jobs: dict[tuple[str, int], dict] = {}
        self.logs: dict[int, str] = {}
        self.issues: dict[tuple[str, int], dict] = {}  # (repo, number) -> issue (bot/trunk_issues.py)
        self.tokens_issued = 0
        self.token_lifetime = 3600.0  # seconds; GitHub's installation tokens live an hour
        self.token_expiry: dict[str, float] = {}  # issued token -> epoch seconds
        self.revoked: set[str] = set()  # issued tokens refused before their expiry
        # The OAuth web flow (the dashboard's login): registered apps, who approves the next
        # authorize request, the repositories each user can read, and codes/tokens issued.
        self.oauth_apps: dict[str, str] = {}  # client id -> client secret
        self.oauth_user: str | None = None  # who is signed in at "github.com" (None: denies)
        self.user_repos: dict[str, dict[str, bool]] = {}  # login -> {full_name: private}
        self.user_writable: dict[str, set[str]] = {}  # login -> repositories they can push to
        self.oauth_codes: dict[str, tuple[str, str]] = {}  # code -> (client id, login)
        self.user_tokens: dict[str, str] = {}  # user token -> login
        self._faults: list[tuple[str, re.Pattern, Fault]] = []
        self._holds: list[tuple[str, re.Pattern, Hold]] = []
        self._next_id = 1000
        self._fixtures: dict[str, object] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        # git over smart HTTP (etriage/dev/git_http.py): repositories, and the tokens git may
        # use besides the installation tokens issued here (a configured personal token)
        self.git = git_http.GitHosting()
        self.git_tokens: set[str] = set()

    # ---- lifecycle -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> str:
        double = self

        class Handler(_Handler):
            owner = double

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="github-double",
                                        daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            with self.lock:  # unblock any held request so the server can shut down
                for _, _, hold in self._holds:
                    hold.release()
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.git.close()

    def __enter__(self) -> "GitHubDouble":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- test programming ------------------------------------------------------------------
    def add_pull(self, repo: str, number: int, head_sha: str, base_sha: str, **kw) -> PullState:
        """A pull request; when git hosts `repo`, its refs/pull/N/head too (from `head_repo`)."""
        with self.lock:
            pull = PullState(number=number, head_sha=head_sha, base_sha=base_sha, **kw)
            self.pulls[(repo, number)] = pull
            if repo in self.git.repos:
                self.git.set_pull_head(repo, number, head_sha, head_repo=pull.head_repo)
            return pull

    def push(self, repo: str, number: int, head_sha: str) -> None:
        with self.lock:
            pull = self.pulls[(repo, number)]
            pull.head_sha = head_sha
            if repo in self.git.repos:
                self.git.set_pull_head(repo, number, head_sha, head_repo=pull.head_repo)

    def set_permission(self, repo: str, user: str, permission: str) -> None:
        with self.lock:
            self.permissions[(repo, user)] = permission

    def set_file(self, repo: str, path: str, text: str, ref: str = "") -> None:
        with self.lock:
            self.contents[(repo, path, ref)] = text

    def add_user_comment(self, repo: str, number: int, user: str, body: str) -> int:
        """A comment written by someone else (tests use it to seed a thread)."""
        with self.lock:
            comment_id = self.new_id()
            self.comments[comment_id] = {"repo": repo, "issue": number, "body": body, "user": user,
                                         "reactions": [], "created_at": _now_iso(),
                                         "updated_at": _now_iso(), "edits": 0}
            return comment_id

    def add_workflow_run(self, repo: str, run_id: int, head_sha: str, jobs: list[dict],
                         *, check_suite_id: int = 42, conclusion: str = "failure") -> None:
        """jobs: [{"id", "name", "conclusion", "log"}, optionally "steps" (the API's: number,
        name, conclusion, started_at, completed_at) and "head_branch"]."""
        with self.lock:
            self.workflow_runs[(repo, run_id)] = {
                "id": run_id, "head_sha": head_sha, "check_suite_id": check_suite_id,
                "conclusion": conclusion, "status": "completed", "run_attempt": 1}
            for job in jobs:
                self.jobs[(repo, job["id"])] = {**job, "run_id": run_id, "head_sha": head_sha}
                self.logs[job["id"]] = job.get("log", "")

    def finish_rerun(self, repo: str, run_id: int, conclusion: str = "success") -> None:
        """The re-run GitHub started (`rerun-failed-jobs`) ends: its queued jobs and the run
        complete with `conclusion`."""
        with self.lock:
            run = self.workflow_runs[(repo, run_id)]
            run.update(status="completed", conclusion=conclusion)
            for (r, _), job in self.jobs.items():
                if r == repo and job["run_id"] == run_id and job.get("status") == "queued":
                    job.update(status="completed", conclusion=conclusion)
            self.changed.notify_all()

    def fail(self, method: str, route: str, status: int, *, times: int = 1,
             headers: dict | None = None, message: str = "", applied: bool = False) -> None:
        """The next `times` requests matching METHOD + route regex (on the path) get `status`;
        with `applied` the request is carried out first (a lost answer, not a refusal)."""
        with self.lock:
            self._faults.append((method.upper(), re.compile(route),
                                 Fault(status, dict(headers or {}), message, times, applied)))

    def fail_rate_limited(self, method: str, route: str, *, reset_in: float = 1.0,
                          times: int = 1) -> None:
        self.fail(method, route, 403, times=times, message="API rate limit exceeded for installation.",
                  headers={"X-RateLimit-Remaining": "0",
                           "X-RateLimit-Reset": str(int(time.time() + reset_in) + 1)})

    def fail_secondary(self, method: str, route: str, *, retry_after: int = 1, times: int = 1) -> None:
        self.fail(method, route, 429, times=times, headers={"Retry-After": str(retry_after)},
                  message="You have exceeded a secondary rate limit. Please wait a few minutes "
                          "before you try again.")

    def token_valid(self, token: str) -> bool:
        """An installation token this double issued, unexpired and not revoked, or one of
        `git_tokens`."""
        with self.lock:
            if token in self.git_tokens:
                return True
            expiry = self.token_expiry.get(token)
            return expiry is not None and expiry > time.time() and token not in self.revoked

    def revoke_tokens(self) -> list[str]:
        """Revoke every installation token issued so far (as GitHub does when an App is
        suspended or a token is deleted): each is refused with 401 from now on."""
        with self.lock:
            self.revoked |= set(self.token_expiry)
            return sorted(self.token_expiry)

    def hold(self, method: str, route: str, *, times: int = 1) -> Hold:
        hold = Hold(times=times)
        with self.lock:
            self._holds.append((method.upper(), re.compile(route), hold))
        return hold

    # ---- inspection ------------------------------------------------------------------------
    def comments_on(self, repo: str, issue: int) -> list[dict]:
        with self.lock:
            return [dict(c, id=i) for i, c in sorted(self.comments.items())
                    if c["repo"] == repo and c["issue"] == issue]

    def check_runs_for(self, repo: str, head_sha: str | None = None) -> list[dict]:
        with self.lock:
            return [copy.deepcopy(r) for _, r in sorted(self.check_runs.items())
                    if r["repo"] == repo and head_sha in (None, r["head_sha"])]

    def issues_in(self, repo: str) -> list[dict]:
        """The repository's issues (not pull requests), oldest first, with their comments."""
        with self.lock:
            return [dict(copy.deepcopy(i), comments=self.comments_on(repo, n))
                    for (r, n), i in sorted(self.issues.items()) if r == repo]

    def labels_on(self, repo: str, number: int) -> list[str]:
        with self.lock:
            return list(self.pulls[(repo, number)].labels)

    def requests_to(self, method: str, route: str) -> list[Recorded]:
        pattern = re.compile(route)
        with self.lock:
            return [r for r in self.requests if r.method == method.upper() and pattern.search(r.path)]

    def wait_for(self, predicate, timeout: float = 60.0, message: str = "condition"):
        """Block until predicate() is truthy (re-checked on every state change); return it."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                value = predicate()
                if value:
                    return value
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"GitHub double: timed out waiting for {message}")
                self.changed.wait(min(remaining, 0.5))

    # ---- fixtures --------------------------------------------------------------------------
    def fixture(self, name: str):
        if name not in self._fixtures:
            text = (self.fixtures_dir / name).read_text()
            self._fixtures[name] = json.loads(text) if name.endswith(".json") else text
        return self._rebase(copy.deepcopy(self._fixtures[name]))

    def _rebase(self, value):
        if isinstance(value, str):
            return value.replace(GITHUB_API, self.url)
        if isinstance(value, list):
            return [self._rebase(v) for v in value]
        if isinstance(value, dict):
            return {k: self._rebase(v) for k, v in value.items()}
        return value

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _user(self, login: str) -> dict:
        user = self.fixture("issues-create-comment.json")["user"]
        user.update(login=login, type="Bot" if login.endswith("[bot]") else "User",
                    url=f"{self.url}/users/{quote(login)}")
        return user

    def add_oauth_app(self, client_id: str, client_secret: str) -> None:
        with self.lock:
            self.oauth_apps[client_id] = client_secret

    def sign_in(self, login: str | None, repos: dict[str, bool] | None = None, *, writable=()) -> None:
        """`login` approves the next authorize requests; `repos`: full_name -> private, the
        ones in `writable` with push permission."""
        with self.lock:
            self.oauth_user = login
            if login and repos is not None:
                self.user_repos[login] = dict(repos)
                self.user_writable[login] = set(writable)

    # ---- fault/hold lookup (called by the handler) -----------------------------------------
    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for m, pattern, fault in self._faults:
                if m == method and pattern.search(path) and fault.times > 0:
                    fault.times -= 1
                    return fault
        return None

    def _take_hold(self, method: str, path: str) -> Hold | None:
        with self.lock:
            for m, pattern, hold in self._holds:
                if m == method and pattern.search(path) and hold.times > 0:
                    hold.times -= 1
                    return hold
        return None


class _Handler(BaseHTTPRequestHandler):
    owner: GitHubDouble
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep test output clean; requests are recorded
        return

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        double = self.owner
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        if git_http.match(path):
            return self._git(method, path, parts.query)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        headers = {k: v for k, v in self.headers.items() if k.lower() != "authorization"}
        token = (self.headers.get("Authorization") or "").removeprefix("token ").removeprefix("Bearer ").strip()
        record = Recorded(method, path, query, headers, body,
                          token=token if token in double.token_expiry else None)
        with double.lock:
            double.requests.append(record)
        if token in double.user_tokens:  # a user's OAuth token: /user and /user/repos answer for them
            query = dict(query, _token=token)
        hold = double._take_hold(method, path)
        if hold is not None:
            hold.reached.set()
            hold.released.wait(timeout=120)
        fault = double._take_fault(method, path)
        if fault is not None and fault.applied:
            _route(double, method, path, query, body)
        if fault is not None:
            status, payload, extra = fault.status, {"message": fault.message or "fault"}, fault.headers
        elif self.headers.get("Authorization") is None and not path.startswith(("/_logs/", "/login/oauth/")):
            status, payload, extra = 401, {"message": "Requires authentication"}, {}
        elif record.token and (record.token in double.revoked
                               or double.token_expiry[record.token] <= time.time()):
            status, payload, extra = 401, {"message": "Bad credentials"}, {}
        else:
            status, payload, extra = _route(double, method, path, query, body)
        record.status = status
        self._send(status, payload, extra)
        with double.changed:
            double.changed.notify_all()

    def _git(self, method: str, path: str, query: str) -> None:
        """git smart HTTP (etriage/dev/git_http.py): recorded, held and faulted like any route;
        the token is checked on every request."""
        double = self.owner
        repo, rest = git_http.match(path)
        body = git_http.read_body(self.rfile, self.headers)
        token = git_http.basic_token(self.headers.get("Authorization"))
        record = Recorded(method, path, parse_qs(query), {k: v for k, v in self.headers.items()
                                                           if k.lower() != "authorization"},
                          git_http.plain_body(body, self.headers),  # pkt-lines: what git asked for
                          token=token if token in double.token_expiry else None)
        with double.lock:
            double.requests.append(record)
        hold = double._take_hold(method, path)
        if hold is not None:
            hold.reached.set()
            hold.released.wait(timeout=120)
        fault = double._take_fault(method, path)
        refused = double.git.authorized(repo, token, double.token_valid)
        if fault is not None:
            status, headers, data = fault.status, dict(fault.headers), (fault.message or "fault").encode()
        elif refused is not None:
            status, data = refused[0], f"remote: {refused[1]}\n".encode()
            headers = {"WWW-Authenticate": 'Basic realm="GitHub"'} if status == 401 else {}
        else:
            status, headers, data = double.git.serve(repo, rest, method=method, query=query, body=body,
                                                     headers=self.headers)
        record.status = status
        self.send_response(status)
        headers.setdefault("Content-Type", "text/plain")
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        with double.changed:
            double.changed.notify_all()

    def _send(self, status: int, payload, extra: dict) -> None:
        if isinstance(payload, str):
            data, ctype = payload.encode(), "text/plain; charset=utf-8"
        elif payload is None:
            data, ctype = b"", "application/json"
        else:
            data, ctype = json.dumps(payload).encode(), "application/json; charset=utf-8"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        rate = self.owner.fixture("headers.rate-limit-and-link.json")
        if "X-RateLimit-Remaining" not in extra:
            self.send_header("X-RateLimit-Limit", str(rate["X-RateLimit-Limit"]))
            self.send_header("X-RateLimit-Remaining", str(rate["X-RateLimit-Remaining"]))
            self.send_header("X-RateLimit-Reset", str(int(time.time()) + 3600))
        for key, value in extra.items():
            self.send_header(key, str(value))
        self.end_headers()
        self.wfile.write(data)


# ---- routes -----------------------------------------------------------------------------------
_REPO = r"/repos/(?P<repo>[^/]+/[^/]+)"
_ROUTES: list[tuple[str, re.Pattern, str]] = []


def route(method: str, pattern: str):
    def register(fn):
        _ROUTES.append((method, re.compile(f"^{pattern}$"), fn.__name__))
        return fn
    return register


def _route(double: GitHubDouble, method: str, path: str, query: dict, body):
    for m, pattern, name in _ROUTES:
        match = pattern.match(path)
        if m == method and match:
            with double.lock:
                return globals()[name](double, query=query, body=body or {}, **match.groupdict())
    return 404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}, {}


def _pull_json(d: GitHubDouble, repo: str, pull: PullState) -> dict:
    data = d.fixture("pulls-get.json")
    base_url = f"{d.url}/repos/{repo}"
    data.update(number=pull.number, url=f"{base_url}/pulls/{pull.number}",
                issue_url=f"{base_url}/issues/{pull.number}",
                comments_url=f"{base_url}/issues/{pull.number}/comments",
                user=d._user(pull.author), author_association=pull.author_association,
                labels=[{"name": name} for name in pull.labels], state="open")
    data["head"].update(sha=pull.head_sha, ref=pull.head_ref)
    data["base"].update(sha=pull.base_sha, ref=pull.base_ref)
    for side in ("head", "base"):
        data[side]["repo"].update(full_name=repo, url=base_url, name=repo.split("/")[1])
    if pull.head_repo and pull.head_repo != repo:  # a fork's pull request; null once it is deleted
        data["head"]["repo"] = (dict(data["head"]["repo"], full_name=pull.head_repo, url=f"{d.url}/repos/{pull.head_repo}",
                                     name=pull.head_repo.split("/")[1], fork=True)
                                if pull.head_repo in d.git.repos else None)
    return data


def _pull_or_404(d, repo, number):
    pull = d.pulls.get((repo, int(number)))
    if pull is None:
        return None, (404, {"message": "Not Found"}, {})
    return pull, None


@route("POST", r"/app/installations/(?P<installation>\d+)/access_tokens")
def create_token(d, installation, query, body):
    d.tokens_issued += 1
    token = f"ghs_double{installation}x{d.tokens_issued:04d}"
    # GitHub states expiry to the second; the token is refused from that second on.
    expires = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=d.token_lifetime)
    d.token_expiry[token] = expires.timestamp()
    data = d.fixture("apps-create-installation-access-token.json")
    data.update(token=token, expires_at=expires.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return 201, data, {}


@route("GET", r"/rate_limit")
def rate_limit(d, query, body):
    return 200, d.fixture("rate-limit-get.json"), {}


@route("GET", _REPO + r"/pulls/(?P<number>\d+)")
def get_pull(d, repo, number, query, body):
    pull, error = _pull_or_404(d, repo, number)
    return error or (200, _pull_json(d, repo, pull), {})


@route("GET", _REPO + r"/pulls/(?P<number>\d+)/files")
def list_pull_files(d, repo, number, query, body):
    pull, error = _pull_or_404(d, repo, number)
    if error:
        return error
    example = d.fixture("pulls-list-files.json")[0]
    return 200, [dict(example, filename=name, status=status) for name, status in pull.files], {}


@route("GET", _REPO + r"/commits/(?P<sha>[0-9a-f]+)/pulls")
def pulls_for_commit(d, repo, sha, query, body):
    return 200, [_pull_json(d, repo, p) for (r, _), p in d.pulls.items()
                 if r == repo and p.head_sha == sha], {}


def _comment_json(d: GitHubDouble, comment_id: int) -> dict:
    c = d.comments[comment_id]
    data = d.fixture("issues-create-comment.json")
    base_url = f"{d.url}/repos/{c['repo']}"
    data.update(id=comment_id, body=c["body"], user=d._user(c["user"]),
                url=f"{base_url}/issues/comments/{comment_id}",
                issue_url=f"{base_url}/issues/{c['issue']}",
                html_url=f"https://github.com/{c['repo']}/pull/{c['issue']}#issuecomment-{comment_id}",
                created_at=c["created_at"], updated_at=c["updated_at"])
    return data


@route("GET", _REPO + r"/issues/(?P<number>\d+)/comments")
def list_comments(d, repo, number, query, body):
    ids = [i for i, c in sorted(d.comments.items()) if c["repo"] == repo and c["issue"] == int(number)]
    per_page = int(query.get("per_page", 30))
    page = int(query.get("page", 1))
    chunk = ids[(page - 1) * per_page: page * per_page]
    headers = {}
    if page * per_page < len(ids):
        next_url = f"{d.url}/repos/{repo}/issues/{number}/comments?per_page={per_page}&page={page + 1}"
        headers["Link"] = f'<{next_url}>; rel="next"'
    return 200, [_comment_json(d, i) for i in chunk], headers


@route("POST", _REPO + r"/issues/(?P<number>\d+)/comments")
def create_comment(d, repo, number, query, body):
    comment_id = d.new_id()
    d.comments[comment_id] = {"repo": repo, "issue": int(number), "body": body.get("body", ""),
                              "user": d.bot_login, "reactions": [], "created_at": _now_iso(),
                              "updated_at": _now_iso(), "edits": 0}
    return 201, _comment_json(d, comment_id), {}


@route("GET", _REPO + r"/issues/comments/(?P<comment_id>\d+)")
def get_comment(d, repo, comment_id, query, body):
    if int(comment_id) not in d.comments:
        return 404, {"message": "Not Found"}, {}
    return 200, _comment_json(d, int(comment_id)), {}


@route("PATCH", _REPO + r"/issues/comments/(?P<comment_id>\d+)")
def update_comment(d, repo, comment_id, query, body):
    comment = d.comments.get(int(comment_id))
    if comment is None:
        return 404, {"message": "Not Found"}, {}
    if comment["user"] != d.bot_login:
        return 403, {"message": "Resource not accessible by integration"}, {}
    comment.update(body=body.get("body", comment["body"]), updated_at=_now_iso())
    comment["edits"] += 1
    return 200, _comment_json(d, int(comment_id)), {}


@route("POST", _REPO + r"/issues/comments/(?P<comment_id>\d+)/reactions")
def create_reaction(d, repo, comment_id, query, body):
    comment = d.comments.get(int(comment_id))
    if comment is None:
        return 404, {"message": "Not Found"}, {}
    content = body.get("content")
    existing = content in comment["reactions"]
    if not existing:
        comment["reactions"].append(content)
    reaction = {"id": d.new_id(), "node_id": "MDg6UmVhY3Rpb24x", "content": content,
                "user": d._user(d.bot_login), "created_at": _now_iso()}
    return (200 if existing else 201), reaction, {}


def _labels_json(d, names):
    example = d.fixture("issues-add-labels.json")[0]
    return [dict(example, name=name, url=f"{d.url}/labels/{quote(name)}") for name in names]


@route("GET", _REPO + r"/issues/(?P<number>\d+)/labels")
def list_labels(d, repo, number, query, body):
    pull, error = _pull_or_404(d, repo, number)
    return error or (200, _labels_json(d, pull.labels), {})


@route("POST", _REPO + r"/issues/(?P<number>\d+)/labels")
def add_labels(d, repo, number, query, body):
    pull, error = _pull_or_404(d, repo, number)
    if error:
        return error
    names = body.get("labels", []) if isinstance(body, dict) else body
    for name in names:
        if name not in pull.labels:
            pull.labels.append(name)
    return 200, _labels_json(d, pull.labels), {}


@route("DELETE", _REPO + r"/issues/(?P<number>\d+)/labels/(?P<name>.+)")
def remove_label(d, repo, number, name, query, body):
    pull, error = _pull_or_404(d, repo, number)
    if error:
        return error
    if name not in pull.labels:
        return 404, {"message": "Label does not exist"}, {}
    pull.labels.remove(name)
    return 200, _labels_json(d, pull.labels), {}


@route("GET", _REPO + r"/collaborators/(?P<user>[^/]+)/permission")
def permission(d, repo, user, query, body):
    data = d.fixture("repos-get-collaborator-permission-level.json")
    level = d.permissions.get((repo, user), "read")
    data.update(permission=level, role_name=level)
    data["user"]["login"] = user
    return 200, data, {}


def _check_run_json(d, run_id):
    run = d.check_runs[run_id]
    data = d.fixture("checks-update.json")
    data.update({k: v for k, v in run.items() if k not in ("repo", "annotations", "patches")})
    data.update(id=run_id, url=f"{d.url}/repos/{run['repo']}/check-runs/{run_id}")
    data["output"] = dict(run.get("output") or {}, annotations_count=len(run["annotations"]))
    data["app"]["slug"] = d.bot_login.removesuffix("[bot]")
    return data


def _apply_check_run(run: dict, body: dict) -> None:
    for key in ("name", "head_sha", "status", "conclusion", "details_url", "external_id",
                "started_at", "completed_at"):
        if key in body:
            run[key] = body[key]
    if "output" in body:
        output = dict(body["output"])
        run["annotations"].extend(output.pop("annotations", []) or [])
        run["output"] = output
    if run.get("conclusion") and "status" not in body:
        run["status"] = "completed"
    run["patches"] += 1


@route("POST", _REPO + r"/check-runs")
def create_check_run(d, repo, query, body):
    annotations = (body.get("output") or {}).get("annotations") or []
    if len(annotations) > 50:
        return 422, {"message": "Only 50 annotations are allowed per request"}, {}
    run_id = d.new_id()
    d.check_runs[run_id] = {"repo": repo, "status": "queued", "conclusion": None,
                            "annotations": [], "patches": -1, "output": {}}
    _apply_check_run(d.check_runs[run_id], body)
    return 201, _check_run_json(d, run_id), {}


@route("PATCH", _REPO + r"/check-runs/(?P<run_id>\d+)")
def update_check_run(d, repo, run_id, query, body):
    run = d.check_runs.get(int(run_id))
    if run is None:
        return 404, {"message": "Not Found"}, {}
    if len((body.get("output") or {}).get("annotations") or []) > 50:
        return 422, {"message": "Only 50 annotations are allowed per request"}, {}
    _apply_check_run(run, body)
    return 200, _check_run_json(d, int(run_id)), {}


@route("GET", _REPO + r"/commits/(?P<ref>[^/]+)/check-runs")
def list_check_runs(d, repo, ref, query, body):
    runs = [_check_run_json(d, i) for i, r in sorted(d.check_runs.items())
            if r["repo"] == repo and r["head_sha"] == ref
            and query.get("check_name") in (None, r.get("name"))]
    return 200, {"total_count": len(runs), "check_runs": runs}, {}


def _run_json(d, repo, run):
    data = d.fixture("actions-get-workflow-run.json")
    data.update(id=run["id"], head_sha=run["head_sha"], check_suite_id=run["check_suite_id"],
                status=run["status"], conclusion=run["conclusion"], run_attempt=run["run_attempt"],
                html_url=f"https://github.com/{repo}/actions/runs/{run['id']}",
                url=f"{d.url}/repos/{repo}/actions/runs/{run['id']}",
                jobs_url=f"{d.url}/repos/{repo}/actions/runs/{run['id']}/jobs")
    return data


def _job_json(d, repo, job):
    data = d.fixture("actions-get-job-for-workflow-run.json")
    data.update(id=job["id"], run_id=job["run_id"], head_sha=job["head_sha"], name=job["name"],
                conclusion=job.get("conclusion", "failure"), status=job.get("status", "completed"),
                html_url=f"https://github.com/{repo}/actions/runs/{job['run_id']}/job/{job['id']}",
                head_branch=job.get("head_branch", data["head_branch"]),
                url=f"{d.url}/repos/{repo}/actions/jobs/{job['id']}",
                run_url=f"{d.url}/repos/{repo}/actions/runs/{job['run_id']}")
    if "steps" in job:
        data["steps"] = copy.deepcopy(job["steps"])
    if data["conclusion"] is None:
        data["completed_at"] = None
    return data


@route("GET", _REPO + r"/actions/runs")
def list_runs(d, repo, query, body):
    runs = [_run_json(d, repo, r) for (rp, _), r in sorted(d.workflow_runs.items())
            if rp == repo and str(r["check_suite_id"]) == query.get("check_suite_id", str(r["check_suite_id"]))
            and r["head_sha"] == query.get("head_sha", r["head_sha"])]
    return 200, {"total_count": len(runs), "workflow_runs": runs}, {}


@route("POST", _REPO + r"/actions/runs/(?P<run_id>\d+)/rerun-failed-jobs")
def rerun_failed_jobs(d, repo, run_id, query, body):
    """GitHub's `actions/re-run-workflow-failed-jobs`: 201 with an empty object; the run's
    failed (and cancelled) jobs are queued again under the next attempt. A run still going
    cannot be re-run (403, as GitHub answers)."""
    run = d.workflow_runs.get((repo, int(run_id)))
    if run is None:
        return 404, {"message": "Not Found"}, {}
    if run["status"] != "completed":
        return 403, {"message": "This workflow is already running"}, {}
    failed = [job for (r, _), job in d.jobs.items() if r == repo and job["run_id"] == int(run_id)
              and job.get("conclusion", "failure") in ("failure", "timed_out", "cancelled", "startup_failure")]
    if not failed:
        return 403, {"message": "This workflow run has no failed jobs to re-run"}, {}
    for job in failed:
        job.update(status="queued", conclusion=None)
    run.update(status="queued", conclusion=None, run_attempt=run["run_attempt"] + 1)
    return 201, {}, {}


@route("GET", _REPO + r"/actions/runs/(?P<run_id>\d+)")
def get_run(d, repo, run_id, query, body):
    run = d.workflow_runs.get((repo, int(run_id)))
    return (200, _run_json(d, repo, run), {}) if run else (404, {"message": "Not Found"}, {})


@route("GET", _REPO + r"/actions/runs/(?P<run_id>\d+)/jobs")
def list_jobs(d, repo, run_id, query, body):
    jobs = [_job_json(d, repo, j) for (rp, _), j in sorted(d.jobs.items())
            if rp == repo and j["run_id"] == int(run_id)]
    return 200, {"total_count": len(jobs), "jobs": jobs}, {}


@route("GET", _REPO + r"/actions/jobs/(?P<job_id>\d+)")
def get_job(d, repo, job_id, query, body):
    job = d.jobs.get((repo, int(job_id)))
    return (200, _job_json(d, repo, job), {}) if job else (404, {"message": "Not Found"}, {})


@route("GET", _REPO + r"/actions/jobs/(?P<job_id>\d+)/logs")
def job_logs(d, repo, job_id, query, body):
    if int(job_id) not in d.logs:
        return 404, {"message": "Not Found"}, {}
    example = d.fixture("actions-download-job-logs-for-workflow-run.302.json")
    signed = urlsplit(example["headers"]["Location"])
    return 302, None, {"Location": f"{d.url}/_logs/{job_id}?{signed.query}"}


@route("GET", r"/_logs/(?P<job_id>\d+)")
def log_text(d, job_id, query, body):
    return 200, d.logs[int(job_id)], {}


@route("GET", _REPO + r"/contents/(?P<path>.+)")
def get_contents(d, repo, path, query, body):
    import base64

    text = d.contents.get((repo, path, query.get("ref", ""))) or d.contents.get((repo, path, ""))
    if text is None:
        return 404, {"message": "Not Found"}, {}
    return 200, {"type": "file", "encoding": "base64", "name": path.rsplit("/", 1)[-1],
                 "path": path, "sha": "3d21ec53a331a6f037a91c368710b99387d012c1",
                 "size": len(text.encode()), "url": f"{d.url}/repos/{repo}/contents/{path}",
                 "content": base64.b64encode(text.encode()).decode()}, {}


# ---- issues (not pull requests): the trunk issues of bot/trunk_issues.py ----------------------
_EXAMPLES = Path(__file__).resolve().parent / "github_examples"  # see its README


def _example(d: GitHubDouble, name: str):
    key = f"github_examples/{name}"
    if key not in d._fixtures:
        d._fixtures[key] = json.loads((_EXAMPLES / name).read_text())
    return d._rebase(copy.deepcopy(d._fixtures[key]))


def _issue_json(d: GitHubDouble, repo: str, number: int) -> dict:
    issue = d.issues[(repo, number)]
    data = _example(d, "issues-create.json")
    base_url = f"{d.url}/repos/{repo}"
    data.pop("pull_request", None)  # GitHub sets it on pull requests only
    data.update(number=number, id=issue["id"], title=issue["title"], body=issue["body"], state=issue["state"],
                user=d._user(issue["user"]), labels=_labels_json(d, issue["labels"]),
                url=f"{base_url}/issues/{number}", repository_url=base_url,
                comments_url=f"{base_url}/issues/{number}/comments",
                html_url=f"https://github.com/{repo}/issues/{number}",
                comments=sum(1 for c in d.comments.values() if c["repo"] == repo and c["issue"] == number),
                created_at=issue["created_at"], updated_at=issue["updated_at"], closed_at=issue["closed_at"],
                state_reason=issue["state_reason"])
    return data


def _issue_or_404(d, repo, number):
    if (repo, int(number)) not in d.issues:
        return None, (404, {"message": "Not Found"}, {})
    return d.issues[(repo, int(number))], None


def _invalid(field_name: str, message: str):
    return 422, {"message": "Validation Failed",
                 "errors": [{"resource": "Issue", "field": field_name, "code": "invalid", "message": message}]}, {}


@route("POST", _REPO + r"/issues")
def create_issue(d, repo, query, body):
    title = body.get("title") if isinstance(body, dict) else None
    if not isinstance(title, str) or not title.strip():
        return _invalid("title", "title is missing")
    if len(title) > 256:
        return _invalid("title", "title is too long (maximum is 256 characters)")
    if len(body.get("body") or "") > 65536:
        return _invalid("body", "body is too long (maximum is 65536 characters)")
    number = max([n for (r, n) in list(d.pulls) + list(d.issues) if r == repo] or [0]) + 1
    d.issues[(repo, number)] = {"id": d.new_id(), "title": title, "body": body.get("body") or "",
                                "state": "open", "state_reason": None, "user": d.bot_login,
                                "labels": [str(name) for name in body.get("labels") or []],
                                "created_at": _now_iso(), "updated_at": _now_iso(), "closed_at": None,
                                "edits": 0}
    return 201, _issue_json(d, repo, number), {}


@route("GET", _REPO + r"/issues/(?P<number>\d+)")
def get_issue(d, repo, number, query, body):
    issue, error = _issue_or_404(d, repo, number)
    return error or (200, _issue_json(d, repo, int(number)), {})


@route("PATCH", _REPO + r"/issues/(?P<number>\d+)")
def update_issue(d, repo, number, query, body):
    issue, error = _issue_or_404(d, repo, number)
    if error:
        return error
    if issue["user"] != d.bot_login:
        return 403, {"message": "Resource not accessible by integration"}, {}
    if "state" in body and body["state"] not in ("open", "closed"):
        return _invalid("state", "state must be open or closed")
    for key in ("title", "body"):
        if key in body:
            issue[key] = body[key] or ""
    if "state" in body and body["state"] != issue["state"]:
        issue["state"] = body["state"]
        issue["closed_at"] = _now_iso() if body["state"] == "closed" else None
        issue["state_reason"] = (body.get("state_reason") or "completed") if body["state"] == "closed" else "reopened"
    issue["updated_at"] = _now_iso()
    issue["edits"] += 1
    return 200, _issue_json(d, repo, int(number)), {}


@route("GET", _REPO + r"/issues")
def list_issues(d, repo, query, body):
    """GitHub's filters that the bot uses: state (open, closed, all; default open), labels (all
    of the comma-separated names), creator; paginated with a Link header."""
    state = query.get("state", "open")
    labels = [name for name in (query.get("labels") or "").split(",") if name]
    numbers = [n for (r, n), issue in sorted(d.issues.items(), key=lambda kv: -kv[0][1]) if r == repo
               and state in ("all", issue["state"]) and all(name in issue["labels"] for name in labels)
               and query.get("creator") in (None, issue["user"])]
    per_page, page = min(int(query.get("per_page", 30)), 100), int(query.get("page", 1))
    chunk = numbers[(page - 1) * per_page: page * per_page]
    headers = {}
    if page * per_page < len(numbers):
        headers["Link"] = (f'<{d.url}/repos/{repo}/issues?state={state}&labels={quote(",".join(labels))}'
                           f'&per_page={per_page}&page={page + 1}>; rel="next"')
    return 200, [_issue_json(d, repo, n) for n in chunk], headers


# ---- OAuth web flow (a GitHub App's user login) -------------------------------------------------
@route("GET", r"/login/oauth/authorize")
def oauth_authorize(d, query, body):
    """GitHub's consent page, answered at once: the signed-in user approves (or, with nobody
    signed in, denies) and the browser goes back to redirect_uri with a code and the state."""
    client, redirect_uri, state = query.get("client_id"), query.get("redirect_uri", ""), query.get("state", "")
    if client not in d.oauth_apps or not redirect_uri:
        return 404, {"message": "Not Found"}, {}
    separator = "&" if "?" in redirect_uri else "?"
    if d.oauth_user is None:
        target = f"{redirect_uri}{separator}error=access_denied&state={quote(state)}"
    else:
        code = f"code{d.new_id()}"
        d.oauth_codes[code] = (client, d.oauth_user)
        target = f"{redirect_uri}{separator}code={code}&state={quote(state)}"
    return 302, None, {"Location": target}


@route("POST", r"/login/oauth/access_token")
def oauth_access_token(d, query, body):
    form = body if isinstance(body, dict) else {k: v[-1] for k, v in parse_qs(body or "").items()}
    client, secret, code = form.get("client_id"), form.get("client_secret"), form.get("code")
    if d.oauth_apps.get(client) != secret or client is None:
        return 200, {"error": "incorrect_client_credentials",
                     "error_description": "The client_id and/or client_secret passed are incorrect."}, {}
    issued = d.oauth_codes.pop(code or "", None)
    if issued is None or issued[0] != client:
        return 200, {"error": "bad_verification_code",
                     "error_description": "The code passed is incorrect or expired."}, {}
    token = f"ghu_double{d.new_id()}"
    d.user_tokens[token] = issued[1]
    return 200, {"access_token": token, "token_type": "bearer", "scope": ""}, {}


def _user_of_token(d, query) -> str | None:
    return d.user_tokens.get(query.get("_token", ""))


@route("GET", r"/user")
def authenticated_user(d, query, body):
    login = _user_of_token(d, query)
    if login is None:
        return 401, {"message": "Bad credentials"}, {}
    return 200, d._user(login), {}


@route("GET", r"/user/repos")
def repos_of_user(d, query, body):
    login = _user_of_token(d, query)
    if login is None:
        return 401, {"message": "Bad credentials"}, {}
    template = d.fixture("pulls-get.json")["base"]["repo"]
    repos = []
    for full_name, private in sorted(d.user_repos.get(login, {}).items()):
        repo = copy.deepcopy(template)
        repo.update(full_name=full_name, name=full_name.split("/")[1], private=private,
                    url=f"{d.url}/repos/{full_name}",
                    permissions={"admin": False, "maintain": False, "triage": False, "pull": True,
                                 "push": full_name in d.user_writable.get(login, ())})
        repos.append(repo)
    per_page, page = int(query.get("per_page", 30)), int(query.get("page", 1))
    chunk = repos[(page - 1) * per_page: page * per_page]
    headers = {}
    if page * per_page < len(repos):
        headers["Link"] = f'<{d.url}/user/repos?per_page={per_page}&page={page + 1}>; rel="next"'
    return 200, chunk, headers
