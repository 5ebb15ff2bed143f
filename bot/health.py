"""GET /healthz: 200 when Redis (broker and delivery dedupe) answers a PING, else 503."""
from __future__ import annotations

import logging

import redis
from flask import Blueprint

from bot.services import answer, services

log = logging.getLogger(__name__)
blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
def healthz():
    try:
        services().redis.ping()
    except redis.RedisError as error:
        log.warning("health check: redis unavailable: %s", error)
        return answer(503, "unavailable", f"redis: {type(error).__name__}: {error}")
    return answer(200, "ok", "redis answers")
