"""The Flask application factory: `create_app(config=None)`.

Nothing is read or connected at import time. `config` is a `Settings`, a dict of Settings
fields (tests, `etriage serve`) or None (then the environment is read, now). One blueprint per
concern: `bot.webhooks` (POST /webhook) and `bot.health` (GET /healthz). Every answer, errors
included, is JSON `{"status": ..., "detail": ...}`.
"""
from __future__ import annotations

import os
from typing import Mapping

import redis
from flask import Flask
from werkzeug.exceptions import HTTPException

from bot import dashboard, health, repro, webhooks
from bot.services import Services, answer
from bot.settings import Settings, SettingsError


def create_app(
    config: Settings | Mapping | None = None,
    *,
    dispatcher: object | None = None,
    redis_client: redis.Redis | None = None,
    dashboard_config: dashboard.DashboardConfig | None = None,
) -> Flask:
    """The web app. `dispatcher` replaces the Publisher (an object with the same methods and a
    `DispatchError` attribute); `redis_client` replaces the client built from redis_url."""
    settings = _settings(config)
    if redis_client is None:
        if not settings.redis_url:
            raise SettingsError("REDIS_URL is not set")
        # Short timeouts: a Redis outage must become a quick 503, not a hung webhook.
        redis_client = redis.Redis.from_url(
            settings.redis_url, socket_timeout=2, socket_connect_timeout=2
        )
    app = Flask(__name__)
    # Bodies sent without Content-Length (chunked) are cut one byte past the limit, so the
    # webhook can tell "too large" from "exactly the limit" without reading all of it.
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes + 1
    app.extensions["etriage"] = Services(settings, redis_client, dispatcher)
    app.register_blueprint(webhooks.blueprint)
    app.register_blueprint(health.blueprint)
    # The dashboard (bot/dashboard): pages, /api/, /metrics, GitHub login. Its database opens
    # on first use; its settings come from the environment only when the app's do.
    dashboard.init_app(app, settings, redis_client, dashboard_config or (
        dashboard.DashboardConfig.from_env(os.environ) if config is None else None))
    app.register_blueprint(repro.blueprint)  # the evidence and probe scripts the PR comment links to
    app.register_error_handler(HTTPException, _http_error_as_json)
    return app


def _settings(config: Settings | Mapping | None) -> Settings:
    if isinstance(config, Settings):
        return config
    if config is None:
        return Settings.from_env(os.environ)
    return Settings.from_mapping(config)


def _http_error_as_json(error: HTTPException):
    return answer(error.code or 500, "error", error.description or error.name)
