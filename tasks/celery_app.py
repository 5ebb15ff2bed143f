"""The Celery app: `make_celery(settings, options)`, and `app` for `celery -A tasks.celery_app`.

Queues and task names are `bot.queues`' (the web side publishes with the same ones). Tasks
ack late and are requeued when their worker dies; the Redis visibility timeout bounds how long a message of a
SIGKILLed worker waits before another worker gets it (the tests set it to seconds).

Nothing is read at import: the module attribute `app` is built on first access from the
environment (the worker CLI), unless `configure(settings)` chose the settings first (serve,
tests). The web process does not import this module: it publishes through bot.publisher.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Mapping

from celery import Celery

from bot import queues
from bot.settings import load_or_exit
from tasks import devices
from tasks.repos import GIB, FetchPolicy

# Passed to the pipeline (and nothing else from the worker's environment): the tools need them.
# The sandbox lets only sandbox.PASS_THROUGH of these into a change's run; the device settings
# stay with the device targets, which reach the devices from the worker itself.
TOOL_VARIABLES = ("QNN_SDK_ROOT", "ANDROID_NDK_ROOT", "ANDROID_SERIAL") + devices.VARIABLES


@dataclass(frozen=True)
class WorkerOptions:
    """Worker-side knobs that are not part of the web's Settings (ETRIAGE_* variables), read
    once at start by `from_env`. docs/CONFIGURATION.md lists every variable."""

    visibility_timeout: int = 3600  # must exceed the longest task (else it runs twice)
    soft_time_limit: int = 2700
    time_limit: int = 3000
    max_retries: int = 6
    github_write_interval: float = 1.0  # GitHub asks for >= 1 s between content writes
    suites: tuple[str, ...] = ()  # restrict the pipeline's suites (empty: the plan decides)
    targets: tuple[str, ...] = ("host", "host-native")  # host-native: planned only with a native change
    pending_report_interval: float = 300.0  # beat: retry reports GitHub did not take
    run_expiry_hours: float = 6.0  # beat: runs in progress longer than this are expired
    tool_env: tuple[tuple[str, str], ...] = ()  # TOOL_VARIABLES that are set, for the pipeline
    suite_timeout: float = 1800.0  # wall-clock limit of one sandboxed suite run
    sandbox_bwrap: str = "bwrap"  # the bubblewrap binary; without one nothing of a change runs
    env_shared_store: str = ""  # a directory every build machine mounts: built environments, ccache
    coverage_map_files: int = 0  # test files per slice of a warmed trunk tip's coverage map (0: off)
    fetch: FetchPolicy = FetchPolicy()  # mirrors and worktrees (tasks/repos.py)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "WorkerOptions":
        def number(name, default, kind=int):
            raw = environ.get(name, "").strip()
            if not raw:
                return default
            try:
                value = kind(raw)
            except ValueError:
                raise ValueError(f"{name} must be a number, got {raw!r}") from None
            if value < 0:
                raise ValueError(f"{name} must not be negative, got {raw!r}")
            return value

        def words(name, default):
            raw = environ.get(name, "").strip()
            return tuple(w.strip() for w in raw.split(",") if w.strip()) if raw else default

        def gib(name, default_bytes):
            return int(number(name, default_bytes / GIB, float) * GIB)

        default = FetchPolicy()
        fetch = FetchPolicy(
            timeout_seconds=number("ETRIAGE_FETCH_TIMEOUT", default.timeout_seconds, float),
            horizon_days=number("ETRIAGE_MIRROR_HORIZON_DAYS", default.horizon_days),
            worktree_files=environ.get("ETRIAGE_WORKTREE_FILES", "").strip().lower() in ("1", "true", "yes"),
            worktrees_max_bytes=gib("ETRIAGE_WORKTREES_MAX_GIB", default.worktrees_max_bytes),
            mirror_max_bytes=gib("ETRIAGE_MIRROR_MAX_GIB", default.mirror_max_bytes),
            reserve_bytes=gib("ETRIAGE_DISK_RESERVE_GIB", default.reserve_bytes),
            submodule_hosts=words("ETRIAGE_SUBMODULE_HOSTS", default.submodule_hosts))

        return cls(
            visibility_timeout=number("ETRIAGE_VISIBILITY_TIMEOUT", cls.visibility_timeout),
            soft_time_limit=number("ETRIAGE_TASK_SOFT_TIME_LIMIT", cls.soft_time_limit),
            time_limit=number("ETRIAGE_TASK_TIME_LIMIT", cls.time_limit),
            max_retries=number("ETRIAGE_TASK_MAX_RETRIES", cls.max_retries),
            github_write_interval=number("ETRIAGE_GITHUB_WRITE_INTERVAL",
                                         cls.github_write_interval, float),
            suites=words("ETRIAGE_SUITES", cls.suites),
            targets=words("ETRIAGE_TARGETS", cls.targets),
            pending_report_interval=number("ETRIAGE_PENDING_REPORT_INTERVAL",
                                           cls.pending_report_interval, float),
            run_expiry_hours=number("ETRIAGE_RUN_EXPIRY_HOURS", cls.run_expiry_hours, float),
            tool_env=tuple((k, environ[k]) for k in TOOL_VARIABLES if environ.get(k, "").strip()),
            suite_timeout=number("ETRIAGE_SUITE_TIMEOUT", cls.suite_timeout, float),
            sandbox_bwrap=environ.get("ETRIAGE_SANDBOX_BWRAP", "").strip() or cls.sandbox_bwrap,
            env_shared_store=environ.get("ETRIAGE_ENV_SHARED_STORE", "").strip(),
            coverage_map_files=number("ETRIAGE_COVERAGE_MAP_FILES", cls.coverage_map_files),
            fetch=fetch,
        )


def make_celery(settings, options: WorkerOptions | None = None) -> Celery:
    options = options or WorkerOptions()
    if not settings.redis_url:
        raise ValueError("REDIS_URL is not set")
    app = Celery("etriage", broker=settings.redis_url, backend=settings.redis_url,
                 include=["tasks.jobs"], set_as_current=False)
    transport = {"visibility_timeout": options.visibility_timeout,
                 "socket_timeout": 5, "socket_connect_timeout": 3}
    app.conf.update(
        broker_transport_options=transport,
        result_backend_transport_options=transport,
        broker_connection_retry_on_startup=True,
        **queues.messaging_conf(),
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,  # a long task must not sit on messages others could run
        task_soft_time_limit=options.soft_time_limit,
        task_time_limit=options.time_limit,
        result_expires=timedelta(days=1),
        worker_hijack_root_logger=True,
        beat_schedule={
            "retry-pending-reports": {"task": queues.PUBLISH_PENDING,
                                      "schedule": options.pending_report_interval},
            "expire-stale-runs": {"task": queues.EXPIRE_RUNS, "schedule": 3600.0},
        },
    )
    app.etriage_settings = settings
    app.etriage_options = options
    return app


_lock = threading.Lock()
_configured: Celery | None = None


def configure(settings, options: WorkerOptions | None = None) -> Celery:
    """Choose the settings of this process's app (serve, tests) instead of the environment."""
    global _configured
    with _lock:
        _configured = make_celery(settings, options)
        return _configured


def get_app() -> Celery:
    global _configured
    with _lock:
        if _configured is None:
            _configured = make_celery(load_or_exit(os.environ, require_redis=True),
                                      WorkerOptions.from_env(os.environ))
        return _configured


def __getattr__(name: str):
    if name == "app":  # `celery -A tasks.celery_app worker` looks this up
        return get_app()
    raise AttributeError(name)
