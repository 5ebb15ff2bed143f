"""The dashboard's configuration and its per-app state (bot.dashboard.init_app makes them)."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Mapping

from flask import current_app

from bot.dashboard.counts import DeliveryCounts
from bot.dashboard.queries import Dashboard
from bot.history import History
from bot.store import Store


@dataclass(frozen=True)
class DashboardConfig:
    database_url: str | None = None  # None: the store's (settings.database_url_or_default)
    private_repos: frozenset[str] = field(default_factory=frozenset)  # need a login that can read them
    oauth_client_id: str | None = None  # the GitHub App's OAuth client (web flow)
    oauth_client_secret: str | None = None
    github_web_url: str = "https://github.com"  # where /login/oauth/* lives
    session_secret: str | None = None  # None: derived from the webhook secret
    secure_cookies: bool = True  # Secure session cookie (HTTPS, or http://localhost in a browser)
    public_url: str = ""  # this app's own address, for links printed elsewhere

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "DashboardConfig":
        def repos(value: str) -> frozenset[str]:
            return frozenset(r.strip() for r in value.split(",") if r.strip())

        return cls(
            database_url=environ.get("DATABASE_URL") or None,
            private_repos=repos(environ.get("ETRIAGE_DASHBOARD_PRIVATE_REPOS", "")),
            oauth_client_id=environ.get("ETRIAGE_OAUTH_CLIENT_ID") or None,
            oauth_client_secret=environ.get("ETRIAGE_OAUTH_CLIENT_SECRET") or None,
            github_web_url=(environ.get("ETRIAGE_GITHUB_WEB_URL") or "https://github.com").rstrip("/"),
            session_secret=environ.get("ETRIAGE_SESSION_SECRET") or None,
            secure_cookies=environ.get("ETRIAGE_DASHBOARD_INSECURE_COOKIES", "") not in ("1", "true", "yes"),
            public_url=(environ.get("ETRIAGE_PUBLIC_URL") or "").rstrip("/"),
        )


class DashboardState:
    """The dashboard's share of the app: config, Redis, and the database opened on first use."""

    def __init__(self, config: DashboardConfig, settings, redis_client):
        self.config = config
        self.settings = settings
        self.redis = redis_client
        self.deliveries = DeliveryCounts(redis_client)
        self._dashboard: Dashboard | None = None
        self._lock = threading.Lock()

    @property
    def dashboard(self) -> Dashboard:
        with self._lock:
            if self._dashboard is None:
                url = self.config.database_url or self.settings.database_url_or_default
                self._dashboard = Dashboard(History(Store(url)))
            return self._dashboard

    def use(self, history: History) -> None:
        """Serve this history (tests, `etriage dashboard --demo`) instead of opening one."""
        with self._lock:
            self._dashboard = Dashboard(history)


def state() -> DashboardState:
    return current_app.extensions["etriage-dashboard"]


