"""The maintainer dashboard: server-rendered pages (/dashboard/), a read-only JSON API (/api/,
described by /api/openapi.json), Prometheus metrics (/metrics) and the GitHub login that private
repositories need. `init_app(app, settings, redis_client, config)` registers it all.

The database is opened on first use (an app that only takes webhooks never touches it), as a
bot.store.Store with bot.history's tables. Configuration is read once, at start
(`DashboardConfig.from_env`); nothing here reads the environment at import.
"""
from __future__ import annotations

import hashlib
import hmac

from flask import Flask
from flask.sessions import SecureCookieSessionInterface

from bot.dashboard import api, auth, metrics, mutes, pages
from bot.dashboard.context import DashboardConfig, DashboardState

__all__ = ["DashboardConfig", "DashboardState", "init_app"]


class PageSessions(SecureCookieSessionInterface):
    """Signed cookie sessions for the dashboard's pages and login only. The webhook, the health
    check and /metrics never read one, so they skip the cookie's signer on every request."""

    SESSIONLESS = ("/webhook", "/healthz", "/metrics")

    def open_session(self, app, request):
        if request.path.startswith(self.SESSIONLESS):
            return self.make_null_session(app)
        return super().open_session(app, request)


def init_app(app: Flask, settings, redis_client, config: DashboardConfig | None = None) -> DashboardState:
    config = config or DashboardConfig()
    secret = config.session_secret or hmac.new(
        settings.webhook_secrets[0].encode(), b"etriage dashboard session", hashlib.sha256).hexdigest()
    app.secret_key = secret
    app.session_interface = PageSessions()
    app.config.update(SESSION_COOKIE_NAME="etriage_session", SESSION_COOKIE_HTTPONLY=True,
                      SESSION_COOKIE_SECURE=config.secure_cookies, SESSION_COOKIE_SAMESITE="Lax",
                      PERMANENT_SESSION_LIFETIME=8 * 3600)
    dashboard_state = DashboardState(config, settings, redis_client)
    app.extensions["etriage-dashboard"] = dashboard_state
    app.register_blueprint(pages.blueprint)
    app.register_blueprint(api.blueprint)
    app.register_blueprint(auth.blueprint)
    app.register_blueprint(metrics.blueprint)
    app.register_blueprint(mutes.blueprint)
    return dashboard_state
