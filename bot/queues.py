"""What the web side (which publishes work) and the workers (which run it) must agree on, in
one place: task names, queues, their exchanges, and the Redis keys both read.

`bot.publisher` sends with these names; `tasks.jobs` registers its tasks under them and
`tasks.celery_app` builds the workers' app from `messaging_conf`. Neither side imports the
other.
"""
from __future__ import annotations

from kombu import Exchange, Queue

from triage_rules import catalogue

# Tasks, by the name Celery knows them. The publisher's methods carry the same short names.
TRIAGE_PR = "etriage.triage_pr"
RUN_SUITES = "etriage.run_suites"
CI_COMPLETED = "etriage.ci_completed"
COMMENT = "etriage.comment"
PR_CLOSED = "etriage.pr_closed"
INSTALLATION = "etriage.installation"
PUBLISH_PENDING = "etriage.publish_pending"
EXPIRE_RUNS = "etriage.expire_runs"
WARM_ENVIRONMENT = "etriage.warm_environment"  # a pushed branch tip's environment, on `build`
COVERAGE_MAP = "etriage.coverage_map"  # a trunk commit's coverage map, file by file, on `build`

# Queues are per resource: `triage` (planning, CI-log classification, reporting, commands),
# `build` (rebuild + host suites), `emulator` (qnn-htp-sim), `device` (phones).
QUEUES = ("triage", "build", "emulator", "device")


def target_queue(target: str | None) -> str:
    """The queue whose workers run a target (the catalogue's `queue`); `build` for the host."""
    entry = catalogue.targets().get(target or "host")
    return entry.queue if entry else "build"


def messaging_conf() -> dict:
    """Celery settings of the messages themselves, the same for publisher and workers."""
    return dict(
        task_default_queue="triage",
        # Each queue its own exchange and key: with bare Queue(name) Celery binds every queue
        # to the default exchange and key, which only works by accident of the Redis transport.
        task_queues=[Queue(name, Exchange(name, type="direct"), routing_key=name) for name in QUEUES],
        task_default_exchange="triage",
        task_default_routing_key="triage",
        task_routes={RUN_SUITES: {"queue": "build"},  # callers pick the target's queue
                     WARM_ENVIRONMENT: {"queue": "build"}, COVERAGE_MAP: {"queue": "build"}},
        task_serializer="json", result_serializer="json", accept_content=["json"],
        task_publish_retry_policy={"max_retries": 2, "interval_start": 0,
                                   "interval_step": 0.5, "interval_max": 1},
    )


def head_key(repo: str, pr: int) -> str:
    """The latest head sha of a PR ("closed" once closed): written by the webhook's publisher
    and by tasks that saw GitHub, read by tasks at their checkpoints."""
    return f"etriage:head:{repo}#{pr}"


def task_key(repo: str, pr: int) -> str:
    """The id of the PR's latest triage task, so a newer push can revoke it."""
    return f"etriage:task:{repo}#{pr}"


# Commit environments being made or made (tasks/environments, the `build` queue): a hash of
# "<repo>@<sha>" -> JSON {repo, branch, sha, state, started, seconds, compiled, disk_bytes, reason},
# written by the workers, read by the dashboard's devices & queues page.
ENVIRONMENTS_KEY = "etriage:environments"
ENVIRONMENTS_KEPT = 50  # the newest entries the hash keeps
