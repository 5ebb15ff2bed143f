"""Slash commands in pull-request comments: who may run what, and running it (in the worker).

The grammar lives in bot.command_grammar (`parse`, `new_commands`); this module adds the rest:
`handle_comment` checks each command against the author's collaborator permission and the
repository's allow-lists, acts through the context's GitHub client, store and dispatcher,
records every command in the audit log, reacts 👀 when something was accepted and answers every
command in words (what was queued, done or refused, and why; help, explanations) in ONE reply
per comment. A problem only the operator can fix (the App's permissions, the worker's clone) is
logged; the pull request reads that the operator has been told, never the detail.

Failures are named as the comment numbers them (bot.evidence: its number, a test id, a
fingerprint prefix). `rerun` re-runs the head's failed GitHub Actions jobs
(rerun-failed-jobs) and etriage's own suites; with `--target` only etriage's, there.

Permissions: anyone may ask for `help` and `explain`; everything else needs write access
(write, maintain or admin). Running a change's code (Prow's model, `code_may_run`): nothing of a
pull request whose author lacks write access and is not in `triage.trusted` runs (no suite, no
probe, no build, on any target) until a maintainer says `/etriage ok-to-test`; the approval is
stored per head sha, so the next push ends it. Device targets need the same.

Which head an ok-to-test approves: the one it names (`/etriage ok-to-test <sha>`, which must be
the current head), else the head that was there when the comment was written: the latest head
GitHub made the head strictly before the comment's time (both GitHub's clock: the pull_request
webhook's `updated_at`, recorded per head by the worker, and the comment's `created_at`, or
`updated_at` for an edit). Never a later head: a push after the comment, even while the command
waits on GitHub, needs a new approval, and the reply says which head was approved.

What the worker reads from `triage_pr(..., reason=...)`: "rerun:failed" (re-run only the tests
that failed for this head), "rerun:all", "run" (with suites=[suite]), "ok-to-test" (device
targets are now allowed for this head: see `devices_allowed`).
"""
from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from bot import md, mutes
from bot.command_grammar import (USAGE, Command, CommandError, is_bot, login_stem, new_commands,
                                 parse, shown)
from bot.evidence import Entry, find_entry, similar_failure
from bot.github_client import GitHubError, GitHubUnavailable
from bot.history import History
from bot.repo_config import PATH, RepoConfig

log = logging.getLogger(__name__)

WRITE_ACCESS = frozenset({"write", "maintain", "admin"})
NEEDS_WRITE = frozenset({"rerun", "run", "label", "ignore", "ok-to-test", "mute", "unmute"})
DESCRIPTIONS = {
    "rerun": "re-run the PR's failed GitHub Actions jobs and etriage's suites (`all`: every test of them), "
             "or only etriage's on the targets named",
    "run": "run one suite, optionally on one target",
    "explain": "the evidence of a failure: its number in the comment, its test id or a fingerprint prefix",
    "label": "add labels from this repository's allow-list",
    "ignore": "mark a failure (number, test id or fingerprint prefix) as known flaky or unrelated on this PR",
    "ok-to-test": "let etriage run this pull request's code (tests, probes, builds; devices) at the head you "
                  "reviewed: the one there when you wrote the comment, or the one you name",
    "mute": "set a test or a failure cluster aside repo-wide for a while (shown as muted, not counted as new), "
            "saying why",
    "unmute": "lift a mute before it runs out",
    "help": "this list",
}

__all__ = ["Command", "CommandContext", "CommandError", "Outcome", "code_may_run", "comment_stamp",
           "devices_allowed", "github_time", "handle_comment", "help_text", "is_bot", "login_stem",
           "new_commands", "parse"]


def github_time(value: str | None) -> datetime | None:
    """GitHub's ISO 8601 stamp ("2019-05-15T15:20:33Z") as an aware datetime; None if absent or bad."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def comment_stamp(action: str, written_at: str | None, body: str) -> str:
    """What makes one run of a comment's commands: the comment's edit (its time) and its body.
    A delivery replayed under a new id has the same stamp; a real edit has a new one."""
    return f"{action}:{written_at or '-'}:{hashlib.sha256((body or '').encode()).hexdigest()[:24]}"


@dataclass
class CommandContext:
    github: Any  # bot.github_client.GitHubClient
    store: Any  # bot.store.Store
    enqueue: Any  # a bot.publisher.Publisher
    repo_config: RepoConfig
    bot_login: str
    installation_id: int | None = None  # passed on to the triage runs a command starts


@dataclass(frozen=True)
class Outcome:
    line: str  # the command as written ("" for a comment-wide problem)
    verb: str | None
    status: str  # accepted | answered | refused | invalid | failed
    detail: str = ""
    reply: str = ""  # what the comment's one reply says about this command


class Refused(Exception):
    """A well-formed command the author may not run here; the message says why."""


def handle_comment(ctx: CommandContext, *, repo: str, pr: int, comment_id: int, author: str,
                   author_type: str | None, body: str, previous_body: str | None,
                   action: str, written_at: str | None = None) -> list[Outcome]:
    if is_bot(author, author_type, ctx.bot_login) or action not in ("created", "edited"):
        return []
    if ctx.repo_config.commands is None:
        return []  # commands are off for this repository: stay silent
    if action == "edited":
        items = new_commands(previous_body, body, ctx.bot_login)
    else:
        items = parse(body, ctx.bot_login)
    if not items:
        return []
    session = _Session(ctx, repo, pr, author, written_at=github_time(written_at))
    outcomes = [session.run(item) for item in items]
    for outcome in outcomes:
        ctx.store.audit(repo, pr, author, outcome.line or "(comment)", f"{outcome.status}: {outcome.detail}")
    if any(outcome.status in ("accepted", "answered") for outcome in outcomes):
        ctx.github.react(repo, comment_id, "eyes")
    reply = _reply(author, outcomes)
    if reply:
        ctx.github.reply(repo, pr, reply, in_reply_to=comment_id)
    return outcomes


def devices_allowed(github, store, repo: str, pr: int, *, head_sha: str, pr_author: str) -> bool:
    """May this head of the PR run on devices? Its author has write access, or a maintainer
    said ok-to-test for exactly this head. (The pipeline asks this before picking devices.)"""
    return (github.permission(repo, pr_author) in WRITE_ACCESS
            or store.is_approved_for_devices(repo, pr, head_sha))


def code_may_run(github, store, repo: str, pr: int, *, head_sha: str, pr_author: str,
                 trusted=()) -> bool:
    """May etriage run this head's code at all (its suites, probes, builds)? Its author has write
    access or is listed in `triage.trusted`, or a maintainer said ok-to-test for exactly this head."""
    return (pr_author.lower() in {name.lower() for name in trusted}
            or devices_allowed(github, store, repo, pr, head_sha=head_sha, pr_author=pr_author))


class _Session:
    """The commands of one comment: permission and pull request looked up at most once."""

    def __init__(self, ctx: CommandContext, repo: str, pr: int, author: str, *, written_at: datetime | None = None):
        self.ctx, self.repo, self.pr, self.author = ctx, repo, pr, author
        self.written_at = written_at  # when the comment (or its edit) was written, GitHub's clock
        self.config = ctx.repo_config
        self._permissions: dict[str, str] = {}
        self._pull: dict | None = None

    def permission(self, user: str) -> str:
        if user not in self._permissions:
            self._permissions[user] = self.ctx.github.permission(self.repo, user)
        return self._permissions[user]

    @property
    def pull(self) -> dict:
        if self._pull is None:
            self._pull = self.ctx.github.pull(self.repo, self.pr)
        return self._pull

    def run(self, item: Command | CommandError) -> Outcome:
        if isinstance(item, CommandError):
            where = f"{shown(item.line)}: " if item.line else ""
            return Outcome(item.line, None, "invalid", item.message, f"{where}{item.message}")
        try:
            if item.verb in NEEDS_WRITE:
                level = self.permission(self.author)
                if level not in WRITE_ACCESS:
                    raise Refused(f"`{item.verb}` needs write access to {self.repo} (you have {level})")
            return getattr(self, "do_" + item.verb.replace("-", "_"))(item)
        except Refused as refusal:
            return Outcome(item.line, item.verb, "refused", str(refusal), f"{shown(item.line)}: {refusal}")
        except Exception as error:  # an internal error, kept apart from the user's mistakes
            log.exception("command %r on %s#%s failed", item.line, self.repo, self.pr)
            return Outcome(item.line, item.verb, "failed", f"{type(error).__name__}: {error}",
                           f"{shown(item.line)}: could not be run because of an internal error "
                           "(it was logged); please try again later")

    # ---- one method per verb ---------------------------------------------------------------
    def do_help(self, command: Command) -> Outcome:
        return Outcome(command.line, "help", "answered", "help", help_text(self.config))

    def do_explain(self, command: Command) -> Outcome:
        n, entry = self._failure(command.failure)
        return Outcome(command.line, "explain", "answered", f"explained {n}", self._explanation(n, entry))

    def do_rerun(self, command: Command) -> Outcome:
        targets = self._targets(command.targets)
        said, problems = [], []
        if not targets:  # `--target` asks for etriage's suites there, not for the CI again
            said, problems = self._rerun_ci()
        on = f" on {', '.join(targets)}" if targets else ""
        try:
            self._triage(reason=f"rerun:{command.scope}", targets=targets)
            which = "every test of its suites" if command.scope == "all" else "its suites (what failed first)"
            said.append(f"etriage runs {which}{on} again at `{self.pull['head_sha'][:12]}`; the check run "
                        "`etriage` shows the progress and this PR's etriage comment is updated when it finishes")
        except Refused as refusal:
            if not said:
                raise Refused("; ".join(problems + [str(refusal)])) from None
            problems.append(str(refusal))
        reply = "Queued: " + "; ".join(said) + "." + (" Not done: " + "; ".join(problems) + "." if problems else "")
        return Outcome(command.line, "rerun", "accepted", f"rerun {command.scope}{on}: {'; '.join(said)}", reply)

    def do_run(self, command: Command) -> Outcome:
        if command.suite not in self.config.suites:
            raise Refused(f"unknown suite {shown(command.suite)}; known: {_names(self.config.suites)}")
        targets = self._targets(command.targets)
        self._triage(reason="run:all" if command.all_tests else "run", suites=[command.suite], targets=targets)
        on = f" on {targets[0]}" if targets else ""
        every = " (every relevant test that can run here, no budget)" if command.all_tests else ""
        reply = (f"Queued: the suite `{command.suite}`{on}{every} at `{self.pull['head_sha'][:12]}`; this PR's "
                 "etriage comment is updated when it finishes.")
        return Outcome(command.line, "run", "accepted", f"run {command.suite}{on}{every}", reply)

    def do_label(self, command: Command) -> Outcome:
        if self.config.labels is None:
            raise Refused(f"labels are not enabled here (no `labels:` section in {PATH})")
        allowed = {label.lower(): label for label in self.config.allowed_labels()}
        unknown = [label for label in command.labels if label.lower() not in allowed]
        if unknown:
            raise Refused(f"{', '.join(map(shown, unknown))} not in the allow-list: "
                          f"{_names(sorted(allowed.values()))}")
        labels = [allowed[label.lower()] for label in command.labels]
        self.ctx.github.add_labels(self.repo, self.pr, labels)
        return Outcome(command.line, "label", "accepted", f"labelled {', '.join(labels)}",
                       f"Labelled: {_names(labels)}.")

    def do_ignore(self, command: Command) -> Outcome:
        n, entry = self._failure(command.failure)
        keys = entry.fingerprints or entry.tests[:1]
        for key in keys:
            self.ctx.store.ignore_failure(self.repo, self.pr, key, command.reason, self.author)
        what = f"{n} ({shown(entry.tests[0], 120) if entry.tests else shown(entry.title)})"
        if entry.verdict in ("new", "ignored"):
            reply = (f"Ignored {what} on this pull request: *{md.text(command.reason, 500)}*. It is no longer "
                     "counted as caused by this change; the comment is updated.")
        else:
            reply = (f"Noted {what} as ignored (*{md.text(command.reason, 500)}*), but it is "
                     f"{entry.verdict.replace('_', '-')}, not counted against this change anyway.")
        return Outcome(command.line, "ignore", "accepted", f"ignored {n} {','.join(keys)}: {command.reason}", reply)

    def do_ok_to_test(self, command: Command) -> Outcome:
        head_sha = self.pull["head_sha"]  # read after the permission lookup: the head now
        if command.sha:
            if not head_sha.startswith(command.sha):
                raise Refused(f"{shown(command.sha)} is not this pull request's head (it is now "
                              f"`{head_sha[:12]}`); nothing was approved")
            approved, which = head_sha, "the head you named"
        else:
            approved, which = self._head_when_written(), "the head when you wrote this"
            if approved is None:
                raise Refused("etriage cannot tell which head was there when you wrote this; review the "
                              f"current head and name it: `/etriage ok-to-test {head_sha[:12]}`")
        # one approval per head: it lets the code run, and lets it run on devices
        self.ctx.store.approve_for_devices(self.repo, self.pr, approved, self.author)
        if approved != head_sha:  # pushed after the comment: that head is not approved
            reply = (f"Approved `{approved[:12]}`, {which}. The pull request has moved to "
                     f"`{head_sha[:12]}` since, which is not approved: review it, then "
                     f"`/etriage ok-to-test {head_sha[:12]}`.")
            return Outcome(command.line, "ok-to-test", "accepted",
                           f"approved {approved[:12]}; the head moved to {head_sha[:12]}", reply)
        reply = (f"Approved `{approved[:12]}` ({which}) to run; a push after it needs a new "
                 "`/etriage ok-to-test`.")
        if self.config.triage is None:
            return Outcome(command.line, "ok-to-test", "accepted",
                           f"approved {approved[:12]}; triage is not enabled here", reply)
        self._triage(reason="ok-to-test")
        devices = "" if self.config.device_targets() else "; device runs are not enabled here"
        return Outcome(command.line, "ok-to-test", "accepted", f"approved {approved[:12]} to run{devices}", reply)

    def _head_when_written(self) -> str | None:
        """The head GitHub made the head last before the comment was written (strictly: a push
        in the same second is not taken as seen), or None when that cannot be told."""
        if self.written_at is None:
            return None
        before = [sha for sha, pushed_at in self.ctx.store.heads(self.repo, self.pr) if pushed_at < self.written_at]
        return before[-1] if before else None

    def do_mute(self, command: Command) -> Outcome:
        """A repo-wide mute (bot.mutes): a cluster must be one the dashboard knows."""
        kind, key = command.mute_kind, command.mute_key
        if kind == "cluster" and mutes.known_cluster(self.ctx.store, key) is None:
            raise Refused(f"no failure cluster {shown(key)} is known here; the dashboard's cluster pages "
                          "and the trunk issues name them")
        until = datetime.now(timezone.utc) + timedelta(seconds=command.mute_seconds)
        mute = self.ctx.store.mute(self.repo, kind, key, until=until, reason=command.reason,
                                   by=self.author, source="comment")
        reply = (f"Muted {kind} {md.code(key, 200)} in {md.code(self.repo)} until {mutes.when(mute['until'])}: "
                 f"*{md.text(command.reason, 500)}*. Its failures are still shown, marked muted, but count as "
                 f"no new failure (nor fail the check run, nor open a trunk issue) until then; "
                 f"`/etriage unmute {kind} {key if len(key) <= 120 and '`' not in key else '<id>'}` lifts it.")
        return Outcome(command.line, "mute", "accepted", f"muted {kind} {key} until {mute['until'].isoformat()}", reply)

    def do_unmute(self, command: Command) -> Outcome:
        kind, key = command.mute_kind, command.mute_key
        if not self.ctx.store.lift_mute(self.repo, kind, key, self.author):
            raise Refused(f"no mute of {kind} {shown(key)} is in force here")
        return Outcome(command.line, "unmute", "accepted", f"lifted the mute of {kind} {key}",
                       f"Lifted the mute of {kind} {md.code(key, 200)}: its failures count again from the next report.")

    # ---- shared checks ---------------------------------------------------------------------
    def _triage(self, *, reason: str, suites: list[str] | None = None, targets: list[str] | None = None) -> None:
        if self.config.triage is None:
            raise Refused(f"triage is not enabled here (no `triage:` section in {PATH})")
        self.ctx.enqueue.triage_pr(
            self.repo, self.pr, self.pull["head_sha"], self.pull["base_ref"], self.ctx.installation_id,
            reason=reason, targets=targets or None, suites=suites)

    def _targets(self, names: tuple[str, ...]) -> list[str]:
        for name in names:
            target = self.config.targets.get(name)
            if target is None:
                raise Refused(f"unknown target {shown(name)}; known: {_names(self.config.targets)}")
            if target.kind != "device":
                continue
            if name not in self.config.device_targets():
                raise Refused(f"{shown(name)} is a device and device runs are not enabled for it "
                              f"(`devices:` in {PATH})")
            head_sha, pr_author = self.pull["head_sha"], self.pull["author"]
            if self.permission(pr_author) not in WRITE_ACCESS and not \
                    self.ctx.store.is_approved_for_devices(self.repo, self.pr, head_sha):
                raise Refused(f"{shown(name)} is a device and this pull request comes from an outside "
                              f"contributor: a maintainer must first say `/etriage ok-to-test` for its "
                              f"current head {head_sha[:7]}")
        return list(dict.fromkeys(names))

    def _failure(self, ref: str) -> tuple[int, Entry]:
        found = find_entry(self.ctx.store, self.repo, self.pr, ref)
        if found is None:
            raise Refused(f"no failure {shown(ref)} in this pull request's etriage comment; use its number "
                          "there (1, 2, ...), its test id or a fingerprint prefix of at least 6 characters")
        return found

    def _rerun_ci(self) -> tuple[list[str], list[str]]:
        """Re-run the failed jobs of the head's failed GitHub Actions runs: (what was queued,
        what was not, in words for the PR). What only the operator can fix is logged, and the
        PR is told only that the operator has been told."""
        head = self.pull["head_sha"]
        try:
            runs = self.ctx.github.failed_workflow_runs(self.repo, head)
        except GitHubUnavailable:
            return [], ["GitHub did not answer for the CI runs; try again later"]
        except GitHubError as error:
            log.warning("%s#%s: listing workflow runs of %s failed: %s", self.repo, self.pr, head[:12], error)
            return [], ["the bot could not list this head's GitHub Actions runs; the operator has been told"]
        if not runs:
            return [], [f"no failed GitHub Actions run at `{head[:12]}`"]
        queued, problems = [], []
        for run in runs[:10]:
            name = f"{md.code(run.get('name') or 'workflow', 80)} run {int(run['id'])}"
            try:
                self.ctx.github.rerun_failed_jobs(self.repo, run["id"])
                queued.append(name)
            except GitHubUnavailable:
                problems.append(f"GitHub did not answer for {name}; try again later")
            except GitHubError as error:
                if "already running" in str(error).lower() or "no failed jobs" in str(error).lower():
                    problems.append(f"{name} is running again already")
                else:  # permissions, an App not allowed to write Actions: the operator's to fix
                    log.warning("%s#%s: re-running %s failed: %s", self.repo, self.pr, run["id"], error)
                    problems.append(f"the bot could not re-run {name}; the operator has been told")
        said = ([f"GitHub re-runs the failed jobs of {', '.join(queued)}"] if queued else [])
        return said, problems

    def _explanation(self, n: int, entry: Entry) -> str:
        """`explain N`: what the comment does not say, through bot.md."""
        trunk = None
        try:
            [trunk] = History(self.ctx.store).trunk_clusters([(entry.primary_line, (entry.fingerprints or [""])[0])])
        except Exception:  # evidence only: a broken history never keeps the answer from the PR
            log.exception("trunk cluster of %s#%s entry %d not looked up", self.repo, self.pr, n)
        return explanation(n, entry, trunk)


# ---- replies ----------------------------------------------------------------------------------

def help_text(config: RepoConfig) -> str:
    lines = ["**etriage commands** (at the start of a line; `@etriage` works as well as `/etriage`):", ""]
    for verb, usage in USAGE.items():
        access = " *(write access)*" if verb in NEEDS_WRITE else ""
        lines.append(f"- `/etriage {usage}`: {DESCRIPTIONS[verb]}{access}")
    lines += ["", f"Suites: {_names(config.suites)}",
              "Targets: " + ", ".join(f"`{t.name}` ({t.kind})" for t in config.targets.values())]
    if config.labels is not None:
        lines.append(f"Labels: {_names(sorted(config.allowed_labels()))}")
    return "\n".join(lines)


def explanation(n: int, entry: Entry, trunk: dict | None = None) -> str:
    """Failure `n` of the comment as `explain` answers it: the engine's evidence for the
    category, what it looks like, its cluster on trunk, every suspect with its line, the
    reproduce command and the evidence's address. Every value came from a run or a log."""
    sure = f", confidence {entry.confidence:.2f}" if entry.decided_by else ""
    unsure = f" (unsure: {' or '.join(md.code(c, 60) for c in entry.unsure)})" if entry.unsure else ""
    parts = [f"**{n}. {md.text(entry.title, 120)}**: {md.text(entry.verdict.replace('_', '-'), 40)}, category "
             f"{md.code(entry.category, 60)}{unsure}"
             + (f", decided by {md.code(entry.decided_by, 80)}{sure}" if entry.decided_by else "")]
    if entry.primary_line:
        parts.append(md.block(entry.primary_line, limit=2000, keep="head"))
    if entry.decision:
        parts.append("**What decided the category:**\n" + "\n".join(f"- {md.text(d, 300)}" for d in entry.decision))
    if entry.looks_like:
        parts.append("**Looks like** (the nearest labelled failures):\n"
                     + "\n".join(f"- {similar_failure(n_)}" for n_ in entry.looks_like))
    if trunk:
        last = trunk.get("last_seen")
        parts.append(f"**On trunk:** its cluster {md.code(trunk.get('id', ''), 40)} failed {int(trunk.get('trunk_failures') or 0)} "
                     f"time(s) on trunk{f', last on {last:%Y-%m-%d}' if hasattr(last, 'strftime') else ''}: it may "
                     "not be this change's.")
    else:
        parts.append("**On trunk:** no failure like it is recorded on trunk.")
    if entry.suspects:
        parts.append("**Suspects in the diff:**\n" + "\n".join(_suspect(s) for s in entry.suspects))
    if entry.explanation:
        parts.append(md.prose(entry.explanation))
    if entry.suggestion:
        parts.append(f"**What to do:** {md.prose(entry.suggestion)}")
    if entry.tests:
        parts.append("**Where it showed:** " + ", ".join(md.code(t, 160) for t in entry.tests[:10]))
    if entry.reproduce:
        parts.append("**Reproduce** in your checkout of ExecuTorch" + (
            f" ([{md.code(entry.script_name, 120)}]({entry.script_url}), the probe as one script)"
            if _LINK.fullmatch(entry.script_url) else "")
            + ":\n" + md.block(entry.reproduce, info="sh", limit=2000, keep="head"))
    if _LINK.fullmatch(entry.link):
        parts.append(f"**Evidence:** [{'the job log at the line' if entry.kind == 'ci' else 'the output'}]({entry.link})")
    return "\n\n".join(parts)


_LINK = re.compile(r"https?://[A-Za-z0-9./_#?=%&+:-]{1,400}")  # an address of ours or GitHub's, plain characters


def _suspect(suspect: dict) -> str:
    where = str(suspect.get("path") or "") + (f":{int(suspect['line'])}" if suspect.get("line") else "")
    return (f"- {md.code(where, 200)} {md.code(suspect.get('symbol') or '(file)', 120)}: "
            f"{md.prose(suspect.get('reason') or '', 300)}")


def _reply(author: str, outcomes: list[Outcome]) -> str:
    problems = [o.reply for o in outcomes if o.status in ("refused", "invalid", "failed")]
    answers = list(dict.fromkeys(o.reply for o in outcomes if o.status in ("answered", "accepted") and o.reply))
    parts = []
    if problems:
        parts.append(f"@{author} " + ("this command was" if len(problems) == 1 else "these commands were")
                     + " not run:\n" + "\n".join(f"- {problem}" for problem in problems))
    return "\n\n".join(parts + answers)


def _names(names) -> str:
    return ", ".join(f"`{name}`" for name in names)
