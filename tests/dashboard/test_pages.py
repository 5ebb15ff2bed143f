"""The dashboard's pages on a seeded database: what each shows, filters, pagination, escaping,
errors as pages, and no script anywhere (usable without JavaScript)."""
from __future__ import annotations

import re
from html import unescape

import pytest
from sqlalchemy import select

from etriage.seed import HOSTILE_TITLE, PUBLIC

PAGES = ["/dashboard/", "/dashboard/prs", "/dashboard/clusters", "/dashboard/flaky", "/dashboard/devices"]


def text_of(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", " ", html))


def links(html: str, kind: str) -> list[str]:
    return re.findall(rf'<a class="{kind}" href="([^"]+)"', html)


@pytest.mark.parametrize("url", PAGES)
def test_every_page_renders_without_script(client, url):
    answer = client.get(url)
    assert answer.status_code == 200, answer.data[:500]
    html = answer.get_data(as_text=True)
    assert "<script" not in html.lower()  # server-rendered: nothing needs JavaScript
    assert "script-src" not in answer.headers["Content-Security-Policy"]  # default-src 'none': no script runs
    assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]
    assert 'href="/static/dashboard.css"' in html


def test_overview_shows_health_charts_prs_trunk_and_clusters(client, seeded_sqlite):
    html = client.get("/dashboard/").get_data(as_text=True)
    charts = re.findall(r"<svg class=\"chart\".*?</svg>", html, re.S)
    assert len(charts) == 2  # 7 and 30 days
    for chart in charts:
        assert "<title>Pass rate per backend / target" in chart
        assert ">100%</text>" in chart and ">0%</text>" in chart  # a y axis with labels
        assert "qualcomm / qnn-htp-sim" in chart and "portable / host" in chart  # the legend
        assert "<polyline" in chart
    assert "Open pull requests with new failures" in html and links(html, "pr")
    assert links(html, "cluster")  # busiest clusters (and trunk ones) link to their pages


def test_pr_list_counts_and_pagination(client):
    first = client.get("/dashboard/prs").get_data(as_text=True)
    assert int(re.search(r"page 1 of \d+ \((\d+)\)", first).group(1)) > 50
    second = client.get("/dashboard/prs?page=2").get_data(as_text=True)
    assert 'rel="next" href="/dashboard/prs?page=2"' in first
    assert set(links(first, "pr")).isdisjoint(links(second, "pr"))
    assert re.search(r"\d+ new</span> ·", first)
    only = client.get(f"/dashboard/prs?repo={PUBLIC}&days=90").get_data(as_text=True)
    assert links(only, "pr") and all(f"/pr/{PUBLIC}/" in link for link in links(only, "pr"))


def test_a_hostile_pr_title_stays_text(client, seeded_sqlite):
    runs = seeded_sqlite.t["triage_runs"]
    with seeded_sqlite.engine.connect() as conn:
        repo, pr = conn.execute(select(runs.c.repo, runs.c.pr).where(runs.c.title == HOSTILE_TITLE)).first()
    html = client.get(f"/dashboard/pr/{repo}/{pr}").get_data(as_text=True)
    assert "<script>alert" not in html and "<b>bold</b>" not in html
    assert "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;" in html
    assert HOSTILE_TITLE in text_of(html)


def test_pr_page_has_the_comment_failures_and_every_push(client):
    html = client.get("/dashboard/prs?days=90").get_data(as_text=True)
    page = client.get(links(html, "pr")[0]).get_data(as_text=True)
    assert "The PR comment" in page and "## etriage:" in page
    assert "Every push" in page and links(page, "run")


def test_cluster_list_filters_and_cluster_page(client):
    html = client.get("/dashboard/clusters?category=lint&days=90").get_data(as_text=True)
    rows = re.findall(r"<tr><td><a class=\"cluster\".*?</tr>", html, re.S)
    assert rows and all("<td>lint</td>" in row for row in rows)
    assert all('<svg class="spark"' in row for row in rows)
    page = client.get(links(html, "cluster")[0]).get_data(as_text=True)
    for heading in ("Primary lines", "Pull requests hit", "Jobs", "Occurrences"):
        assert heading in page
    assert "<title>Failures per day, last 30 days</title>" in page


def test_flaky_page_ranks_by_the_wilson_bound(client):
    html = client.get("/dashboard/flaky?days=90").get_data(as_text=True)
    bounds = [float(b) for b in re.findall(r"<td>[\d.]+%</td><td>([\d.]+)%</td>\s*<td class=\"trend", html)]
    assert bounds and bounds == sorted(bounds, reverse=True)


def test_run_page_highlights_the_primary_line_and_collapses_the_rest(client, seeded_sqlite):
    f, r = seeded_sqlite.t["failure_events"], seeded_sqlite.t["triage_runs"]
    with seeded_sqlite.engine.connect() as conn:  # a run whose primary line is deep in its log
        run_id, line = conn.execute(select(f.c.run_id, f.c.primary_line).join(r, r.c.id == f.c.run_id)
                                    .where(r.c.primary_line_no > 10, r.c.repo == PUBLIC).order_by(f.c.id)).first()
    html = client.get(f"/dashboard/runs/{run_id}").get_data(as_text=True)
    marked = re.search(r'<mark class="primary" id="primary">(.*?)</mark>', html, re.S)
    assert marked and unescape(marked.group(1)) == line
    assert "<details><summary>" in html and "earlier line(s)" in html
    assert "Stages" in html and "Results" in html


def test_devices_and_queues(client, redis_url):
    import redis as redis_module

    from bot.publisher import Publisher, publishing_app

    redis_module.Redis.from_url(redis_url).delete("triage")
    Publisher(publishing_app(redis_url), redis_url).installation(1, "octo", "created")
    html = client.get("/dashboard/devices").get_data(as_text=True)
    assert re.search(r"<tr><td>triage</td><td>1</td><td>\d+ s \(at least\)</td></tr>", html)
    assert "android-sm8650" in html and "R5CT0000" in html
    redis_module.Redis.from_url(redis_url).delete("triage")


@pytest.mark.parametrize("url, status", [
    ("/dashboard/prs?days=5", 400), ("/dashboard/clusters?page=0", 400), ("/dashboard/prs?repo=%00", 400),
    ("/dashboard/clusters/cnothere", 404), ("/dashboard/runs/99999999", 404),
    ("/dashboard/pr/nobody/nothing/1", 404)])
def test_bad_input_gets_a_clear_error_page(client, url, status):
    answer = client.get(url)
    assert answer.status_code == status
    assert answer.mimetype == "text/html" and f"<h1>{status} " in answer.get_data(as_text=True)


@pytest.mark.parametrize("url", ["/dashboard/runs/12345678901234567890", "/dashboard/runs/2147483648",
                                 "/dashboard/pr/o/r/99999999999999999999"])
def test_an_integer_past_the_database_s_range_is_not_found(client, url):
    """No route matches an id wider than the integer columns (it was a 500 from the database)."""
    assert client.get(url).status_code == 404
    assert client.post(url + "/retry").status_code in (404, 405)


def test_closed_pull_requests_are_not_open_ones(client, seeded_sqlite):
    pulls = seeded_sqlite.store.t["pull_requests"]
    with seeded_sqlite.engine.connect() as conn:
        closed = {(r.repo, r.pr) for r in conn.execute(select(pulls.c.repo, pulls.c.pr).where(pulls.c.state == "closed"))}
    listed = client.get("/api/overview?days=90").get_json()["open_prs_with_new_failures"]
    assert closed and listed
    assert not closed & {(p["repo"], p["pr"]) for p in listed}
    assert all(p["counts"]["new"] > 0 for p in listed)


def test_environments_being_built_and_their_cost(client, redis_url):
    import redis as redis_module

    from bot.queues import ENVIRONMENTS_KEY
    from tasks.warm import record

    redis_client = redis_module.Redis.from_url(redis_url)
    redis_client.delete(ENVIRONMENTS_KEY)
    record(redis_client, {"repo": "pytorch/executorch", "branch": "main", "sha": "53a39f600c" + "0" * 30,
                          "state": "ready", "started": 1.0, "seconds": 611.4, "compiled": "built",
                          "disk_bytes": 48 << 20, "reason": ""})
    record(redis_client, {"repo": "pytorch/executorch", "branch": "release/1.4", "sha": "e4d02f41f7" + "0" * 30,
                          "state": "building", "started": 2.0, "seconds": None, "compiled": "", "disk_bytes": None,
                          "reason": ""})
    html = client.get("/dashboard/devices").get_data(as_text=True)
    rows = re.findall(r"<tr><td>pytorch/executorch</td>.*?</tr>", html, re.S)
    assert len(rows) == 2 and "e4d02f41f700" in rows[0] and "building" in rows[0]  # newest first
    assert "53a39f600c00" in rows[1] and "611 s" in rows[1] and "48.0 MiB" in rows[1] and "built" in rows[1]
    api = client.get("/api/devices").get_json()
    assert [e["state"] for e in api["environments"]] == ["building", "ready"]
    redis_client.delete(ENVIRONMENTS_KEY)
