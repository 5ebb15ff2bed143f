"""POST /webhook: verify, route, record the delivery once, enqueue; answer in milliseconds.

Order matters: the body size is checked before the body is read, the signature before the JSON
is parsed, and the delivery id is claimed in Redis in the same step that enqueues the work.

| answer | when |
| --- | --- |
| 202 queued | the work was handed to bot.publisher |
| 202 ignored | an event, action or payload etriage has nothing to do for (detail says why) |
| 200 pong / duplicate | a ping; a delivery id already processed (redelivery) |
| 400 | missing X-GitHub-Event / X-GitHub-Delivery, malformed or too deeply nested JSON, payload |
|     | lacks a field the router reads or has it with the wrong type |
| 401 | X-Hub-Signature-256 missing or not made with any configured secret |
| 409 in_progress | the delivery id holds a "pending" claim (taken by an older etriage, or by a |
|     | dispatcher that cannot claim atomically, that has not finished) |
| 413 | body larger than max_body_bytes |
| 503 unavailable | Redis or the broker is down: the delivery is NOT marked as processed, so
|     | GitHub's redelivery (manual or API) is processed normally |

The publisher claims the delivery id ("done", kept for delivery_ttl_seconds) and queues the work
in one Redis round trip (a server-side script): either both happen or neither, so a failure
leaves nothing to release and a redelivery is processed normally. A dispatcher injected for
tests that cannot claim (no `claims_atomically`) gets the older three steps: a "pending" claim
with a short expiry, the enqueue, then "done"; a failed enqueue deletes the claim.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re

import redis
from flask import Blueprint, request
from kombu.exceptions import OperationalError as BrokerError

from bot import routing
from bot.publisher import Claim, Claimed
from bot.services import Services, answer, services

log = logging.getLogger(__name__)
blueprint = Blueprint("webhooks", __name__)

PENDING_CLAIM_SECONDS = 60
DELIVERY_ID = re.compile(r"[A-Za-z0-9-]{1,100}")  # GitHub sends a UUID


def signature_matches(body: bytes, header: str, secrets: tuple[str, ...]) -> bool:
    """True when `header` is sha256=<HMAC-SHA256 of body> for any of the secrets (rotation)."""
    if not header.startswith("sha256="):
        return False
    received = header.encode("ascii", "replace")
    matched = False
    for secret in secrets:  # compare with every secret: the time taken does not say which matched
        expected = b"sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest().encode()
        matched |= hmac.compare_digest(expected, received)
    return matched


@blueprint.post("/webhook")
def receive():
    svc = services()
    limit = svc.settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        return answer(413, "too_large", f"body of {request.content_length} bytes exceeds {limit}")
    body = request.get_data(cache=False)  # at most limit + 1 bytes, even when chunked
    if len(body) > limit:
        return answer(413, "too_large", f"body exceeds {limit} bytes")

    signature = request.headers.get("X-Hub-Signature-256")
    if not signature:
        return answer(401, "unauthorized", "missing X-Hub-Signature-256 header")
    if not signature_matches(body, signature, svc.settings.webhook_secrets):
        log.warning("rejected a delivery with a bad signature from %s", request.remote_addr)
        return answer(401, "unauthorized", "X-Hub-Signature-256 does not match the webhook secret")

    event = request.headers.get("X-GitHub-Event", "")
    delivery = request.headers.get("X-GitHub-Delivery", "")
    if not event:
        return answer(400, "bad_request", "missing X-GitHub-Event header")
    if not DELIVERY_ID.fullmatch(delivery):
        return answer(400, "bad_request", "missing or malformed X-GitHub-Delivery header")
    try:
        payload = json.loads(body)
    except ValueError as error:  # includes UnicodeDecodeError
        return answer(400, "bad_request", f"body is not valid JSON: {error}")
    except RecursionError:  # the parser's own stack: thousands of nested [ or {
        return answer(400, "bad_request", "body is JSON nested too deeply")
    if not isinstance(payload, dict):
        return answer(400, "bad_request", "body is JSON but not an object")

    if event == "ping":
        return answer(200, "pong", f"webhook {payload.get('hook_id')} is set up; zen: {payload.get('zen', '')}")
    try:
        decision = routing.route(event, payload, svc.settings.bot_login)
    except routing.PayloadError as error:
        return answer(400, "bad_request", str(error))
    if isinstance(decision, routing.Ignore):
        log.info("delivery %s (%s.%s) ignored: %s", delivery, event, payload.get("action"), decision.reason)
        return answer(202, "ignored", decision.reason)
    return _enqueue_once(svc, delivery, decision)


def _enqueue_once(svc: Services, delivery: str, job: routing.Enqueue):
    key = f"etriage:delivery:{delivery}"
    dispatcher = svc.dispatcher  # an import error here is a 500 before anything is claimed
    enqueue_errors = (getattr(dispatcher, "DispatchError", BrokerError), BrokerError, redis.RedisError)
    if not getattr(dispatcher, "claims_atomically", False):
        return _claim_then_enqueue(svc, dispatcher, key, delivery, job, enqueue_errors)
    try:
        getattr(dispatcher, job.task)(*job.args, claim=Claim(key, svc.settings.delivery_ttl_seconds), **job.kwargs)
    except Claimed as claimed:
        return _already(delivery, claimed.state)
    except enqueue_errors as error:
        log.error("delivery %s: enqueue of %s failed: %s", delivery, job.task, error)
        return _unavailable(f"cannot enqueue {job.task}: {error}")
    log.info("delivery %s queued: %s", delivery, job.summary)
    return answer(202, "queued", job.summary, task=job.task)


def _claim_then_enqueue(svc: Services, dispatcher, key: str, delivery: str, job: routing.Enqueue, enqueue_errors):
    try:
        claimed = svc.redis.set(key, "pending", nx=True, ex=PENDING_CLAIM_SECONDS)
        state = None if claimed else svc.redis.get(key)
    except redis.RedisError as error:
        log.error("delivery %s: cannot claim it in Redis: %s", delivery, error)
        return _unavailable(f"cannot record the delivery, Redis is unavailable ({type(error).__name__})")
    if not claimed:
        return _already(delivery, (state or b"").decode())

    try:
        getattr(dispatcher, job.task)(*job.args, **job.kwargs)
    except enqueue_errors as error:
        _release(svc, key)
        log.error("delivery %s: enqueue of %s failed: %s", delivery, job.task, error)
        return _unavailable(f"cannot enqueue {job.task}: {error}")
    except BaseException:
        _release(svc, key)  # a bug, not an outage: answer 500 but let a redelivery try again
        raise
    try:
        svc.redis.set(key, "done", ex=svc.settings.delivery_ttl_seconds)
    except redis.RedisError as error:
        # The work is queued; the pending claim expires soon, so only a redelivery in the next
        # minute is refused. Tasks are idempotent by key, so a later one is harmless.
        log.warning("delivery %s: queued, but could not mark it done: %s", delivery, error)
    log.info("delivery %s queued: %s", delivery, job.summary)
    return answer(202, "queued", job.summary, task=job.task)


def _already(delivery: str, state: str):
    if state == "done":
        return answer(200, "duplicate", f"delivery {delivery} was already processed")
    return answer(409, "in_progress", f"delivery {delivery} is being processed; redeliver later if it fails")


def _release(svc: Services, key: str) -> None:
    try:
        svc.redis.delete(key)
    except redis.RedisError as error:
        log.warning("could not release %s (it expires in %ss): %s", key, PENDING_CLAIM_SECONDS, error)


def _unavailable(detail: str):
    return answer(503, "unavailable", f"{detail}; nothing was recorded, GitHub can redeliver it")
