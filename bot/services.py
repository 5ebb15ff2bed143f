"""What the web app's request handlers share: the `Services` of the app they run in, and
`answer`, the one shape of every JSON answer. Apart from bot.app so the blueprints need not
import the factory that registers them."""
from __future__ import annotations

from dataclasses import dataclass, field

import redis
from flask import current_app, jsonify

from bot.publisher import Publisher
from bot.settings import Settings


@dataclass
class Services:
    """What the request handlers use, built once per app."""

    settings: Settings
    redis: redis.Redis
    injected_dispatcher: object | None = None
    _dispatcher: object | None = field(default=None, init=False, repr=False)

    @property
    def dispatcher(self):
        """Where work is published: a bot.publisher.Publisher unless injected, built on first use
        (so an app that only answers health checks never connects a broker)."""
        if self._dispatcher is None:
            self._dispatcher = self.injected_dispatcher or Publisher.for_settings(self.settings)
        return self._dispatcher


def services() -> Services:
    return current_app.extensions["etriage"]


def answer(http_status: int, status: str, detail: str, **extra):
    return jsonify({"status": status, "detail": detail, **extra}), http_status
