"""The dashboard's pages on a seeded database: what each shows, filters, pagination, escaping,
errors as pages, and no script anywhere (usable without JavaScript)."""
from __future__ import annotations

import re
from html import unescape

import pytest
from sqlalchemy import func, select

from etriage.seed import HOSTILE_TITLE, PRIVATE, PUBLIC

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


def test_overview_shows_trunk_first_then_prs_health_and_clusters(client, seeded_sqlite):
    html = client.get("/dashboard/").get_data(as_text=True)
    assert html.index('class="trunk-status') < html.index('class="grid"') < html.index("Open pull requests")
    charts = re.findall(r"<svg class=\"chart\".*?</svg>", html, re.S)
    assert len(charts) == 1  # one chart of 30 days (a 7-day one only repeated its end)
    [chart] = charts
    assert "<title>Pass rate per backend / target, last 30 days" in chart
    ticks = [float(t) for t in re.findall(r'class="tick y-tick">([\d.]+)%</text>', chart)]
    assert len(ticks) >= 3 and ticks == sorted(ticks) and ticks[-1] <= 100  # a y axis with labels
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
    html = client.get("/dashboard/clusters?category=qnn_op_validation&days=90").get_data(as_text=True)
    rows = re.findall(r"<tr><td><a class=\"cluster\".*?</tr>", html, re.S)
    assert rows and all("<td>qnn_op_validation</td>" in row for row in rows)
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
    marked = re.search(r'<mark class="primary" id="failure">(.*?)</mark>', html, re.S)
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


@pytest.mark.parametrize("query, name, valid", [
    ("backend=qnn", "backend", "portable, qualcomm, xnnpack"),
    ("target=qnn-sim", "target", "android-sm8650, android-sm8750, host, qnn-htp-sim"),
    ("category=qnn", "category", "multi_method_lowering, mutable_buffer, qnn_sdk_or_toolchain"),
    ("repo=pytorch/pytorch", "repo", PUBLIC)])
@pytest.mark.parametrize("page", ["/dashboard/", "/dashboard/prs", "/dashboard/clusters", "/dashboard/flaky"])
def test_an_unknown_filter_value_is_a_400_naming_the_valid_ones(client, page, query, name, valid):
    answer = client.get(f"{page}?{query}")
    assert answer.status_code == 400
    message = text_of(answer.get_data(as_text=True))
    assert f"is not a known {name}; choose one of: {valid}" in message
    api = client.get(f"/api/{page.split('/')[2] or 'overview'}?{query}")
    assert api.status_code == 400 and api.get_json()["argument"] == name
    assert ", ".join(api.get_json()["valid"]).startswith(valid)


def test_a_private_repository_is_no_known_choice_for_a_stranger(client):
    """A stranger naming the private repository gets what an unknown one gets: its name is in
    no list of valid values, and no page shows it."""
    answer = client.get(f"/api/prs?repo={PRIVATE}")
    assert answer.status_code == 400 and answer.get_json()["valid"] == [PUBLIC]
    html = client.get("/dashboard/prs").get_data(as_text=True)
    assert f'<option value="{PUBLIC}"' in html and PRIVATE not in html


def test_filters_are_choices_of_the_known_values(client):
    html = client.get("/dashboard/").get_data(as_text=True)
    assert 'name="backend"><option value="">any</option><option value="portable" >portable</option>' in html
    assert re.search(r'<select name="target">.*<option value="qnn-htp-sim" >', html, re.S)
    assert '<input name="' not in html  # nothing free-text
    assert 'value="qualcomm" selected' in client.get("/dashboard/?backend=qualcomm").get_data(as_text=True)


@pytest.mark.parametrize("repo, value, url", [
    ("pytorch/executorch", ("pr", 9001), "https://github.com/pytorch/executorch/pull/9001"),
    ("pytorch/executorch", ("commit", "A" * 40), "https://github.com/pytorch/executorch/commit/" + "a" * 40),
    ("pytorch/executorch", ("checks", "ab" * 20), "https://github.com/pytorch/executorch/commit/" + "ab" * 20 + "/checks"),
    ("pytorch/executorch", ("check_run", 1900000001), "https://github.com/pytorch/executorch/runs/1900000001"),
    ("pytorch/executorch", ("commit", "javascript:alert(1)"), ""), ("javascript:alert(1)//x", ("pr", 1), ""),
    ("../../evil/x", ("pr", 1), ""), ("o/r\"><script>", ("pr", 1), ""), ("o/r", ("pr", 0), ""),
    ("o/r", ("pr", "1"), ""), ("o/r", ("check_run", True), ""), ("o/r", ("commit", None), ""),
    ("o/r", ("commit", "abc"), "")])
def test_github_links_come_only_from_well_formed_names_and_ids(repo, value, url):
    from bot.dashboard.links import GitHubLinks

    kind, arg = value
    assert getattr(GitHubLinks(), kind)(repo, arg) == url


def test_pages_link_to_github_and_to_each_other(client):
    prs = client.get("/api/prs?days=90").get_json()["items"]
    pr = prs[0]
    html = client.get(f"/dashboard/pr/{pr['repo']}/{pr['pr']}").get_data(as_text=True)
    assert f'href="https://github.com/{pr["repo"]}/pull/{pr["pr"]}"' in html
    assert f'href="https://github.com/{pr["repo"]}/commit/{pr["head_sha"]}"' in html
    assert re.search(rf'href="https://github.com/{pr["repo"]}/runs/\d+">check run</a>', html)
    run = client.get(f"/dashboard/runs/{pr['latest_run']}").get_data(as_text=True)
    assert f'href="https://github.com/{pr["repo"]}/commit/{pr["head_sha"]}"' in run
    assert f'href="https://github.com/{pr["repo"]}/pull/{pr["pr"]}"' in run
    flaky = client.get("/dashboard/flaky?days=90").get_data(as_text=True)
    tests = re.findall(r'<td class="test"><a class="test" href="(/dashboard/tests/[^"]+)"', flaky)
    assert tests and client.get(unescape(tests[0])).status_code == 200
    cluster_id = client.get("/api/clusters?days=90").get_json()["items"][0]["id"]
    cluster = client.get(f"/dashboard/clusters/{cluster_id}").get_data(as_text=True)
    assert re.search(r'<a class="run" href="/dashboard/runs/\d+\?failure=\d+#failure">', cluster)
    assert 'class="test" href="/dashboard/tests/' in cluster


def test_the_run_page_anchors_every_line_and_highlights_the_failure_it_is_opened_for(client, seeded_sqlite):
    f = seeded_sqlite.t["failure_events"]
    with seeded_sqlite.engine.connect() as conn:  # a run with several failures: open it for the last
        run_id = conn.execute(select(f.c.run_id).where(f.c.repo == PUBLIC).group_by(f.c.run_id)
                              .having(func.count() >= 3).limit(1)).scalar_one()
        failures = conn.execute(select(f.c.id, f.c.primary_line).where(f.c.run_id == run_id).order_by(f.c.id)).all()
    data = client.get(f"/api/runs/{run_id}").get_json()
    lines = data["log"]["lines"]
    last = failures[-1]
    html = client.get(f"/dashboard/runs/{run_id}?failure={last.id}").get_data(as_text=True)
    assert len(re.findall(r'<span class="line" id="L(\d+)"><a class="ln" href="#L\1">\1</a>', html)) == len(lines)
    marked = re.search(r'<span class="line" id="L(\d+)"><a class="ln" href="#L\d+">\d+</a><mark class="primary" '
                       r'id="failure">(.*?)</mark>', html, re.S)
    assert marked and unescape(marked.group(2)) == last.primary_line
    assert lines[int(marked.group(1)) - 1] == last.primary_line
    at = {x["id"]: x["log_line"] for x in data["failures"]}
    assert at[last.id] == int(marked.group(1)) - 1 and all(line is not None for line in at.values())
    assert len(re.findall(r'<mark class="fail">', html)) == len(set(at.values())) - 1  # the others marked
    assert client.get(f"/dashboard/runs/{run_id}?failure=999999999").status_code == 404


def test_the_test_page_and_its_errors(client):
    flaky = client.get("/api/flaky?days=90").get_json()["items"][0]
    html = client.get(f"/dashboard/tests/{flaky['test']}").get_data(as_text=True)
    assert "History per target" in html and "Clusters its failures fell into" in html
    assert f"<td>{flaky['target']}</td>" in html
    assert client.get("/dashboard/tests/no/such/test.py::test_nothing").status_code == 404
    assert client.get(f"/dashboard/tests/{flaky['test']}?target=nope").status_code == 400
