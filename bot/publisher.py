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

import threading

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
        self.app, self.redis_url = app, redis_url
        self._redis: redis.Redis | None = None
        self._lock = threading.Lock()

    @classmethod
    def for_settings(cls, settings) -> "Publisher":
        return cls(publishing_app(settings.redis_url), settings.redis_url)

    def redis(self) -> redis.Redis:
        with self._lock:
            if self._redis is None:
                self._redis = redis.Redis.from_url(self.redis_url, socket_timeout=3, socket_connect_timeout=2)
            return self._redis

    def _send(self, name: str, args: list, kwargs: dict | None = None, *, queue: str = "triage"):
        try:
            return self.app.send_task(name, args=args, kwargs=kwargs or {}, queue=queue)
        except _BROKER_ERRORS as error:
            raise DispatchError(f"cannot queue {name}: {type(error).__name__}: {error}") from None

    def triage_pr(self, repo: str, pr: int, head_sha: str, base_ref: str, installation_id: int | None, *,
                  reason: str, targets=None, suites=None):
        client = self.redis()
        try:
            previous_head = client.getset(queues.head_key(repo, pr), head_sha)
            previous_task = client.get(queues.task_key(repo, pr))
        except redis.RedisError as error:
            raise DispatchError(f"cannot record the head of {repo}#{pr}: {error}") from None
        result = self._send(queues.TRIAGE_PR, [repo, pr, head_sha, base_ref, installation_id],
                            {"reason": reason, "targets": targets, "suites": suites})
        try:
            client.set(queues.task_key(repo, pr), result.id, ex=7 * 24 * 3600)
            if previous_task and previous_head and previous_head.decode() != head_sha:
                self.app.control.revoke(previous_task.decode())
        except _BROKER_ERRORS as error:  # the new task is queued; the old one stops at a checkpoint
            raise DispatchError(f"queued, but could not revoke the superseded task: {error}") from None
        return result.id

    def pr_closed(self, repo: str, pr: int, installation_id: int | None):
        try:
            self.redis().set(queues.head_key(repo, pr), "closed")
        except redis.RedisError as error:
            raise DispatchError(f"cannot record that {repo}#{pr} closed: {error}") from None
        return self._send(queues.PR_CLOSED, [repo, pr, installation_id]).id

    def ci_completed(self, repo: str, head_sha: str, installation_id: int | None, *, run_id=None,
                     job_id=None, check_suite_id=None):
        return self._send(queues.CI_COMPLETED, [repo, head_sha, installation_id],
                          {"run_id": run_id, "job_id": job_id, "check_suite_id": check_suite_id}).id

    def comment(self, repo: str, pr: int, comment_id: int, installation_id: int | None, *, author: str,
                author_type: str, body: str, previous_body: str | None, action: str):
        return self._send(queues.COMMENT, [repo, pr, comment_id, installation_id],
                          {"author": author, "author_type": author_type, "body": body,
                           "previous_body": previous_body, "action": action}).id

    def installation(self, installation_id: int, account: str, action: str):
        return self._send(queues.INSTALLATION, [installation_id, account, action]).id
