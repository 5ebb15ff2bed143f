"""The service's work as plain Python: triage a PR, triage its CI logs, publish what was found.

The Celery tasks (tasks/jobs.py) are thin wrappers around these functions; `WorkerContext`
carries the clients (settings, store, Redis, a GitHub client per installation). Every function
re-checks that its head sha is still the PR's latest (`checkpoint`) before each stage and before
writing to GitHub, and every write is keyed, so a redelivered or superseded task is harmless.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import subprocess
import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import redis

from bot import commands, md, mutes, owners, trunk_issues
from bot.commands import code_may_run
from bot.evidence import NO_LINKS, Links, unnumbered
from bot.github_client import (Annotation, GitHubClient, GitHubConfig, GitHubError,
                               job_line_url, redis_lock)
from bot.history import TRUNK, History, RunInfo
from bot.publisher import Publisher
from bot.queues import head_key
from bot.repo_config import PATH, RepoConfig, RepoConfigCache, RepoConfigError
from bot.store import Store
from tasks.celery_app import get_app
from tasks.environments import compiled
from tasks.pipeline import compare, gitio, treepaths
from tasks.pipeline.plan import submodules_needed
from tasks.pipeline.report import comment_section, headline
from tasks.pipeline.overlay import installed_package_dir
from tasks.pipeline.run import NO_SANDBOX, TriageOptions, triage
from tasks.pipeline.sandbox import Sandbox
from tasks.pipeline.tables import load_tables
from tasks.policy import (add_config_check, choose_suites, choose_targets, config_change_check,
                          written_triage_keys)
from tasks.records import CiReport, Report
from tasks.repos import FetchError, PullRefs, Repos
from tasks.summary import (SECTION_TITLES, PublishPayload, ci_counts, ci_section, compose_comment,
                           labels_to_change)
from triage_rules import classify_text
from triage_rules.records import dump

log = logging.getLogger(__name__)
FAILED = {"failure", "timed_out", "cancelled", "startup_failure"}
CHECK_SCOPE = "Failed CI jobs of this commit are classified in the pull request's etriage comment, not here."
COUNTED = ("new", "pre_existing", "flaky", "environment", "not_in_log", "ignored", "fixed")  # verdicts in the headline


class Superseded(Exception):
    """A newer push (or the PR's closing) made this work pointless; stop quietly."""


@dataclass
class WorkerContext:
    settings: object
    options: object
    store: Store
    redis: redis.Redis
    _clients: dict = field(default_factory=dict)
    _configs: object = None  # bot.repo_config.RepoConfigCache, made on first use
    _triage_keys: dict = field(default_factory=dict)  # repo -> keys its file's `triage:` writes
    _repos: Repos | None = None  # the mirrors and worktrees, made on first use
    _codeowners: object = None  # bot.owners.CodeOwnersCache, made on first use

    @classmethod
    def create(cls, settings, options) -> "WorkerContext":
        return cls(settings, options, Store.from_settings(settings),
                   redis.Redis.from_url(settings.redis_url, socket_timeout=5,
                                        socket_connect_timeout=3))

    def github(self, installation_id: int | None) -> GitHubClient:
        if installation_id not in self._clients:
            config = GitHubConfig.from_settings(
                self.settings, seconds_between_writes=self.options.github_write_interval or None)
            self._clients[installation_id] = GitHubClient(
                config, installation_id, lock=lambda key: redis_lock(self.redis, key))
        return self._clients[installation_id]

    def repos(self) -> Repos:
        """The worker's mirrors and worktrees (tasks/repos.py), under its data directory."""
        if self._repos is None:
            self._repos = Repos(Path(self.settings.data_dir), self.settings.git_url, self.options.fetch)
        return self._repos

    def repo_config(self, gh: GitHubClient, repo: str):
        """.github/etriage.yml of the default branch (never the PR's own), cached for minutes."""

        if self._configs is None:
            self._configs = RepoConfigCache()

        def fetch() -> str | None:
            # Recorded with the fetch the cache keeps, so both always describe the same file.
            text = gh.read_file(repo, PATH)
            self._triage_keys[repo] = written_triage_keys(text)
            return text

        return self._configs.get(repo, fetch)

    def written_triage(self, gh: GitHubClient, repo: str) -> dict[str, tuple[str, ...]]:
        """What the default branch's `triage:` section itself says: {"suites": ..., "targets":
        ...} for the keys it writes. The defaults bot.repo_config fills in for the others are
        not a choice of the repository's and restrict nothing; no file or a broken one: {}."""

        try:
            config = self.repo_config(gh, repo)
        except RepoConfigError as error:
            log.warning("%s: triage uses the worker's settings: %s", repo, error)
            return {}
        written = self._triage_keys.get(repo, frozenset())
        if config.triage is None:
            return {}
        return {key: getattr(config.triage, key) for key in ("suites", "targets") if key in written}

    def codeowners(self, gh: GitHubClient, repo: str) -> owners.Source:
        """The default branch's CODEOWNERS (bot.owners; the bundled table without one), cached for minutes."""
        if self._codeowners is None:
            self._codeowners = owners.CodeOwnersCache()
        return self._codeowners.get(repo, lambda path: gh.read_file(repo, path))

    def repo_config_or_defaults(self, gh: GitHubClient, repo: str):
        """The config in force; a broken file means the defaults (devices off), logged."""

        try:
            return self.repo_config(gh, repo)
        except RepoConfigError as error:
            log.warning("%s: using the default config: %s", repo, error)
            return RepoConfig.defaults()

    # The latest head sha per PR: written by the webhook's dispatch and by tasks that saw GitHub.
    def latest_head(self, repo: str, pr: int) -> str | None:
        value = self.redis.get(head_key(repo, pr))
        return value.decode() if value else None

    def checkpoint(self, repo: str, pr: int, head_sha: str) -> None:
        latest = self.latest_head(repo, pr)
        if latest == "closed" or (latest and latest != head_sha):
            raise Superseded(f"{repo}#{pr} moved from {head_sha[:12]} to {latest[:12]}")


def installed(ctx: WorkerContext, repo: str, installation_id: int | None) -> bool:
    """Is the App installed where this delivery says? Its installation must be known to the store
    (an `installation` delivery recorded it), not deleted or suspended, and belong to the
    repository's owner. A delivery without an installation (a repository webhook, a personal
    token) has none to check."""
    if installation_id is None:
        return True
    known = ctx.store.installation(installation_id)
    if known is None or known["action"] in ("deleted", "suspend"):
        log.warning("%s: installation %s is not known to the store (or was removed): dropped", repo, installation_id)
        return False
    if (known["account"] or "").lower() != repo.partition("/")[0].lower():
        log.warning("%s: installation %s belongs to %s, not this repository's owner: dropped",
                    repo, installation_id, known["account"])
        return False
    return True


# ---- publishing ---------------------------------------------------------------------------
def publish(ctx: WorkerContext, repo: str, pr: int, installation_id: int | None,
            payload: PublishPayload) -> None:
    """Comment, check run and labels for one finished run. The payload is saved first and
    cleared last, so a crash or a GitHub outage in between leaves it for the retry/beat."""
    ctx.store.save_pending_report(repo, pr, payload.kind, payload.head_sha, installation_id,
                                  payload.to_dict())
    ctx.checkpoint(repo, pr, payload.head_sha)
    try:
        _publish(ctx, repo, pr, installation_id, payload)
    except GitHubError as error:  # kept for the retry or the beat, this try counted once
        ctx.store.pending_report_failed(repo, pr, payload.kind, payload.head_sha, str(error))
        raise
    ctx.store.clear_pending_report(repo, pr, payload.kind, payload.head_sha)


def _publish(ctx: WorkerContext, repo: str, pr: int, installation_id: int | None,
             payload: PublishPayload) -> None:
    gh = ctx.github(installation_id)
    run_id = ctx.store.start_run(repo, pr, payload.head_sha, payload.kind)
    ctx.store.update_run(run_id, summary=payload.section,
                         report={"blame_categories": payload.blame_categories, "counts": payload.counts,
                                 "full": payload.report, "notes": payload.notes, "index": payload.index})

    def body() -> str:  # composed under the PR lock: the other kind's latest section is in
        runs = [r for r in ctx.store.runs_for(repo, pr) if r["head_sha"] == payload.head_sha]
        return compose_comment(payload.head_sha, {r["kind"]: r["summary"] for r in runs},
                               {r["kind"]: (r["report"] or {}).get("counts", {}) for r in runs})

    comment_id, _changed = gh.upsert_summary(repo, pr, body)
    ctx.store.update_run(run_id, comment_id=comment_id)
    run = ctx.store.run(run_id)
    if payload.check_conclusion and (run["status"], run["conclusion"]) != (
            "completed", payload.check_conclusion):
        check_run_id = run["check_run_id"] or gh.find_check_run(repo, payload.head_sha) \
            or gh.create_check_run(repo, payload.head_sha, status="in_progress")
        gh.update_check_run(repo, check_run_id, conclusion=payload.check_conclusion,
                            title=payload.check_title, summary=payload.check_summary,
                            text=payload.check_text,
                            annotations=[Annotation(**a) for a in payload.annotations])
        ctx.store.update_run(run_id, check_run_id=check_run_id, status="completed",
                             conclusion=payload.check_conclusion)
    elif not payload.check_conclusion:
        ctx.store.update_run(run_id, status="completed")
    blame = set()
    for other in ctx.store.runs_for(repo, pr):
        if other["head_sha"] == payload.head_sha:
            blame |= set((other["report"] or {}).get("blame_categories", []))
    try:
        category_labels = ctx.repo_config(gh, repo).labels
    except ValueError as error:  # RepoConfigError: the file is broken; the comment still goes out
        log.warning("%s: labels skipped: %s", repo, error)
        category_labels = None
    if category_labels is not None:  # labels are off without a `labels:` section
        add, remove = labels_to_change(gh.labels(repo, pr), blame, category_labels)
        gh.add_labels(repo, pr, add)
        for label in remove:
            gh.remove_label(repo, pr, label)


def publish_pending(ctx: WorkerContext) -> int:
    """Beat: publish reports GitHub did not take; drop those a newer push made stale."""
    published = 0
    for row in ctx.store.pending_reports():
        repo, pr, payload = row["repo"], row["pr"], PublishPayload.from_dict(row["payload"])
        try:
            publish(ctx, repo, pr, row["installation_id"], payload)
            published += 1
        except Superseded:
            ctx.store.clear_pending_report(repo, pr, payload.kind, payload.head_sha)
        except GitHubError:
            pass  # publish counted the try; the next beat tries again
    return published


def expire_runs(ctx: WorkerContext) -> int:
    """Beat: runs still `in_progress` and untouched for `run_expiry_hours` (far beyond the task
    time limit: their worker died for good) become `expired` in the store; finished runs and
    recent ones are left alone. The number expired."""
    return ctx.store.expire_runs(timedelta(hours=ctx.options.run_expiry_hours))


# ---- pull request triage ------------------------------------------------------------------
def queue_pull_request(ctx: WorkerContext, repo: str, pr: int, head_sha: str,
                       installation_id: int | None, *, reason: str,
                       fresh: bool = False, pushed_at: str | None = None) -> tuple[dict, int, int]:
    """Entry check and a queued check run: (pull, run id, check run id). Idempotent; `fresh`
    (a rerun command) starts a new check run when the previous one already completed.
    `pushed_at` (a pull_request delivery's): when GitHub made `head_sha` the head, recorded
    first, superseded or not, for `/etriage ok-to-test` (bot.commands)."""
    moment = commands.github_time(pushed_at)
    if moment is not None:
        ctx.store.record_head(repo, pr, head_sha, moment)
    gh = ctx.github(installation_id)
    pull = gh.pull(repo, pr)
    if pull["head_sha"] != head_sha:
        ctx.redis.set(head_key(repo, pr), pull["head_sha"])
        raise Superseded(f"{repo}#{pr} head is {pull['head_sha'][:12]}, not {head_sha[:12]}")
    if pull["state"] != "open":
        raise Superseded(f"{repo}#{pr} is {pull['state']}")
    ctx.checkpoint(repo, pr, head_sha)
    ctx.store.record_pull(repo, pr, head_sha, base_ref=pull["base_ref"], base_sha=pull["base_sha"],
                          installation_id=installation_id)
    run_id = ctx.store.start_run(repo, pr, head_sha, "pr")
    run = ctx.store.run(run_id)
    if fresh and run["conclusion"]:
        run = dict(run, check_run_id=None, conclusion=None)
        ctx.store.update_run(run_id, conclusion=None, check_run_id=None)
    elif not run["check_run_id"] and not fresh:
        run["check_run_id"] = gh.find_check_run(repo, head_sha)
    check_run_id = run["check_run_id"] \
        or gh.create_check_run(repo, head_sha, status="queued", title="Queued",
                               summary=f"Triage queued ({reason}).", external_id=str(run_id))
    ctx.store.update_run(run_id, check_run_id=check_run_id)
    return pull, run_id, check_run_id


def triage_pull_request(ctx: WorkerContext, repo: str, pr: int, head_sha: str,
                        installation_id: int | None, *, reason: str, suites=None, targets=None,
                        force: bool = False) -> str:
    gh = ctx.github(installation_id)
    pull, run_id, check_run_id = queue_pull_request(ctx, repo, pr, head_sha, installation_id,
                                                    reason=reason)
    if ctx.store.run(run_id)["conclusion"] and not force:
        # A redelivery of finished work: only what GitHub did not take yet is published again.
        for row in ctx.store.pending_reports():
            if (row["repo"], row["pr"], row["kind"], row["head_sha"]) == (repo, pr, "pr", head_sha):
                publish(ctx, repo, pr, installation_id, PublishPayload.from_dict(row["payload"]))
        return "already done"
    ctx.store.update_run(run_id, status="in_progress", conclusion=None)

    def progress(stage: str, detail: str = "") -> None:
        ctx.checkpoint(repo, pr, head_sha)
        gh.update_check_run(repo, check_run_id, status="in_progress", title=stage,
                            summary=detail or stage)

    progress("Planning", f"Reading the change {pull['base_sha'][:12]}..{head_sha[:12]}.")
    if not may_run(ctx, gh, repo, pr, pull):
        payload = waiting_payload(repo, head_sha, pull["author"])
        add_config_check(payload, config_change_check(gh, repo, pr, head_sha))
        publish(ctx, repo, pr, installation_id, payload)
        return payload.check_conclusion
    named = targets is not None  # a command's own targets, not the automatic run's defaults
    targets, notes = choose_targets(ctx, gh, repo, pr, pull, targets)
    suites, suite_notes = choose_suites(ctx, gh, repo, suites)
    notes += suite_notes
    with ExitStack() as worktree:  # a fetched worktree is removed before anything is published
        if not targets or suites == []:  # None would mean "every one": not that
            source, problem = None, ("Nothing this repository's triage asks for may run on this worker "
                                     "(see the notes above); the change was not tested.")
            title = None
        else:
            progress("Fetching", f"Fetching {pull['base_ref']} and refs/pull/{pr}/head ({head_sha[:12]}).")
            source, problem, title = open_source(ctx, worktree, gh, repo, pr, pull, notes)
        if problem:
            payload = environment_payload(head_sha, problem, notes, title=title)
        else:
            config = ctx.repo_config_or_defaults(gh, repo)
            report = run_pipeline(ctx, source, pull["base_sha"], head_sha,
                                  suites=suites, targets=targets, progress=progress,
                                  budget_seconds=config.triage.budget_seconds if config.triage else None,
                                  path_backends=dict(config.triage.paths) if config.triage else {},
                                  select_all=reason == "run:all", targets_named=named)
    if not problem:
        ctx.checkpoint(repo, pr, head_sha)
        record_report(ctx, repo, head_sha, report)
        notes += trunk_notes(History(ctx.store), report, ctx.settings.public_url)
        payload = with_owners(ctx, gh, repo, report_payload(
            head_sha, report, notes, ignores(ctx, repo, pr, report.results), links=_links(ctx),
            evidence=Links(ctx.settings.public_url, repo, pr)), report.results)
    add_config_check(payload, config_change_check(gh, repo, pr, head_sha))
    publish(ctx, repo, pr, installation_id, payload)
    if not problem:  # the dashboard's history, after the comment: it never holds the comment up
        History(ctx.store).record_run(report, RunInfo(repo, pr, trigger=reason, author=pull["author"],
                                                      comment=unnumbered(payload.section)))
    return payload.check_conclusion or "published"


def trunk_notes(history: History, report: Report, public_url: str = "") -> list[str]:
    """A note per new failure whose cluster (the dashboard's: same fingerprint, or a primary line
    near enough) was seen failing on trunk: evidence it is not this change's, with the link."""
    new = [v for v in report.results if v.verdict == "new"]
    try:
        clusters = history.trunk_clusters([(v.primary_line, v.failure.fingerprint if v.failure else "") for v in new])
    except Exception:  # evidence only: a broken history never keeps the comment from the PR
        log.exception("trunk clusters not looked up")
        return []
    notes = []
    for verdict, cluster in zip(new, clusters):
        if cluster is None:
            continue
        where = f"{public_url}/dashboard/clusters/{cluster['id']}" if public_url else f"cluster `{cluster['id']}`"
        last = cluster.get("last_seen")
        notes.append(f"`{verdict.test}` looks like a failure already seen on trunk ({cluster['trunk_failures']} "
                     f"trunk failure(s){f', last {last:%Y-%m-%d}' if last else ''}): {where}. It may be "
                     "pre-existing or flaky on trunk rather than caused by this change.")
    return notes


def may_run(ctx: WorkerContext, gh: GitHubClient, repo: str, pr: int, pull: dict) -> bool:
    """Prow's rule: a PR's code runs only for an author with write access or listed in the
    default branch's `triage.trusted`, or after a maintainer's ok-to-test for this very head."""

    config = ctx.repo_config_or_defaults(gh, repo)
    trusted = config.triage.trusted if config.triage else ()
    return code_may_run(gh, ctx.store, repo, pr, head_sha=pull["head_sha"], pr_author=pull["author"],
                        trusted=trusted)


WAITING_TITLE = "Waiting for a maintainer: /etriage ok-to-test"


def waiting_payload(repo: str, head_sha: str, author: str) -> PublishPayload:
    """Nothing of an outside contributor's change ran: say so, and what unblocks it."""
    why = (f"@{author} has no write access to {repo}, so etriage runs none of this change's code "
           f"(its tests, the probes, builds) until a maintainer comments `/etriage ok-to-test`; "
           f"the approval holds for `{head_sha[:7]}` only, and a new push needs a new one.")
    section = "\n".join([f"### {SECTION_TITLES['pr']}",
                         "⏸️ **Suites not run: waiting for a maintainer.**", why,
                         "Failed CI jobs are still classified from their logs (no code of this "
                         "change runs for that)."])
    return PublishPayload(kind="pr", head_sha=head_sha, section=section, counts={},
                          check_conclusion="neutral", check_title=WAITING_TITLE, check_summary=why)


# A FetchError's `what`, as the check run's title says it.
FETCH_TITLES = {"head": "the pull request's head could not be fetched",
                "base": "the base branch could not be fetched", "merge_base": "no merge base in the fetched history",
                "submodule": "a submodule could not be fetched", "timeout": "the fetch timed out",
                "disk": "out of disk for the fetch", "auth": "git refused the installation token",
                "repository": "the repository could not be fetched", "network": "the fetch failed"}


def open_source(ctx: WorkerContext, worktree: ExitStack, gh: GitHubClient, repo: str, pr: int, pull: dict,
                notes: list[str]) -> tuple[Path | None, str | None, str | None]:
    """The repository the pipeline reads: the local clone ETRIAGE_REPO_PATHS names, as it is, or
    a worktree of the worker's mirror fetched now (tasks/repos.py; removed when `worktree`
    closes), with the submodules a native build of the change reads. (path, None, None), or
    (None, the environment problem, its check run title): what could not be fetched."""

    local = ctx.settings.repo_checkouts.get(repo)
    if local:
        problem = _checkout_problem(repo, local, [pull["head_sha"], pull["base_sha"]])
        return (None, problem, None) if problem else (Path(local), None, None)
    refs = PullRefs(repo, pr, pull["head_sha"], pull["base_ref"], pull["base_sha"], wheel_references())
    try:
        checkout = worktree.enter_context(ctx.repos().checkout(refs, gh.git_token))
        try:
            wanted = submodules_needed(gitio.changed_files(checkout.path, checkout.merge_base, checkout.head),
                                       load_tables())
        except treepaths.UnsafePath:  # no submodule of a hostile tree: the pipeline refuses it, saying why
            wanted = None
        for commit in (checkout.head, checkout.merge_base) if wanted else ():
            checkout.fetch_submodules(commit, wanted)
    except FetchError as error:
        worktree.close()
        log.warning("%s#%d: fetch failed (%s): %s", repo, pr, error.what, error)
        return None, (f"Could not fetch {repo}#{pr}: {error}. Nothing of this change was run; "
                      "`/etriage rerun` tries again."), f"Environment problem: {FETCH_TITLES[error.what]}"
    log.info("%s#%d: fetched %s into %s (%s)", repo, pr, pull["head_sha"][:12], checkout.path, checkout.steps)
    notes.extend(checkout.notes)
    return checkout.path, None, None


def open_commit(ctx: WorkerContext, worktree: ExitStack, installation_id: int | None, repo: str, branch: str,
                sha: str) -> tuple[Path | None, str]:
    """A branch's commit to read (a push warmed before any PR): the local clone ETRIAGE_REPO_PATHS
    names, or a worktree of the worker's mirror fetched now; (path, "") or (None, why not)."""
    local = ctx.settings.repo_checkouts.get(repo)
    if local:
        return Path(local), ""
    try:
        checkout = worktree.enter_context(ctx.repos().commit_checkout(
            repo, branch, sha, ctx.github(installation_id).git_token, wheel_references()))
    except FetchError as error:
        log.warning("%s@%s: fetch failed (%s): %s", repo, sha[:12], error.what, error)
        return None, f"could not fetch {repo}@{sha[:12]}: {error}"
    return checkout.path, ""


@functools.cache
def wheel_references() -> tuple[str, ...]:
    """The installed wheel's release tag and commit (its version.py, never imported): a fetched
    mirror needs them to tell whether a side's native sources are the wheel's."""
    try:
        wheel = compiled.installed_wheel(installed_package_dir(sys.executable))
    except RuntimeError:  # no executorch beside the worker: nothing to compare with
        return ()
    return tuple(r for r in (f"refs/tags/v{wheel.release}" if wheel.release else "", wheel.commit) if r)


def _checkout_problem(repo: str, checkout, shas: list[str]) -> str | None:
    """A configured local clone is used as it is: a commit it lacks is the operator's to fetch."""
    for sha in shas:
        found = subprocess.run(["git", "-C", str(checkout), "cat-file", "-e", f"{sha}^{{commit}}"],
                               capture_output=True, env={"PATH": "/usr/bin:/bin"})
        if found.returncode != 0:  # the operator's to fix: the detail goes to the log, never to the PR
            log.warning("%s: commit %s is not in the worker's clone %s, which ETRIAGE_REPO_PATHS names: a "
                        "configured clone is never fetched; update it (or leave the repository out of "
                        "ETRIAGE_REPO_PATHS: the worker then fetches it itself)", repo, sha[:12], checkout)
            return (f"The bot could not read commit `{sha[:12]}` of this pull request from its copy of the "
                    "repository; the operator has been told. Nothing of this change was run.")
    return None


def environment_payload(head_sha: str, problem: str, notes=(), *, title: str | None = None) -> PublishPayload:
    section = "\n".join([f"### {SECTION_TITLES['pr']}", *(f"> {md.prose(n)}\n" for n in notes),
                         "🛠️ **Environment problem — not caused by this change.**", md.prose(problem, 2000)])
    return PublishPayload(kind="pr", head_sha=head_sha, section=section,
                          counts={"environment": 1}, check_conclusion="neutral",
                          check_title=title or "Environment problem", check_summary=md.prose(problem, 2000))


def run_pipeline(ctx: WorkerContext, checkout: Path, base: str, head: str, *, suites, targets,
                 progress, budget_seconds: float | None = None, select_all: bool = False,
                 path_backends: dict[str, str] | None = None, targets_named: bool = True):
    """tasks.pipeline.run.triage on the worker's clone, every command of the change in the
    sandbox (never without: no sandbox here means nothing runs, and the report says so). The
    GitHub token is in no environment the pipeline sees: only the tool variables it needs."""

    options = TriageOptions(repo=checkout, base=base, head=head,
                            data_dir=Path(ctx.settings.data_dir), targets=targets,
                            suites=suites, tool_env=dict(ctx.options.tool_env),
                            suite_timeout=ctx.options.suite_timeout,
                            sandbox=Sandbox(bwrap=ctx.options.sandbox_bwrap),
                            budget_seconds=budget_seconds, select_all=select_all,
                            path_backends=dict(path_backends or {}), targets_named=targets_named,
                            shared_store=Path(ctx.options.env_shared_store) if ctx.options.env_shared_store else None,
                            coverage_store=ctx.store)  # the coverage map lives in the service's database
    return triage(options, progress=lambda message: progress("Running", message))


def record_report(ctx: WorkerContext, repo: str, head_sha: str, report: Report) -> None:
    """A finished run's tests and its failures with their verdicts, in the store."""
    ctx.store.record_results(repo, head_sha, [t for suite in report.suites for t in suite.tests])
    record_verdicts(ctx, repo, head_sha, report.results, source=lambda v: f"etriage:{v.suite}@{v.target}")


def record_verdicts(ctx: WorkerContext, repo: str, head_sha: str, verdicts, *, source) -> None:
    """Failures found at this head with their verdicts, the bot's own (source
    `etriage:<suite>@<target>`) beside the CI logs' (`ci:<job>`): `/etriage explain` and
    `/etriage ignore` find both kinds by number, test id or fingerprint."""
    failing = [v for v in verdicts if v.failure is not None]
    for name in sorted({source(v) for v in failing}):
        mine = [v for v in failing if source(v) == name]
        ctx.store.record_failures(repo, head_sha, name, [v.failure for v in mine],
                                  {v.fingerprint: v.verdict for v in mine})


def _links(ctx: WorkerContext) -> tuple[str, ...]:
    """The addresses a note may link to: the bot's own dashboard (trunk clusters), nothing else."""
    return (ctx.settings.public_url,) if ctx.settings.public_url else ()


def report_payload(head_sha: str, report: Report, notes=(), ignored: dict[str, str] | None = None,
                   *, links: tuple[str, ...] = (), evidence: Links = NO_LINKS) -> PublishPayload:
    """The `pr` section, check run and labels of a finished run. The stored report is the one
    before the ignores: rendering it again after another `/etriage ignore` starts from it.
    Notes are sentences of ours with run text in them: rendered by md.prose, linking only `links`."""
    whole = dump(report)
    counts = compare.apply_ignores(report.results, ignored or {})
    report.summary = counts | {"not_run": report.summary.get("not_run", 0)}
    new = [v for v in report.results if v.verdict == "new"]
    environment = [v for v in report.results if v.verdict == "environment"]
    conclusion = "failure" if new else ("neutral" if environment else "success")
    unsandboxed = [s for s in report.suites if s.status == "not_run" and s.reason.startswith(NO_SANDBOX)]
    annotations = [  # at the suspect's line when the pipeline knows it (Suspect.line)
        {"path": s.path, "start_line": s.line or 1,
         "title": f"{v.category}: {v.test}"[:255],
         "message": f"{v.primary_line[:400]}\n{v.failure.explanation if v.failure else ''}".strip() or v.test}
        for v in new for s in v.suspects[:3]]
    # root causes, as the comment's headline counts them (one failure in 3 probes is 1)
    title = (f"{counts.get('new', 0)} new failure(s), {counts.get('environment', 0)} environment problem(s), "
             f"{sum(len(s.tests) for s in report.suites)} test(s) run")
    if unsandboxed:  # the worker refused to run the change bare: say so, blame nobody
        conclusion, title = "neutral", f"Not run: {unsandboxed[0].reason}"[:255]
    section, entries = comment_section(report, section_title=SECTION_TITLES["pr"], links=evidence)
    if notes:
        first, _, rest = section.partition("\n")
        section = "\n".join([first, *(f"> {md.prose(n, links=links)}\n" for n in notes), rest])
    # the check run is etriage's own rebuild and tests; the comment also holds the failed CI jobs
    summary = "\n\n".join([f"etriage's own rebuild and tests: {headline(report)}",
                            *(md.prose(n, links=links) for n in notes), CHECK_SCOPE])
    return PublishPayload(kind="pr", head_sha=head_sha, section=section,
                          blame_categories=sorted({v.category for v in new if v.labelled}),
                          counts={k: n for k in COUNTED if (n := report.summary.get(k, 0))}
                          | ({"refused": 1} if report.plan.refused else {}),
                          check_conclusion=conclusion, check_title=title,
                          check_summary=summary, annotations=annotations, report=whole, notes=list(notes),
                          index=[e.to_dict() for e in entries])


def ci_payload(report: CiReport, ignored: dict[str, str] | None = None) -> PublishPayload:
    """The `ci` section and labels of a PR's failed CI jobs, through the same ignores."""
    whole = dump(report)
    compare.apply_ignores(report.results, ignored or {})
    section, entries = ci_section(report)
    return PublishPayload(kind="ci", head_sha=report.head, section=section, index=[e.to_dict() for e in entries],
                          counts=ci_counts(report), report=whole,
                          blame_categories=sorted({v.category for v in report.results
                                                   if v.verdict == "new" and v.labelled}))


PAYLOADS = {  # kind -> (its stored record, how it is published): `republish` renders either again
    "pr": (Report, lambda record, run, ignored, links, evidence: report_payload(
        record.head, record, run["report"].get("notes", ()), ignored, links=links, evidence=evidence)),
    "ci": (CiReport, lambda record, run, ignored, links, evidence: ci_payload(record, ignored)),
}


def republish(ctx: WorkerContext, repo: str, pr: int, installation_id: int | None) -> list[str]:
    """After `/etriage ignore`: every kind of report of the latest head (`pr`: the bot's run,
    `ci`: the CI logs) rendered again with the ignores; nothing runs again. The kinds
    republished (none when that head has no stored report)."""
    gh = ctx.github(installation_id)
    head_sha = gh.pull(repo, pr)["head_sha"]
    done = []
    for kind, (record_type, make_payload) in PAYLOADS.items():
        run = _run_of(ctx, repo, pr, head_sha, kind)
        whole = ((run or {}).get("report") or {}).get("full")
        if not whole:
            continue
        record = record_type.from_dict(whole)
        payload = with_owners(ctx, gh, repo, make_payload(record, run, ignores(ctx, repo, pr, record.results),
                                                          _links(ctx), Links(ctx.settings.public_url, repo, pr)),
                              record.results)
        if kind == "pr":
            add_config_check(payload, config_change_check(gh, repo, pr, head_sha))
        publish(ctx, repo, pr, installation_id, payload)
        done.append(kind)
    return done


def _run_of(ctx: WorkerContext, repo: str, pr: int, head_sha: str, kind: str = "pr") -> dict | None:
    runs = [r for r in ctx.store.runs_for(repo, pr) if r["head_sha"] == head_sha and r["kind"] == kind]
    return runs[-1] if runs else None


def cancel_run(ctx: WorkerContext, repo: str, pr: int, head_sha: str,
               installation_id: int | None) -> None:
    """A superseded run's check run says so instead of staying in progress forever."""
    run = _run_of(ctx, repo, pr, head_sha)
    if run and run["check_run_id"] and not run["conclusion"]:
        latest = ctx.latest_head(repo, pr) or "a newer push"
        ctx.github(installation_id).update_check_run(
            repo, run["check_run_id"], conclusion="cancelled", title="Superseded",
            summary=f"Superseded by {latest[:12]}; that commit is triaged instead.")
        ctx.store.update_run(run["id"], status="superseded", conclusion="cancelled")


def fail_run(ctx: WorkerContext, repo: str, pr: int, head_sha: str,
             installation_id: int | None, conclusion: str, why: str) -> None:
    run = _run_of(ctx, repo, pr, head_sha)
    if run and run["check_run_id"]:
        ctx.github(installation_id).update_check_run(
            repo, run["check_run_id"], conclusion=conclusion, title=why, summary=why)
        ctx.store.update_run(run["id"], status="failed", conclusion=conclusion)


# ---- slash commands -----------------------------------------------------------------------
def handle_comment(ctx: WorkerContext, repo: str, pr: int, comment_id: int,
                   installation_id: int | None, **comment) -> list:
    """Run the comment's /etriage commands (bot.commands) with this worker's clients, once per
    comment id and edit: the same signed body replayed under a new delivery id runs nothing."""

    stamp = commands.comment_stamp(comment.get("action", ""), comment.get("written_at"), comment.get("body", ""))
    if not ctx.store.claim_comment(repo, comment_id, stamp):
        log.info("%s#%d: comment %s (%s) already ran; a replay runs nothing", repo, pr, comment_id, stamp[:40])
        return []
    try:
        gh = ctx.github(installation_id)
        context = commands.CommandContext(github=gh, store=ctx.store,
                                          enqueue=Publisher(get_app(), ctx.settings.redis_url),
                                          repo_config=ctx.repo_config(gh, repo),
                                          bot_login=ctx.settings.bot_login,
                                          installation_id=installation_id)
        outcomes = commands.handle_comment(context, repo=repo, pr=pr, comment_id=comment_id, **comment)
    except BaseException:  # GitHub or Redis trouble: the task's retry must find the comment unclaimed
        ctx.store.release_comment(repo, comment_id, stamp)
        raise
    if any(o.verb in ("ignore", "mute", "unmute") and o.status == "accepted" for o in outcomes):
        republish(ctx, repo, pr, installation_id)
    return outcomes


# ---- CI logs ------------------------------------------------------------------------------
def triage_ci(ctx: WorkerContext, repo: str, head_sha: str, installation_id: int | None, *,
              run_id: int | None = None, job_id: int | None = None,
              check_suite_id: int | None = None) -> str:

    gh = ctx.github(installation_id)
    if job_id:
        jobs = [gh.job(repo, job_id)]
    elif run_id:
        jobs = gh.run_jobs(repo, run_id)
    elif check_suite_id:
        jobs = [j for run in gh.runs_for_check_suite(repo, check_suite_id)
                for j in gh.run_jobs(repo, run["id"])]
    else:
        raise ValueError("ci_completed needs a run_id, job_id or check_suite_id")
    failed = [j for j in jobs if j.get("conclusion") in FAILED]
    found: list[tuple[dict, object]] = []
    for job in failed:
        log_text = gh.job_log(repo, job["id"])
        failures = classify_text(log_text, job_name=job["name"], failed=True)  # the job failed: never "no failure"
        ctx.store.record_failures(repo, head_sha, f"ci:{job['name']}", failures)
        # each failure's link: the job's log on GitHub at the failure's line (#step:S:L)
        found += [(dict(job, html_url=job_line_url(repo, job, log_text, failure.line_no) or job.get("html_url")),
                   failure) for failure in failures]
    prs = ctx.store.pulls_with_head(repo, head_sha) or gh.pulls_for_commit(repo, head_sha)
    judged = 0
    for pr in prs:
        pull = gh.pull(repo, pr)
        if pull["head_sha"] != head_sha:
            continue  # CI of an older push: the newer push has (or will have) its own
        judged += 1
        ctx.store.record_pull(repo, pr, head_sha, base_ref=pull["base_ref"],
                              base_sha=pull["base_sha"], installation_id=installation_id)
        merge_base, exact = ci_merge_base(ctx, gh, repo, pull)
        report = CiReport(head=head_sha, merge_base=merge_base, merge_base_exact=exact,
                          jobs=[j["name"] for j in failed],
                          results=compare.decide_ci(found, ctx.store.failure_fingerprints(repo, merge_base)))
        record_verdicts(ctx, repo, head_sha, report.results, source=lambda v: f"ci:{v.suite}")
        payload = with_owners(ctx, gh, repo, ci_payload(report, ignores(ctx, repo, pr, report.results)), report.results)
        publish(ctx, repo, pr, installation_id, payload)
        record_ci_history(ctx, repo, pr, report, comment=unnumbered(payload.section))
    trunk = sorted({j.get("head_branch") for j in failed} & ctx.store.base_refs(repo))
    if not judged and trunk:  # CI of a branch the PRs target: what is broken on trunk, for the dashboard
        results = compare.decide_ci(found, set())
        compare.apply_ignores(results, ignores(ctx, repo, TRUNK, results))  # muted: shown, not counted
        record_ci_history(ctx, repo, TRUNK, CiReport(head=head_sha, merge_base=None, merge_base_exact=False,
                                                     jobs=[j["name"] for j in failed], results=results))
        record_trunk_issues(ctx, gh, repo, trunk_issues.TrunkRun(
            repo, head_sha, trunk[0], failed_jobs=[j["name"] for j in failed],
            passed_jobs=[j["name"] for j in jobs if j.get("conclusion") == "success"], verdicts=results))
    return (f"{len(failed)} failed job(s), {judged} pull request(s)"
            + (f", trunk {trunk[0]}" if trunk and not judged else ""))


def ignores(ctx: WorkerContext, repo: str, pr: int, verdicts) -> dict[str, str]:
    """What is set aside among `verdicts`: the repository's mutes in force (bot.mutes) and the
    pull request's own `/etriage ignore`s (whose reason wins); {key: reason} for apply_ignores."""
    in_force = mutes.active(ctx.store, repo)
    covered = mutes.covered(in_force, verdicts, History(ctx.store).clusters_of) if in_force else {}
    return covered | ctx.store.ignored_failures(repo, pr)


def with_owners(ctx: WorkerContext, gh: GitHubClient, repo: str, payload: PublishPayload, verdicts) -> PublishPayload:
    """The section with who is cc'd on its new failures and why (bot.owners: the default
    branch's CODEOWNERS, else the bundled table)."""
    payload.section = owners.with_cc(payload.section, owners.cc_text(ctx.codeowners(gh, repo), verdicts))
    return payload


def record_trunk_issues(ctx: WorkerContext, gh: GitHubClient, repo: str, run: trunk_issues.TrunkRun) -> None:
    """Trunk issues (bot/trunk_issues.py) for a recorded trunk run, when the repository has them on."""
    config = ctx.repo_config_or_defaults(gh, repo).trunk_issues
    if config is None:
        return
    for done in trunk_issues.record_trunk_run(ctx.store, gh, run, config, owners=ctx.codeowners(gh, repo),
                                              public_url=ctx.settings.public_url):
        log.info("%s: %s", repo, done)


def record_ci_history(ctx: WorkerContext, repo: str, pr: int, report: CiReport, *, comment: str = "") -> None:
    """A CI-log triage in the dashboard's history: each failed job a suite on target `ci`, its
    failures clustered with the bot's own (trunk's are the evidence a PR's failure pre-exists)."""
    data = report.to_dict()
    data.update(suites=[], summary=compare.tally(report.results), base=report.merge_base or "")
    jobs = hashlib.sha1("\n".join(sorted(report.jobs)).encode()).hexdigest()[:12]  # one run per set of jobs
    History(ctx.store).record_run(data, RunInfo(repo, pr, trigger="ci", kind="ci", comment=comment,
                                                key=f"{repo}#{pr}@{report.head}:ci:{jobs}"))


def ci_merge_base(ctx: WorkerContext, gh: GitHubClient, repo: str, pull: dict) -> tuple[str, bool]:
    """(the commit whose CI the PR's CI is compared with, whether it is the true merge base).
    The merge base comes from the worker's mirror, fetched now (no worktree), or from the local
    clone ETRIAGE_REPO_PATHS names; when neither has it, the PR's base sha stands in, and the
    comment says so rather than calling it the merge base."""
    local = ctx.settings.repo_checkouts.get(repo)
    if local:
        if not _checkout_problem(repo, local, [pull["head_sha"], pull["base_sha"]]):
            try:
                return gitio.merge_base(local, pull["base_sha"], pull["head_sha"]), True
            except gitio.GitError:
                pass
        return pull["base_sha"], False
    refs = PullRefs(repo, pull["number"], pull["head_sha"], pull["base_ref"], pull["base_sha"])
    try:
        return ctx.repos().merge_base(refs, gh.git_token), True
    except FetchError as error:
        log.warning("%s#%d: no merge base for the CI comparison (%s): %s", repo, pull["number"], error.what, error)
        return pull["base_sha"], False
