"""The Celery tasks: a few lines each that load the worker context and call tasks.service.

A delivery's task does nothing for a repository whose installation the store does not know
(`service.installed`): the webhook acknowledged it, the worker drops it.

All tasks ack late and are requeued when their worker dies (`reject_on_worker_lost`), so a
SIGKILLed worker loses nothing; the service functions are idempotent, so running again is
harmless. Transient trouble (GitHub 5xx/rate limits, Redis hiccups) is retried with exponential
backoff, honouring GitHub's Retry-After/reset; a report that still could not be posted stays in
`pending_reports` for the beat task.
"""
from __future__ import annotations

import functools
import logging
import sys
from contextlib import ExitStack
from pathlib import Path

import redis
from celery import Task, shared_task
from celery.exceptions import SoftTimeLimitExceeded

from bot import queues
from bot.github_client import GitHubError, GitHubUnavailable, install_redaction
from tasks import service, warm
from tasks.pipeline import coverage_build
from tasks.pipeline.sandbox import Sandbox

log = logging.getLogger(__name__)
TRANSIENT = (GitHubUnavailable, redis.ConnectionError, redis.TimeoutError)


class EtriageTask(Task):
    acks_late = True
    reject_on_worker_lost = True
    max_retries = 6

    @functools.cached_property
    def ctx(self) -> service.WorkerContext:
        install_redaction()
        return service.WorkerContext.create(self.app.etriage_settings, self.app.etriage_options)


def _task(name: str):
    """shared_task with the etriage policy; the body gets the WorkerContext first."""
    def wrap(fn):
        @shared_task(bind=True, base=EtriageTask, name=name)
        @functools.wraps(fn)
        def run(self, *args, **kwargs):
            try:
                return fn(self.ctx, *args, **kwargs)
            except service.Superseded as why:
                log.info("%s stopped: %s", name, why)
                return "superseded"
            except TRANSIENT as error:
                backoff = min(2 ** self.request.retries, 300)
                wait = max(backoff, getattr(error, "retry_after", 0) or 0)
                log.warning("%s: %s; retry %d in %.0fs", name, error, self.request.retries + 1, wait)
                raise self.retry(exc=error, countdown=wait,
                                 max_retries=self.app.etriage_options.max_retries)
        return run
    return wrap


@_task(queues.TRIAGE_PR)
def triage_pr(ctx, repo, pr, head_sha, base_ref, installation_id, *, reason, targets=None,
              suites=None, pushed_at=None):
    """Entry: is this still the head? Then a queued check run, and the suites on their queue."""
    if not service.installed(ctx, repo, installation_id):
        return "not installed"
    force = not reason.startswith("pull_request.")  # rerun, run, ok-to-test: run again
    service.queue_pull_request(ctx, repo, pr, head_sha, installation_id, reason=reason, fresh=force,
                               pushed_at=pushed_at)
    # None (automatic) stays None: the run chooses its targets (devices need approval).
    queue = queues.target_queue((list(targets or ctx.options.targets) or ["host"])[0])
    run_suites.apply_async(args=[repo, pr, head_sha, installation_id],
                           kwargs={"reason": reason, "targets": targets, "suites": suites,
                                   "force": force}, queue=queue)
    return f"queued on {queue}"


@_task(queues.RUN_SUITES)
def run_suites(ctx, repo, pr, head_sha, installation_id, *, reason, targets, suites, force=False):
    try:
        return service.triage_pull_request(ctx, repo, pr, head_sha, installation_id,
                                           reason=reason, targets=targets, suites=suites,
                                           force=force)
    except service.Superseded:
        service.cancel_run(ctx, repo, pr, head_sha, installation_id)
        raise
    except SoftTimeLimitExceeded:
        service.fail_run(ctx, repo, pr, head_sha, installation_id, "timed_out",
                         "The triage ran out of time; `/etriage rerun` to try again.")
        return "timed out"
    except GitHubError:
        raise
    except Exception as error:  # a bug of ours: say so on the check run, never blame the PR
        service.fail_run(ctx, repo, pr, head_sha, installation_id, "neutral",
                         f"etriage failed internally ({type(error).__name__}); not this change.")
        raise


@_task(queues.CI_COMPLETED)
def ci_completed(ctx, repo, head_sha, installation_id, *, run_id=None, job_id=None,
                 check_suite_id=None):
    if not service.installed(ctx, repo, installation_id):
        return "not installed"
    return service.triage_ci(ctx, repo, head_sha, installation_id, run_id=run_id,
                             job_id=job_id, check_suite_id=check_suite_id)


@_task(queues.COMMENT)
def comment(ctx, repo, pr, comment_id, installation_id, *, author, author_type, body,
            previous_body, action, written_at=None):
    if not service.installed(ctx, repo, installation_id):
        return "not installed"
    outcomes = service.handle_comment(ctx, repo, pr, comment_id, installation_id, author=author,
                                      author_type=author_type, body=body,
                                      previous_body=previous_body, action=action, written_at=written_at)
    return [str(o) for o in outcomes]


@_task(queues.PR_CLOSED)
def pr_closed(ctx, repo, pr, installation_id):
    ctx.store.close_pull(repo, pr)
    ctx.repos().forget_pull(repo, pr)  # its refs/pull/N/head leaves the worker's mirror
    return "closed"


@_task(queues.WARM_ENVIRONMENT)
def warm_environment(ctx, repo, branch, sha, installation_id):
    if not service.installed(ctx, repo, installation_id):
        return "not installed"
    with ExitStack() as worktree:
        checkout, problem = service.open_commit(ctx, worktree, installation_id, repo, branch, sha)
        state = warm.warm_environment(ctx, repo, branch, sha, checkout=checkout, skipped=problem,
                                      python=sys.executable, sandbox=Sandbox(bwrap=ctx.options.sandbox_bwrap)).state
    if state == "ready" and ctx.options.coverage_map_files:  # then the tip's map, a slice at a time
        coverage_map.apply_async((repo, sha, ctx.options.coverage_map_files, installation_id, branch), queue="build")
    return state


@_task(queues.COVERAGE_MAP)
def coverage_map(ctx, repo, sha, max_files=None, installation_id=None, branch=""):
    """A slice of a trunk commit's coverage map (resumable: a redelivery or the next call
    carries on where this one stopped). Returns what is left, for the caller to queue again.
    The commit is read from the local clone ETRIAGE_REPO_PATHS names, else fetched (with the
    installation and branch a pushed tip came with)."""
    with ExitStack() as worktree:
        if ctx.settings.repo_checkouts.get(repo) or branch:
            checkout, problem = service.open_commit(ctx, worktree, installation_id, repo, branch, sha)
        else:
            checkout, problem = None, f"no local clone of {repo} on this worker and no branch to fetch"
        if not checkout:
            return {"status": "skipped", "reason": problem}
        built = coverage_build.build_map(Path(checkout), sha, ctx.store, Path(ctx.settings.data_dir),
                                         max_files=max_files, sandbox=Sandbox(bwrap=ctx.options.sandbox_bwrap))
    if built.status == "ok" and built.remaining and max_files:  # the next slice: other builds go between
        coverage_map.apply_async((repo, sha, max_files, installation_id, branch), queue="build")
    return {"status": built.status, "reason": built.reason, "counts": built.counts, "remaining": built.remaining}


@_task(queues.INSTALLATION)
def installation(ctx, installation_id, account, action):
    ctx.store.record_installation(installation_id, account, action)
    return action


@_task(queues.PUBLISH_PENDING)
def publish_pending(ctx):
    return service.publish_pending(ctx)


@_task(queues.EXPIRE_RUNS)
def expire_runs(ctx):
    return service.expire_runs(ctx)
