"""`etriage dashboard`: serve the maintainer dashboard (pages, /api/, /metrics) over a database.

`--demo` seeds a fresh SQLite database (etriage/seed.py: realistic runs, clusters, flaky tests,
devices) in a temporary folder and serves that, with an embedded Redis for the queues page.
Without it, the database is --database-url (or DATABASE_URL) and Redis is REDIS_URL (or an
embedded one). Webhooks are not taken here: the app gets a random secret nobody knows.
"""
from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import threading
from pathlib import Path

import redis
from werkzeug.serving import make_server

from bot.app import create_app
from bot.dashboard import DashboardConfig
from bot.history import History
from bot.store import Store
from etriage.embedded_redis import EmbeddedRedis
from etriage.seed import seed


def add_arguments(parser) -> None:
    parser.add_argument("--demo", action="store_true", help="serve a freshly seeded database")
    parser.add_argument("--database-url", default=None, help="default: $DATABASE_URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8700, help="0 picks a free port")
    parser.add_argument("--runs", type=int, default=600, help="--demo: runs to seed")


def start(database_url: str, redis_url: str, *, host: str = "127.0.0.1", port: int = 0,
          config: DashboardConfig | None = None):
    """A threaded web server with the app on `database_url`; returns (server, base URL)."""
    client = redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
    config = config or DashboardConfig(database_url=database_url, secure_cookies=host not in ("0.0.0.0",))
    app = create_app({"webhook_secrets": [secrets.token_hex(16)], "redis_url": redis_url,
                      "database_url": database_url}, redis_client=client, dashboard_config=config)
    server = make_server(host, port, app, threaded=True)
    threading.Thread(target=server.serve_forever, name="etriage-dashboard", daemon=True).start()
    return server, f"http://{host}:{server.server_port}"


def run(args) -> int:
    folder = Path(tempfile.mkdtemp(prefix="etriage-dashboard-")) if args.demo else None
    database_url = args.database_url or os.environ.get("DATABASE_URL")
    embedded = None
    try:
        if args.demo:
            database_url = f"sqlite:///{folder / 'dashboard.db'}"
            store = Store(database_url)
            counts = seed(History(store), runs=args.runs, results=args.runs * 20,
                          shared=Path(__file__).resolve().parents[2] / "shared")
            store.close()
            print("seeded: " + ", ".join(f"{v} {k}" for k, v in counts.items()), flush=True)
        if not database_url:
            print("etriage dashboard: give --database-url (or DATABASE_URL), or --demo")
            return 2
        redis_url = os.environ.get("REDIS_URL")
        if not redis_url:
            embedded = EmbeddedRedis()
            redis_url = embedded.start()
        server, url = start(database_url, redis_url, host=args.host, port=args.port)
        print(f"etriage dashboard: {url}/dashboard/  (API {url}/api/openapi.json, metrics {url}/metrics);"
              " Ctrl-C stops it", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
        server.shutdown()
        return 0
    finally:
        if embedded is not None:
            embedded.stop()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
