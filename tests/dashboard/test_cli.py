"""`etriage dashboard`: serves the dashboard over a database; without one it says what to give."""
from __future__ import annotations

import urllib.request

from etriage.cli import main
from etriage.dashboard import start


def test_serves_a_seeded_database_over_http(seeded_sqlite, redis_url):
    server, url = start(str(seeded_sqlite.engine.url), redis_url)
    try:
        with urllib.request.urlopen(f"{url}/dashboard/clusters", timeout=30) as answer:
            assert answer.status == 200 and b'class="cluster"' in answer.read()
        with urllib.request.urlopen(f"{url}/api/openapi.json", timeout=30) as answer:
            assert answer.status == 200
    finally:
        server.shutdown()


def test_without_a_database_it_says_what_to_give(capsys, monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert main(["dashboard"]) == 2
    assert "--database-url" in capsys.readouterr().out
