"""Which GitHub event becomes which piece of work: one small handler per event and action.

Handlers are pure: they read the payload and return `Enqueue` (the name of a `bot.publisher.Publisher`
function and its plain-value arguments) or `Ignore` (the reason, which the webhook answers with).
The webhook does the side effects. Decisions worth knowing:

- Draft pull requests are not triaged; `ready_for_review` starts the triage.
- CI completions (`workflow_run`, `workflow_job`, `check_suite`) are enqueued only when they
  concluded failure / timed_out / cancelled / startup_failure: those have logs to pull and
  classify. A success, neutral or skipped completion has nothing to triage; it is acknowledged
  (202, "ignored", with the conclusion in the detail) and logged, not enqueued. Check suites of
  GitHub Actions are skipped (the workflow_run/workflow_job events carry the same failure) and so
  are the bot's own check suites (its failing check run must not trigger itself).
- A push to a branch pull requests target (the default branch, `release/*`) queues a build of
  that commit's environment on the `build` queue, so a PR opened on it starts warm.
- Comments are enqueued only on pull requests, only when a human wrote them and only when they
  hold a new `/etriage` command (an edit that adds none costs nothing).
- Times GitHub stamped travel with the work: a head's `pushed_at` (the pull request's
  `updated_at` when it was opened or pushed to) and a comment's `written_at` (its `updated_at`
  for an edit, else `created_at`), so `/etriage ok-to-test` approves the head that was there
  when the maintainer wrote it, never a later one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Callable

from bot import commands

FAILED_CONCLUSIONS = frozenset({"failure", "timed_out", "cancelled", "startup_failure"})


@dataclass(frozen=True)
class Enqueue:
    task: str  # a method of bot.publisher.Publisher (bot.queues names the tasks behind them)
    args: tuple
    kwargs: dict = field(default_factory=dict)
    summary: str = ""


@dataclass(frozen=True)
class Ignore:
    reason: str


class PayloadError(ValueError):
    """The payload lacks a field its event must have, or has it with the wrong type (400)."""


# What each kind of field must be; bool is not an id even though Python counts it as an int.
KINDS = {str: "a string", int: "an integer", bool: "true or false", dict: "an object"}


def _check(name: str, dotted: str, value, kind: type | None):
    if kind is None or value is None:
        return value
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise PayloadError(f"{name} payload's {dotted} must be {KINDS[kind]}")
    return value


@dataclass(frozen=True)
class Event:
    name: str
    action: str | None
    payload: dict
    bot_login: str

    def get(self, dotted: str, kind: type | None = None):
        """A field the event must have, of `kind` when given: `get("pull_request.head.sha", str)`."""
        parent, _, key = dotted.rpartition(".")
        section = self.section(parent) if parent else self.payload
        if section.get(key) is None:
            raise PayloadError(f"{self.name} payload has no {dotted}")
        return _check(self.name, dotted, section[key], kind)

    def optional(self, dotted: str, kind: type | None = None):
        """A field that may be absent or null (its parent must be there): None then."""
        parent, _, key = dotted.rpartition(".")
        return _check(self.name, dotted, (self.section(parent) if parent else self.payload).get(key), kind)

    def section(self, dotted: str) -> dict:
        value = self.payload
        for key in dotted.split("."):
            value = value.get(key) if isinstance(value, dict) else None
            if not isinstance(value, dict):
                raise PayloadError(f"{self.name} payload has no object {dotted}")
        return value

    @property
    def repo(self) -> str:
        return self.get("repository.full_name", str)

    @property
    def installation_id(self) -> int | None:
        installation = _check(self.name, "installation", self.payload.get("installation"), dict)
        return _check(self.name, "installation.id", (installation or {}).get("id"), int)


Handler = Callable[[Event], "Enqueue | Ignore"]
HANDLERS: dict[tuple[str, str], Handler] = {}


def on(event: str, *actions: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for action in actions:
            HANDLERS[(event, action)] = handler
        return handler

    return register


def route(name: str, payload: dict, bot_login: str) -> Enqueue | Ignore:
    """The work one delivery asks for; raises PayloadError when a needed field is missing."""
    action = _check(name, "action", payload.get("action"), str)
    handler = HANDLERS.get((name, action))
    if handler is None:
        known_event = any(event == name for event, _ in HANDLERS)
        what = f"{name}.{action}" if known_event else f"event {name!r}"
        return Ignore(f"{what} is not handled")
    return handler(Event(name, action, payload, bot_login))


@on("pull_request", "opened", "reopened", "synchronize", "ready_for_review")
def triage_the_pull_request(event: Event) -> Enqueue | Ignore:
    pr = event.get("pull_request.number", int)
    if event.optional("pull_request.draft", bool):
        return Ignore(f"#{pr} is a draft: triage starts when it is marked ready for review")
    head_sha = event.get("pull_request.head.sha", str)
    return Enqueue(
        "triage_pr",
        (event.repo, pr, head_sha, event.get("pull_request.base.ref", str), event.installation_id),
        {"reason": f"pull_request.{event.action}", "pushed_at": event.optional("pull_request.updated_at", str)},
        f"triage {event.repo}#{pr} at {head_sha[:12]}",
    )


@on("pull_request", "closed")
def forget_the_closed_pull_request(event: Event) -> Enqueue:
    pr = event.get("pull_request.number", int)
    return Enqueue("pr_closed", (event.repo, pr, event.installation_id), {}, f"close {event.repo}#{pr}")


@on("workflow_run", "completed")
def triage_the_failed_workflow_run(event: Event) -> Enqueue | Ignore:
    return _ci_failure(event, "workflow_run", run_id=event.get("workflow_run.id", int))


@on("workflow_job", "completed")
def triage_the_failed_workflow_job(event: Event) -> Enqueue | Ignore:
    return _ci_failure(
        event, "workflow_job",
        run_id=event.optional("workflow_job.run_id", int), job_id=event.get("workflow_job.id", int),
    )


@on("check_suite", "completed")
def triage_the_failed_check_suite(event: Event) -> Enqueue | Ignore:
    app = event.optional("check_suite.app", dict) or {}
    app_slug = (_check(event.name, "check_suite.app.slug", app.get("slug"), str) or "").lower()
    if app_slug == "github-actions":
        return Ignore("check suite of GitHub Actions: handled through workflow_run/workflow_job")
    if app_slug and app_slug == commands.login_stem(event.bot_login).lower():
        return Ignore("the bot's own check suite")
    return _ci_failure(event, "check_suite", check_suite_id=event.get("check_suite.id", int))


def _ci_failure(event: Event, kind: str, **ids) -> Enqueue | Ignore:
    conclusion = event.optional(f"{kind}.conclusion", str)
    if conclusion not in FAILED_CONCLUSIONS:
        return Ignore(f"{kind} concluded {conclusion or 'without a conclusion'}: no failure to triage")
    head_sha = event.get(f"{kind}.head_sha", str)
    return Enqueue(
        "ci_completed", (event.repo, head_sha, event.installation_id), ids,
        f"{kind} {conclusion} on {event.repo} at {head_sha[:12]}",
    )


@on("issue_comment", "created", "edited")
def run_the_commands_in_the_comment(event: Event) -> Enqueue | Ignore:
    if "pull_request" not in event.section("issue"):
        return Ignore("comment on an issue, not on a pull request")
    author = event.get("comment.user.login", str)
    author_type = event.optional("comment.user.type", str) or "User"
    if commands.is_bot(author, author_type, event.bot_login):
        return Ignore(f"comment by the bot {author!r}: bots are never answered")
    body = event.optional("comment.body", str) or ""
    changes = event.optional("changes", dict) or {}
    previous = _check(event.name, "changes.body.from",
                      (_check(event.name, "changes.body", changes.get("body"), dict) or {}).get("from"), str)
    if event.action == "edited" and previous is None:
        return Ignore("edit without a body change")
    if not commands.new_commands(previous, body, event.bot_login):
        return Ignore("no new /etriage command in the comment")
    pr, comment_id = event.get("issue.number", int), event.get("comment.id", int)
    written_at = event.optional("comment.updated_at" if event.action == "edited" else "comment.created_at", str)
    return Enqueue(
        "comment",
        (event.repo, pr, comment_id, event.installation_id),
        {"author": author, "author_type": author_type, "body": body,
         "previous_body": previous, "action": event.action, "written_at": written_at},
        f"commands in comment {comment_id} on {event.repo}#{pr}",
    )


# Branches pull requests target: the repository's default branch and ExecuTorch's release branches.
WARM_BRANCHES = ("{default}", "release/*")
ZERO_SHA = "0" * 40


@on("push", None)  # a push has no action
def warm_the_pushed_branch(event: Event) -> Enqueue | Ignore:
    ref = event.get("ref", str)
    if not ref.startswith("refs/heads/"):
        return Ignore(f"push of {ref}: not a branch")
    branch, after = ref[len("refs/heads/"):], event.get("after", str)
    if event.optional("deleted", bool) or after == ZERO_SHA:
        return Ignore(f"branch {branch} deleted")
    default = event.optional("repository.default_branch", str) or "main"
    patterns = [p.format(default=default) for p in WARM_BRANCHES]
    if not any(fnmatchcase(branch, p) for p in patterns):
        return Ignore(f"push to {branch}: pull requests target {', '.join(patterns)}")
    return Enqueue("warm_environment", (event.repo, branch, after, event.installation_id), {},
                   f"environment of {event.repo}@{branch} at {after[:12]}")


@on("installation", "created", "deleted", "suspend", "unsuspend", "new_permissions_accepted")
def record_the_installation(event: Event) -> Enqueue:
    installation_id = event.get("installation.id", int)
    account = event.get("installation.account.login", str)
    return Enqueue(
        "installation", (installation_id, account, event.action), {},
        f"installation {installation_id} {event.action} for {account}",
    )
