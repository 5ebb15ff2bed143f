"""The only door from the webhook (and slash commands) into the workers.

Each function takes plain values, publishes one Celery message and returns quickly. A broker
or Redis outage raises `DispatchError` (the webhook answers 503 so GitHub redelivers). A new
head sha of a PR is recorded in Redis before its task is sent, and the PR's previous triage task
is revoked: a queued one never starts, a running one sees the new head at its next checkpoint.
"""
from __future__ import annotations

import redis
from kombu.exceptions import KombuError, OperationalError

from tasks.celery_app import get_app

_BROKER_ERRORS = (OperationalError, KombuError, redis.RedisError, ConnectionError, OSError)


class DispatchError(RuntimeError):
    """The work could not be queued (broker/Redis unavailable); nothing was recorded."""


def _redis(app) -> redis.Redis:
    client = getattr(app, "etriage_redis", None)
    if client is None:
        client = redis.Redis.from_url(app.etriage_settings.redis_url, socket_timeout=3,
                                      socket_connect_timeout=2)
        app.etriage_redis = client
    return client


def _send(name: str, args: list, kwargs: dict | None = None, *, queue: str = "triage"):
    app = get_app()
    try:
        return app.send_task(name, args=args, kwargs=kwargs or {}, queue=queue)
    except _BROKER_ERRORS as error:
        raise DispatchError(f"cannot queue {name}: {type(error).__name__}: {error}") from None


def triage_pr(repo: str, pr: int, head_sha: str, base_ref: str, installation_id: int | None, *,
              reason: str, targets=None, suites=None):
    from tasks.service import head_key

    app = get_app()
    client = _redis(app)
    task_key = f"etriage:task:{repo}#{pr}"
    try:
        previous_head = client.getset(head_key(repo, pr), head_sha)
        previous_task = client.get(task_key)
    except redis.RedisError as error:
        raise DispatchError(f"cannot record the head of {repo}#{pr}: {error}") from None
    result = _send("etriage.triage_pr", [repo, pr, head_sha, base_ref, installation_id],
                   {"reason": reason, "targets": targets, "suites": suites})
    try:
        client.set(task_key, result.id, ex=7 * 24 * 3600)
        if previous_task and previous_head and previous_head.decode() != head_sha:
            app.control.revoke(previous_task.decode())
    except _BROKER_ERRORS as error:  # the new task is queued; the old one stops at a checkpoint
        raise DispatchError(f"queued, but could not revoke the superseded task: {error}") from None
    return result.id


def pr_closed(repo: str, pr: int, installation_id: int | None):
    from tasks.service import head_key

    try:
        _redis(get_app()).set(head_key(repo, pr), "closed")
    except redis.RedisError as error:
        raise DispatchError(f"cannot record that {repo}#{pr} closed: {error}") from None
    return _send("etriage.pr_closed", [repo, pr, installation_id]).id


def ci_completed(repo: str, head_sha: str, installation_id: int | None, *, run_id=None,
                 job_id=None, check_suite_id=None):
    return _send("etriage.ci_completed", [repo, head_sha, installation_id],
                 {"run_id": run_id, "job_id": job_id, "check_suite_id": check_suite_id}).id


def comment(repo: str, pr: int, comment_id: int, installation_id: int | None, *, author: str,
            author_type: str, body: str, previous_body: str | None, action: str):
    return _send("etriage.comment", [repo, pr, comment_id, installation_id],
                 {"author": author, "author_type": author_type, "body": body,
                  "previous_body": previous_body, "action": action}).id


def installation(installation_id: int, account: str, action: str):
    return _send("etriage.installation", [installation_id, account, action]).id
