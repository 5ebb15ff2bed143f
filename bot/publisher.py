"""The only door from the webhook (and slash commands) into the workers.

`Publisher` has one method per task (`bot.queues` names them); each takes plain values, sends
one Celery message and returns quickly. A broker or Redis outage raises `DispatchError` (the
webhook answers 503 so GitHub redelivers). A new head sha of a PR is recorded in Redis before
its task is sent, and the PR's previous triage task is revoked: a queued one never starts, a
running one sees the new head at its next checkpoint.

The web process builds its own small Celery app that only publishes (`for_settings`); a worker
hands in its own app. Nothing here imports the tasks.
"""
from __future__ import annotations

import base64
import json
import os
import socket
import threading
import uuid

import redis
from celery import Celery
from kombu.exceptions import KombuError, OperationalError

from bot import queues

_BROKER_ERRORS = (OperationalError, KombuError, redis.RedisError, ConnectionError, OSError)


class DispatchError(RuntimeError):
    """The work could not be queued (broker/Redis unavailable); nothing was recorded."""


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

    def __init__(self, app: Celery, redis_url: str):
        self.app, self.redis_url = app, redis_url  # the app only broadcasts revokes
        self._redis: redis.Redis | None = None
        self._lock = threading.Lock()
        self._origin = f"etriage-publisher@{socket.gethostname()}/{os.getpid()}"

    @classmethod
    def for_settings(cls, settings) -> "Publisher":
        return cls(publishing_app(settings.redis_url), settings.redis_url)

    def redis(self) -> redis.Redis:
        with self._lock:
            if self._redis is None:
                self._redis = redis.Redis.from_url(self.redis_url, socket_timeout=3, socket_connect_timeout=2)
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

    def _send(self, name: str, args: list, kwargs: dict | None = None, *, queue: str = "triage") -> str:
        task_id, message = self._message(name, args, kwargs, queue)
        try:
            self.redis().lpush(queue, message)
        except _BROKER_ERRORS as error:
            raise DispatchError(f"cannot queue {name}: {type(error).__name__}: {error}") from None
        return task_id

    def triage_pr(self, repo: str, pr: int, head_sha: str, base_ref: str, installation_id: int | None, *,
                  reason: str, targets=None, suites=None) -> str:
        """Record the new head, queue its triage and remember the task, in one transaction (one
        round trip); revoke the superseded head's task, if any (it would stop at its first
        checkpoint anyway: the head moved)."""
        task_id, message = self._message(queues.TRIAGE_PR, [repo, pr, head_sha, base_ref, installation_id],
                                         {"reason": reason, "targets": targets, "suites": suites}, "triage")
        try:
            with self.redis().pipeline(transaction=True) as pipe:
                pipe.getset(queues.head_key(repo, pr), head_sha)
                pipe.get(queues.task_key(repo, pr))
                pipe.lpush("triage", message)
                pipe.set(queues.task_key(repo, pr), task_id, ex=7 * 24 * 3600)
                previous_head, previous_task, _, _ = pipe.execute()
        except _BROKER_ERRORS as error:
            raise DispatchError(f"cannot queue the triage of {repo}#{pr}: {type(error).__name__}: {error}") from None
        if previous_task and previous_head and previous_head.decode() != head_sha:
            try:
                self.app.control.revoke(previous_task.decode())
            except _BROKER_ERRORS as error:  # the new task is queued; the old one stops at a checkpoint
                raise DispatchError(f"queued, but could not revoke the superseded task: {error}") from None
        return task_id

    def pr_closed(self, repo: str, pr: int, installation_id: int | None):
        try:
            self.redis().set(queues.head_key(repo, pr), "closed")
        except redis.RedisError as error:
            raise DispatchError(f"cannot record that {repo}#{pr} closed: {error}") from None
        return self._send(queues.PR_CLOSED, [repo, pr, installation_id])

    def ci_completed(self, repo: str, head_sha: str, installation_id: int | None, *, run_id=None,
                     job_id=None, check_suite_id=None):
        return self._send(queues.CI_COMPLETED, [repo, head_sha, installation_id],
                          {"run_id": run_id, "job_id": job_id, "check_suite_id": check_suite_id})

    def comment(self, repo: str, pr: int, comment_id: int, installation_id: int | None, *, author: str,
                author_type: str, body: str, previous_body: str | None, action: str):
        return self._send(queues.COMMENT, [repo, pr, comment_id, installation_id],
                          {"author": author, "author_type": author_type, "body": body,
                           "previous_body": previous_body, "action": action})

    def installation(self, installation_id: int, account: str, action: str):
        return self._send(queues.INSTALLATION, [installation_id, account, action])
