"""The dashboard in a real headless Chromium (Debian's /usr/bin/chromium, never a download), one
browser for the module and a fresh context per test: the first screen at 1280x800 answers "is
trunk red, since which commit, which test, on which target"; grid cells link to the failure
they show; the per-test page; a filter's unknown value is a 400; the chart's axis fits its data;
every log line is an anchor; a hostile PR title is text. Screenshots go to the test's tmp_path."""
from __future__ import annotations

import shutil

import pytest
from sqlalchemy import select

from etriage.seed import HOSTILE_TITLE, PUBLIC

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
playwright = pytest.importorskip("playwright.sync_api")
FOLD = {"width": 1280, "height": 800}


@pytest.fixture(scope="module")
def browser():
    if not shutil.which(CHROMIUM):
        pytest.skip(f"no chromium at {CHROMIUM} (scripts/system-deps.sh installs it)")
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def _tab(browser, javascript: bool):
    context = browser.new_context(viewport=FOLD, java_script_enabled=javascript)
    tab = context.new_page()
    tab.dialogs = []  # an injected alert() would land here
    tab.on("dialog", lambda dialog: (tab.dialogs.append(dialog.message), dialog.dismiss()))
    return context, tab


@pytest.fixture
def page(browser):
    """JavaScript on: a script smuggled into a page would run (and be caught)."""
    context, tab = _tab(browser, True)
    yield tab
    context.close()


@pytest.fixture
def page_without_js(browser):
    context, tab = _tab(browser, False)
    yield tab
    context.close()


def shot(page, tmp_path, name, full_page=True):
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    assert path.stat().st_size > 10_000


def above_the_fold(locator) -> bool:
    box = locator.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= FOLD["height"]


def test_the_first_screen_says_whether_trunk_is_red_since_which_commit_which_test_which_target(
        page, live_server, tmp_path):
    trunk = page.request.get(f"{live_server}/api/trunk").json()
    assert trunk["red"] and trunk["failing"], "the seed leaves trunk red now"
    page.goto(f"{live_server}/dashboard/")
    status, grid = page.locator(".trunk-status"), page.locator("table.grid")
    assert above_the_fold(status) and above_the_fold(grid)
    headline = page.locator(".trunk-status h1").inner_text()
    assert headline.startswith(f"Trunk of {PUBLIC} is red since {trunk['since']['sha'][:7]}")
    since = page.locator(".trunk-status h1 a.gh-commit")
    assert since.get_attribute("href") == f"https://github.com/{PUBLIC}/commit/{trunk['since']['sha']}"
    rows = page.locator(".trunk-status table.failing tbody tr")
    for n, failing in enumerate(trunk["failing"][:6]):
        row = rows.nth(n)
        assert above_the_fold(row)
        assert row.locator("a.test").get_attribute("title") == failing["test"]
        assert row.locator("td").nth(1).inner_text() == failing["target"]
        assert failing["since_sha"][:7] in row.locator("td").nth(2).inner_text()
    assert grid.locator("tbody tr").count() == len(trunk["commits"])
    first = grid.locator("tbody tr").first.locator("th a.gh-commit")
    assert first.get_attribute("href") == f"https://github.com/{PUBLIC}/commit/{trunk['commits'][0]['sha']}"
    shot(page, tmp_path, "first-screen", full_page=False)
    assert page.dialogs == []


def test_grid_cells_link_to_what_they_show(page, live_server):
    trunk = page.request.get(f"{live_server}/api/trunk").json()
    page.goto(f"{live_server}/dashboard/")
    row_sha = trunk["commits"][0]["sha"]  # the newest commit is red (the seed's open break)
    assert page.locator("table.grid tbody tr").first.locator("td.s-red").count() >= 1
    page.locator("table.grid tbody tr").first.locator("td.s-red a").first.click()
    assert "/dashboard/runs/" in page.url and "failure=" in page.url and page.url.endswith("#failure")
    assert row_sha in page.locator("dl.facts dd").first.inner_text()
    focused = page.locator("mark#failure")
    assert focused.is_visible() and focused.inner_text().strip()
    assert page.locator("ul.failures li.focus").count() == 1
    # the same line in both places: the log keeps its spaces (`]:  <E>`), inline code folds them
    words = lambda text: " ".join(text.split())  # noqa: E731
    assert words(focused.inner_text()) in words(page.locator("ul.failures li.focus code").inner_text())

    page.goto(f"{live_server}/dashboard/")
    green = page.locator("table.grid td.s-green a").first
    href = green.get_attribute("href")
    assert href.endswith("#results")
    green.click()
    assert page.url.endswith("#results") and page.locator("h2#results").is_visible()


def test_a_page_per_test_across_trunk_prs_and_socs(page, live_server, tmp_path):
    trunk = page.request.get(f"{live_server}/api/trunk").json()
    failing = trunk["failing"][0]
    page.goto(f"{live_server}/dashboard/")
    page.locator(".trunk-status table.failing a.test").first.click()
    assert "/dashboard/tests/" in page.url
    assert page.locator("h1 code.test-id").inner_text() == failing["test"]
    row = page.locator("table.test-history tbody tr", has_text=failing["target"])
    assert "now failed" in row.inner_text()
    assert row.locator("td").nth(1).inner_text().startswith("SM")  # the target's SoC
    assert row.locator("td").nth(3).locator("a.o-failed.trunk").count() >= failing["commits_red"]
    assert page.locator("table.test-clusters a.cluster").count() >= 1
    shot(page, tmp_path, "test")
    row.locator("td").nth(3).locator("a.o-failed").last.click()  # the newest failure on trunk
    assert "failure=" in page.url and page.locator("mark#failure").is_visible()
    page.go_back()
    page.locator("table.test-clusters a.cluster").first.click()
    assert "/dashboard/clusters/" in page.url


def test_filters_are_choices_and_an_unknown_value_is_a_400_naming_the_valid_ones(page_without_js, live_server):
    page = page_without_js
    page.goto(f"{live_server}/dashboard/prs")
    backends = page.locator("select[name=backend] option").all_inner_texts()
    assert backends == ["any", "portable", "qualcomm", "xnnpack"]
    page.select_option("select[name=backend]", "qualcomm")
    page.click("form.filters button")
    assert "backend=qualcomm" in page.url and page.locator("table.prs tbody a.pr").count() >= 1
    answer = page.goto(f"{live_server}/dashboard/prs?backend=qnn")
    assert answer.status == 400
    assert page.locator("h1").inner_text() == "400 Bad Request"
    assert "'qnn' is not a known backend; choose one of: portable, qualcomm, xnnpack" in page.locator("main p").inner_text()


def test_the_chart_s_axis_is_fitted_to_its_data(page, live_server):
    health = page.request.get(f"{live_server}/api/overview").json()["health"]
    rates = [d["pass_rate"] for h in health for d in h["daily"] if d["pass_rate"] is not None]
    page.goto(f"{live_server}/dashboard/")
    chart = page.locator("svg.chart").first
    plot = chart.locator("rect.plot").bounding_box()
    lines = [chart.locator("polyline").nth(i).bounding_box() for i in range(chart.locator("polyline").count())]
    assert lines
    top = min(b["y"] for b in lines)
    bottom = max(b["y"] + b["height"] for b in lines)
    assert plot["y"] - 5 <= top and bottom <= plot["y"] + plot["height"] + 5  # inside the plot (a stroke's width)
    assert (bottom - top) / plot["height"] > 0.6, "the lines should spread over the plot"
    ticks = [float(t.rstrip("%")) for t in chart.locator("text.y-tick").all_text_contents()]
    assert ticks[0] <= min(rates) and max(rates) <= ticks[-1] <= 100
    assert ticks[0] > 0 or min(rates) < 25  # not a 0 to 100 axis when the data sits high


def test_every_log_line_is_an_anchor(page, live_server):
    trunk = page.request.get(f"{live_server}/api/trunk").json()
    run = page.request.get(f"{live_server}/api/runs/{trunk['latest']['run_id']}").json()
    count = len(run["log"]["lines"])
    page.goto(f"{live_server}/dashboard/runs/{trunk['latest']['run_id']}#L2")
    assert page.locator(".log .line").count() == count
    assert page.locator(f".log #L{count} a.ln").get_attribute("href") == f"#L{count}"
    assert page.locator("#L2").evaluate("e => e.matches(':target')")


def test_overview_to_cluster_to_pr_to_run(page, live_server, tmp_path):
    page.goto(f"{live_server}/dashboard/")
    busiest = page.locator("table.busiest a.cluster").first
    title = busiest.inner_text()
    busiest.click()
    assert page.url.startswith(f"{live_server}/dashboard/clusters/c")
    assert page.locator("p.title").inner_text().strip() == title.strip()
    assert page.locator("table.occurrences tbody tr").count() >= 1
    shot(page, tmp_path, "cluster")
    page.locator("ul.prs a.pr").first.click()
    assert "/dashboard/pr/" in page.url
    heading = page.locator("h1 .repo").inner_text()
    repo, number = heading.split("#")
    assert number in page.url
    assert page.locator("a.gh-pr").first.get_attribute("href") == f"https://github.com/{repo}/pull/{number}"
    assert page.locator("table.pushes a.gh-check").count() >= 1  # the check run on GitHub
    page.locator("table.pushes a.run").first.click()
    assert "/dashboard/runs/" in page.url
    assert page.locator("h1").inner_text().startswith("Run ")
    assert page.get_by_role("heading", name="Results").is_visible()
    shot(page, tmp_path, "run")
    assert page.dialogs == []


def test_a_hostile_pr_title_is_shown_as_text(page, live_server, seeded_sqlite, tmp_path):
    runs = seeded_sqlite.t["triage_runs"]
    with seeded_sqlite.engine.connect() as conn:
        repo, pr = conn.execute(select(runs.c.repo, runs.c.pr).where(runs.c.title == HOSTILE_TITLE)).first()
    page.goto(f"{live_server}/dashboard/pr/{repo}/{pr}")
    assert page.locator("h1 .title").inner_text() == HOSTILE_TITLE
    assert page.locator("h1 b").count() == 0 and page.locator("script").count() == 0
    assert page.dialogs == []


def test_pagination_works_without_javascript(page_without_js, live_server):
    page = page_without_js
    page.goto(f"{live_server}/dashboard/clusters")
    page.select_option("select[name=category]", "qnn_op_validation")
    page.select_option("select[name=days]", "90")
    page.click("form.filters button")
    assert "category=qnn_op_validation" in page.url and "days=90" in page.url
    categories = page.locator("table.clusters tbody tr td:nth-child(2)").all_inner_texts()
    assert categories and set(categories) == {"qnn_op_validation"}
    page.goto(f"{live_server}/dashboard/prs")
    page.locator("a[rel=next]").click()
    assert "page=2" in page.url and page.locator("a[rel=prev]").is_visible()
