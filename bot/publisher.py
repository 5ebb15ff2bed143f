"""The only door from the webhook (and slash commands) into the workers.

`Publisher` has one method per task (`bot.queues` names them); each takes plain values, sends
one Celery message and returns quickly. A broker or Redis outage raises `DispatchError` (the
webhook answers 503 so GitHub redelivers). A new head sha of a PR is recorded in Redis with its
task, and the PR's previous triage task is revoked: a queued one never starts, a running one
sees the new head at its next checkpoint.

Every method takes an optional `claim` (the webhook's delivery id): the claim, the head and task
bookkeeping and the message go to Redis in ONE round trip, a server-side script that claims the
delivery and, only if that claim is new, records and queues the work. So a delivery is queued
exactly once, and a Redis outage leaves nothing half-done. A delivery already claimed raises
`Claimed` and queues nothing.

The web process builds its own small Celery app that only publishes (`for_settings`); a worker
hands in its own app. Nothing here imports the tasks.
"""
from __future__ import annotations

import base64
import json
import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass

import redis
from celery import Celery
from kombu.exceptions import KombuError, OperationalError

from bot import queues

log = logging.getLogger(__name__)
_BROKER_ERRORS = (OperationalError, KombuError, redis.RedisError, ConnectionError, OSError)


class DispatchError(RuntimeError):
    """The work could not be queued (broker/Redis unavailable); nothing was recorded."""


class Claimed(Exception):
    """The delivery was claimed before: nothing was queued. `state` is the claim's value
    ("done" once queued; "pending" from a claim taken the older, non-atomic way)."""

    def __init__(self, state: str):
        super().__init__(state)
        self.state = state


@dataclass(frozen=True)
class Claim:
    """Mark `key` as done for `ttl_seconds` in the same step that queues the work."""
    key: str
    ttl_seconds: int


# KEYS: claim ("" = none), head ("" = none), task ("" = none), queue.
# ARGV: claim ttl, message, head sha, task id, task ttl.
# Returns {0, state} when the claim existed (nothing done), else {1, previous head, previous task}.
# Redis runs a script without interleaving, so checking the claim first and setting it last is
# atomic; the message is pushed before anything else is written, so a command Redis refuses
# (a wrong type at a key) leaves no claim behind and the redelivery is processed.
_PUBLISH = """
if KEYS[1] ~= "" then
  local state = redis.call("GET", KEYS[1])
  if state then return {0, state} end
end
redis.call("LPUSH", KEYS[4], ARGV[2])
local previous_head, previous_task = "", ""
if KEYS[2] ~= "" then previous_head = redis.call("GETSET", KEYS[2], ARGV[3]) or "" end
if KEYS[3] ~= "" then
  previous_task = redis.call("GET", KEYS[3]) or ""
  redis.call("SET", KEYS[3], ARGV[4], "EX", ARGV[5])
end
if KEYS[1] ~= "" then redis.call("SET", KEYS[1], "done", "EX", ARGV[1]) end
return {1, previous_head, previous_task}
"""
TASK_KEY_TTL_SECONDS = 7 * 24 * 3600


def publishing_app(redis_url: str) -> Celery:
    """A Celery app that sends etriage's messages and runs nothing."""
    if not redis_url:
        raise ValueError("REDIS_URL is not set")
    app = Celery("etriage-publisher", broker=redis_url, set_as_current=False)
    transport = {"socket_timeout": 5, "socket_connect_timeout": 3}
    app.conf.update(broker_transport_options=transport, broker_connection_retry_on_startup=True,
                    **queues.messaging_conf())
    return app


class Publisher:
    DispatchError = DispatchError  # the webhook catches what its dispatcher raises
    claims_atomically = True  # the webhook hands it the delivery's claim (one round trip)

    def __init__(self, app: Celery, redis_url: str):
        self.app, self.redis_url = app, redis_url  # the app only broadcasts revokes
        self._redis: redis.Redis | None = None
        self._script = None
        self._lock = threading.Lock()
        self._origin = f"etriage-publisher@{socket.gethostname()}/{os.getpid()}"

    @classmethod
    def for_settings(cls, settings) -> "Publisher":
        return cls(publishing_app(settings.redis_url), settings.redis_url)

    def redis(self) -> redis.Redis:
        with self._lock:
            if self._redis is None:
                self._redis = redis.Redis.from_url(self.redis_url, socket_timeout=3, socket_connect_timeout=2)
                self._script = self._redis.register_script(_PUBLISH)  # EVALSHA, loaded on first use
            return self._redis

    def _message(self, name: str, args: list, kwargs: dict | None, queue: str) -> tuple[str, str]:
        """(task id, the message as Celery 5's task protocol 2 puts it on a Redis list): built
        here, so a delivery costs one Redis round trip instead of kombu's several."""
        task_id = str(uuid.uuid4())
        kwargs = kwargs or {}
        body = json.dumps([args, kwargs, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}])
        message = {
            "body": base64.b64encode(body.encode()).decode(), "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {"lang": "py", "task": name, "id": task_id, "shadow": None, "eta": None, "expires": None,
                        "group": None, "group_index": None, "retries": 0, "timelimit": [None, None],
                        "root_id": task_id, "parent_id": None, "argsrepr": repr(args)[:1024],
                        "kwargsrepr": repr(kwargs)[:1024], "origin": self._origin, "ignore_result": False,
                        "replaced_task_nesting": 0, "stamped_headers": None, "stamps": {}},
            "properties": {"correlation_id": task_id, "reply_to": self._origin, "delivery_mode": 2,
                           "delivery_info": {"exchange": "", "routing_key": queue}, "priority": 0,
                           "body_encoding": "base64", "delivery_tag": str(uuid.uuid4())}}
        return task_id, json.dumps(message)

    def _publish(self, name: str, args: list, kwargs: dict | None, queue: str, claim: Claim | None, *,
                 head: tuple[str, str] | None = None, task_key: str | None = None) -> tuple[str, str, str]:
        """Claim (if asked), record `head` = (key, sha) and the task under `task_key` (if asked) and
        queue the message: one script, one round trip. Returns (task id, previous head, previous task)."""
        task_id, message = self._message(name, args, kwargs, queue)
        client = self.redis()
        keys = [claim.key if claim else "", head[0] if head else "", task_key or "", queue]
        argv = [claim.ttl_seconds if claim else 0, message, head[1] if head else "", task_id, TASK_KEY_TTL_SECONDS]
        try:
            done, *previous = self._script(keys=keys, args=argv, client=client)
        except _BROKER_ERRORS as error:
            kind = "Redis is unavailable" if isinstance(error, (redis.ConnectionError, redis.TimeoutError, OSError)) \
                else "Redis refused it"
            raise DispatchError(f"cannot queue {name}: {kind} ({type(error).__name__}: {error})") from None
        if not done:
            raise Claimed(previous[0].decode())
        return task_id, previous[0].decode(), previous[1].decode()

    def triage_pr(self, repo: str, pr: int, head_sha: str, base_ref: str, installation_id: int | None, *,
                  reason: str, targets=None, suites=None, pushed_at: str | None = None,
                  claim: Claim | None = None) -> str:
        """Record the new head, queue its triage and remember the task, in one round trip; revoke
        the superseded head's task, if any (it would stop at its first checkpoint anyway: the
        head moved)."""
        task_id, previous_head, previous_task = self._publish(
            queues.TRIAGE_PR, [repo, pr, head_sha, base_ref, installation_id],
            {"reason": reason, "targets": targets, "suites": suites, "pushed_at": pushed_at}, "triage", claim,
            head=(queues.head_key(repo, pr), head_sha), task_key=queues.task_key(repo, pr))
        if previous_task and previous_head and previous_head != head_sha:
            try:
                self.app.control.revoke(previous_task)
            except _BROKER_ERRORS as error:  # the new task is queued; the old one stops at a checkpoint
                log.warning("queued %s, but could not revoke the superseded task %s: %s", task_id, previous_task, error)
        return task_id

    def pr_closed(self, repo: str, pr: int, installation_id: int | None, *, claim: Claim | None = None) -> str:
        return self._publish(queues.PR_CLOSED, [repo, pr, installation_id], None, "triage", claim,
                             head=(queues.head_key(repo, pr), "closed"))[0]

    def ci_completed(self, repo: str, head_sha: str, installation_id: int | None, *, run_id=None,
                     job_id=None, check_suite_id=None, claim: Claim | None = None) -> str:
        return self._publish(queues.CI_COMPLETED, [repo, head_sha, installation_id],
                             {"run_id": run_id, "job_id": job_id, "check_suite_id": check_suite_id},
                             "triage", claim)[0]

    def comment(self, repo: str, pr: int, comment_id: int, installation_id: int | None, *, author: str,
                author_type: str, body: str, previous_body: str | None, action: str,
                written_at: str | None = None, claim: Claim | None = None) -> str:
        return self._publish(queues.COMMENT, [repo, pr, comment_id, installation_id],
                             {"author": author, "author_type": author_type, "body": body,
                              "previous_body": previous_body, "action": action, "written_at": written_at},
                             "triage", claim)[0]

    def warm_environment(self, repo: str, branch: str, sha: str, installation_id: int | None, *,
                         claim: Claim | None = None) -> str:
        """Make a pushed branch tip's environment on the `build` queue, so a PR opened on it starts warm."""
        return self._publish(queues.WARM_ENVIRONMENT, [repo, branch, sha, installation_id], None, "build", claim)[0]

    def installation(self, installation_id: int, account: str, action: str, *, claim: Claim | None = None) -> str:
        return self._publish(queues.INSTALLATION, [installation_id, account, action], None, "triage", claim)[0]
