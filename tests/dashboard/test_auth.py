"""Who may look: public repositories for anyone, a private one only after a GitHub login (the
OAuth web flow against the GitHub API double) by a user who can read it; signed sessions with
HttpOnly, Secure, SameSite cookies."""
from __future__ import annotations

import re
from dataclasses import replace
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from sqlalchemy import select

from etriage.seed import PRIVATE, PUBLIC
from tests.dashboard.conftest import CLIENT_ID, CLIENT_SECRET, CONFIG, make_app


@pytest.fixture
def app(seeded_sqlite, redis_url, double):
    config = replace(CONFIG, oauth_client_id=CLIENT_ID, oauth_client_secret=CLIENT_SECRET,
                     github_web_url=double.url)
    return make_app(seeded_sqlite, redis_url, config, github_api_url=double.url)


def private_pr(history) -> int:
    runs = history.t["triage_runs"]
    with history.engine.connect() as conn:
        return conn.execute(select(runs.c.pr).where(runs.c.repo == PRIVATE)).scalar()


def log_in(client, double, *, next_url="/dashboard/"):
    """The browser's part of the web flow: /login -> GitHub's authorize -> /login/callback."""
    to_github = client.get(f"/login?next={next_url}")
    assert to_github.status_code == 302
    authorize = to_github.headers["Location"]
    assert authorize.startswith(f"{double.url}/login/oauth/authorize?")
    back = requests.get(authorize, allow_redirects=False, timeout=10)  # GitHub's consent, approved
    assert back.status_code == 302
    parts = urlsplit(back.headers["Location"])
    return client.get(f"{parts.path}?{parts.query}")


def test_a_private_repository_is_hidden_from_strangers(app, seeded_sqlite):
    client = app.test_client()
    pr = private_pr(seeded_sqlite)
    page = client.get(f"/dashboard/pr/{PRIVATE}/{pr}")
    assert page.status_code == 302 and "/login?next=" in page.headers["Location"]
    assert client.get(f"/api/prs/{PRIVATE}/{pr}").status_code == 404
    listed = client.get("/api/prs?days=90").get_json()["items"]
    assert listed and all(p["repo"] == PUBLIC for p in listed)
    assert PRIVATE not in client.get("/dashboard/prs?days=90").get_data(as_text=True)


def test_login_shows_the_private_repositories_the_user_can_read(app, double, seeded_sqlite):
    double.sign_in("maintainer", {PRIVATE: True, PUBLIC: False})
    client = app.test_client()
    pr = private_pr(seeded_sqlite)
    done = log_in(client, double, next_url=f"/dashboard/pr/{PRIVATE}/{pr}")
    assert done.status_code == 302 and done.headers["Location"] == f"/dashboard/pr/{PRIVATE}/{pr}"
    cookie = done.headers["Set-Cookie"]
    for flag in ("HttpOnly", "Secure", "SameSite=Lax"):
        assert flag in cookie
    assert "ghu_" not in cookie  # the user's token is never kept
    page = client.get(f"/dashboard/pr/{PRIVATE}/{pr}")
    assert page.status_code == 200 and "signed in as <b>maintainer</b>" in page.get_data(as_text=True)
    assert any(p["repo"] == PRIVATE for p in client.get("/api/prs?days=90").get_json()["items"])
    # the exchange happened server to server: the double saw the code traded with the secret
    [exchange] = double.requests_to("POST", r"^/login/oauth/access_token$")
    assert parse_qs(exchange.body)["client_secret"] == [CLIENT_SECRET]
    assert client.post("/logout").status_code == 400  # without the form's token
    token = re.search(r'name="csrf" value="([^"]+)"', page.get_data(as_text=True)).group(1)
    client.post("/logout", data={"csrf": token})
    assert client.get(f"/api/prs/{PRIVATE}/{pr}").status_code == 404


def test_a_user_without_access_still_cannot_see_it(app, double, seeded_sqlite):
    double.sign_in("stranger", {PUBLIC: False})
    client = app.test_client()
    assert log_in(client, double).status_code == 302
    pr = private_pr(seeded_sqlite)
    assert client.get(f"/dashboard/pr/{PRIVATE}/{pr}").status_code == 404  # not even a login prompt
    assert all(p["repo"] == PUBLIC for p in client.get("/api/prs?days=90").get_json()["items"])


def test_a_forged_or_denied_callback_is_refused(app, double):
    client = app.test_client()
    assert client.get("/login/callback?code=x&state=forged").status_code == 400
    double.sign_in(None)  # nobody approves: GitHub sends error=access_denied
    answer = log_in(client, double)
    assert answer.status_code == 400 and "did not grant access" in answer.get_data(as_text=True)


def test_login_without_an_oauth_client_says_so(seeded_sqlite, redis_url):
    answer = make_app(seeded_sqlite, redis_url).test_client().get("/login")
    assert answer.status_code == 503 and "ETRIAGE_OAUTH_CLIENT_ID" in answer.get_data(as_text=True)


def test_a_maintainer_retries_an_abandoned_run(tmp_path, redis_url, double):
    import base64
    import json
    import re
    from datetime import datetime, timedelta, timezone

    import redis

    from bot.history import History, RunInfo
    from bot.store import Store

    store = Store(f"sqlite:///{tmp_path / 'retry.db'}")
    history = History(store)
    started = datetime.now(timezone.utc) - timedelta(hours=3)
    stuck = history.start_run(RunInfo(PUBLIC, 77, started_at=started, title="stuck"), head_sha="a" * 40,
                              time_limit=timedelta(hours=1))
    store.record_pull(PUBLIC, 77, "a" * 40, base_ref="main", installation_id=5)
    queue = redis.Redis.from_url(redis_url)
    queue.delete("triage")
    config = replace(CONFIG, oauth_client_id=CLIENT_ID, oauth_client_secret=CLIENT_SECRET, github_web_url=double.url)
    app = make_app(history, redis_url, config, github_api_url=double.url)

    double.sign_in("reader", {PUBLIC: False})  # can read, cannot push
    reader = app.test_client()
    log_in(reader, double)
    page = reader.get(f"/dashboard/runs/{stuck}").get_data(as_text=True)
    assert "Retry this run" not in page and "can retry it here after logging in" in page

    double.sign_in("maintainer", {PUBLIC: False}, writable={PUBLIC})
    client = app.test_client()
    log_in(client, double)
    page = client.get(f"/dashboard/runs/{stuck}").get_data(as_text=True)
    token = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    assert client.post(f"/dashboard/runs/{stuck}/retry", data={"csrf": "forged"}).status_code == 400
    answer = client.post(f"/dashboard/runs/{stuck}/retry", data={"csrf": token})
    assert answer.status_code == 303
    new = int(answer.headers["Location"].rsplit("/", 1)[1])
    assert history.run(new)["retry_of"] == stuck and history.run(new)["status"] == "queued"
    assert history.run(stuck)["status"] == "abandoned"
    [message] = [json.loads(m) for m in queue.lrange("triage", 0, -1)]
    assert message["headers"]["task"] == "etriage.triage_pr"
    args = json.loads(base64.b64decode(message["body"]))[0]
    assert args == [PUBLIC, 77, "a" * 40, "main", 5]
    assert client.post(f"/dashboard/runs/{new}/retry", data={"csrf": token}).status_code == 409  # queued, not abandoned
    queue.delete("triage")
    reader_token = re.search(r'name="csrf" value="([^"]+)"', reader.get("/dashboard/").get_data(as_text=True)).group(1)
    assert reader.post(f"/dashboard/runs/{stuck}/retry", data={"csrf": reader_token}).status_code == 403
    assert queue.llen("triage") == 0
    store.close()


def test_anonymous_aggregates_count_public_repositories_only(app, seeded_sqlite):
    """Cluster totals, their daily counts and /metrics answer strangers: a private repository's
    failures are in none of them (issue 18: they were counted in both)."""
    f = seeded_sqlite.t["failure_events"]
    with seeded_sqlite.engine.connect() as conn:
        rows = conn.execute(select(f.c.cluster_id, f.c.repo, f.c.verdict, f.c.category)).all()
    public = [r for r in rows if r.repo == PUBLIC]
    assert public and any(r.repo == PRIVATE for r in rows)  # the seed has both
    client = app.test_client()
    items, page = [], 1
    while True:
        answer = client.get(f"/api/clusters?days=90&page={page}").get_json()
        items += answer["items"]
        if page >= answer["pagination"]["pages"]:
            break
        page += 1
    assert items
    for item in items:
        visible = [r for r in public if r.cluster_id == item["id"]]
        assert item["failures"] == len(visible), item
        assert sum(item["daily"]) <= len(visible)
    assert sum(i["failures"] for i in items) <= len(public) < len(rows)

    scraped = client.get("/metrics").get_data(as_text=True)
    counted = sum(float(line.rsplit(" ", 1)[1]) for line in scraped.splitlines()
                  if line.startswith("etriage_verdicts_total{"))
    assert counted == len(public), [line for line in scraped.splitlines() if "verdicts" in line][:5]
