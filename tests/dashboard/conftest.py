"""The dashboard's fixtures: a Store + History on SQLite and on PostgreSQL (own table prefix),
seeded databases (etriage/seed.py) and the real app over them, on a real Redis."""
from __future__ import annotations

import threading
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
import redis
from werkzeug.serving import make_server

from bot.app import create_app
from bot.dashboard import DashboardConfig
from bot.history import History
from bot.store import Store
from etriage.dev.github_double import GitHubDouble
from etriage.seed import PRIVATE, seed

SEED_RUNS, SEED_RESULTS = 240, 4800
CLIENT_ID, CLIENT_SECRET = "Iv1.dashboardtest", "oauth-client-secret"  # the double's OAuth app


@pytest.fixture
def double():
    """The GitHub double with the dashboard's OAuth app (the login flow's tests)."""
    with GitHubDouble() as github:
        github.add_oauth_app(CLIENT_ID, CLIENT_SECRET)
        yield github


@pytest.fixture(params=["sqlite", "postgresql"])
def history(request, tmp_path):
    if request.param == "sqlite":
        store = Store(f"sqlite:///{tmp_path / 'etriage.db'}")
    else:
        store = Store(request.getfixturevalue("postgres_url"), prefix=f"t{uuid.uuid4().hex[:10]}_")
    yield History(store)
    store.drop_all()


@pytest.fixture(scope="session")
def seeded_sqlite(tmp_path_factory, shared_dir):
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('seeded') / 'etriage.db'}")
    history = History(store)
    seed(history, runs=SEED_RUNS, results=SEED_RESULTS, shared=shared_dir)
    yield history
    store.close()


@pytest.fixture(scope="session")
def seeded_postgresql(postgres_url, shared_dir):
    store = Store(postgres_url, prefix=f"t{uuid.uuid4().hex[:10]}_")
    history = History(store)
    seed(history, runs=SEED_RUNS, results=SEED_RESULTS, shared=shared_dir)
    yield history
    store.drop_all()


@pytest.fixture(params=["sqlite", "postgresql"])
def seeded(request):
    return request.getfixturevalue(f"seeded_{request.param}")


CONFIG = DashboardConfig(private_repos=frozenset({PRIVATE}), secure_cookies=True,
                         session_secret="test-session-secret")


def make_app(history: History, redis_url: str, config: DashboardConfig = CONFIG, **settings):
    client = redis.Redis.from_url(redis_url)
    app = create_app({"webhook_secrets": ["test-webhook-secret"], "redis_url": redis_url, **settings},
                     redis_client=client, dashboard_config=config)
    app.extensions["etriage-dashboard"].use(history)
    return app


@pytest.fixture
def client(seeded_sqlite, redis_url):
    return make_app(seeded_sqlite, redis_url).test_client()


@pytest.fixture
def live_server(seeded_sqlite, redis_url):
    """The app in a real HTTP server thread (for the browser)."""
    app = make_app(seeded_sqlite, redis_url, replace(CONFIG, secure_cookies=False))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


