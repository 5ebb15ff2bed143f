"""The dashboard's mutes: listed for anyone who may read the repository, in force or not; added
and lifted only by a GitHub login (the OAuth web flow against the GitHub double) with push
access, with the session's CSRF token; on SQLite and PostgreSQL."""
from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from bot import mutes
from bot.history import RunInfo
from tests.dashboard.conftest import CLIENT_ID, CLIENT_SECRET, CONFIG, make_app
from tests.dashboard.test_auth import log_in

REPO = "pytorch/executorch"
CLUSTER = "c00112233445"


@pytest.fixture
def app(history, redis_url, double):
    history.start_run(RunInfo(REPO, 5, title="a run"), head_sha="a" * 40)  # the dashboard knows the repository
    with history.engine.begin() as conn:
        conn.execute(history.t["clusters"].insert().values(id=CLUSTER, text="boom", title="RuntimeError: boom"))
    config = replace(CONFIG, oauth_client_id=CLIENT_ID, oauth_client_secret=CLIENT_SECRET, github_web_url=double.url)
    return make_app(history, redis_url, config, github_api_url=double.url)


def token(page: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


def test_a_maintainer_mutes_and_lifts_on_the_dashboard_and_a_reader_cannot(app, double, history):
    store = history.store
    anonymous = app.test_client()
    assert "No mute yet." in anonymous.get("/dashboard/mutes/").get_data(as_text=True)

    double.sign_in("reader", {REPO: False})
    reader = app.test_client()
    log_in(reader, double)
    page = reader.get("/dashboard/mutes/").get_data(as_text=True)
    assert "Mute a test or a cluster" not in page and "muting needs push access" in page
    form = {"csrf": token(page), "repo": REPO, "kind": "test", "key": "t::a", "duration": "7d", "reason": "flaky"}
    assert reader.post("/dashboard/mutes/", data=form).status_code == 403

    double.sign_in("maintainer", {REPO: False}, writable={REPO})
    client = app.test_client()
    log_in(client, double)
    page = client.get("/dashboard/mutes/").get_data(as_text=True)
    assert "Mute a test or a cluster" in page
    form = dict(form, csrf=token(page))
    assert client.post("/dashboard/mutes/", data=dict(form, csrf="forged")).status_code == 400
    bad = client.post("/dashboard/mutes/", data=dict(form, duration="forever"))
    assert bad.status_code == 400 and "is not a duration" in bad.get_data(as_text=True)
    assert client.post("/dashboard/mutes/", data=dict(form, kind="cluster", key="c99999999999")).status_code == 404
    assert client.post("/dashboard/mutes/", data=dict(form, reason="  ")).status_code == 400
    assert mutes.active(store, REPO) == []

    answer = client.post("/dashboard/mutes/", data=dict(form, reason="<b>flaky</b> on the QNN runner"))
    assert answer.status_code == 303
    assert client.post("/dashboard/mutes/", data=dict(form, kind="cluster", key=CLUSTER)).status_code == 303
    [cluster_mute, test_mute] = mutes.active(store, REPO)
    assert (test_mute.muted_by, test_mute.source, test_mute.key) == ("maintainer", "dashboard", "t::a")
    page = client.get("/dashboard/mutes/").get_data(as_text=True)
    assert "&lt;b&gt;flaky&lt;/b&gt; on the QNN runner" in page and "<b>flaky" not in page
    assert page.count(">in force<") == 2 and f'href="/dashboard/clusters/{CLUSTER}"' in page
    assert "Content-Security-Policy" in client.get("/dashboard/mutes/").headers

    assert reader.post(f"/dashboard/mutes/{test_mute.id}/lift", data={"csrf": token(
        reader.get("/dashboard/mutes/").get_data(as_text=True))}).status_code == 403
    assert client.post(f"/dashboard/mutes/{test_mute.id}/lift", data={"csrf": form["csrf"]}).status_code == 303
    assert [m.kind for m in mutes.active(store, REPO)] == ["cluster"]
    page = anonymous.get("/dashboard/mutes/").get_data(as_text=True)
    assert "lifted by maintainer" in page  # never hidden: a lifted mute stays listed
    assert client.post(f"/dashboard/mutes/{test_mute.id}/lift", data={"csrf": form["csrf"]}).status_code == 409


def test_an_expired_mute_is_listed_as_expired_with_what_it_set_aside(app, history):
    store = history.store
    past = datetime.now(timezone.utc) - timedelta(minutes=1)
    row = store.mute(REPO, "cluster", CLUSTER, until=datetime.now(timezone.utc) + timedelta(hours=1),
                     reason="tracked", by="alice", source="comment")
    run = history.start_run(RunInfo(REPO, 6, title="muted"), head_sha="b" * 40)
    with history.engine.begin() as conn:
        conn.execute(history.t["failure_events"].insert().values(
            run_id=run, repo=REPO, pr=6, sha="b" * 40, source="ci:job", test="t::x", verdict="ignored",
            cluster_id=CLUSTER, fingerprint="f1", at=past - timedelta(hours=1)))
        conn.execute(store.t["mutes"].update().where(store.t["mutes"].c.id == row["id"])  # made 2 hours ago
                     .values(created_at=past - timedelta(hours=2), until=past))
    page = app.test_client().get("/dashboard/mutes/").get_data(as_text=True)
    assert ">expired<" in page and "1 failure(s)" in page and "/dashboard/pr/pytorch/executorch/6" in page
    assert mutes.active(store, REPO) == []
