"""The dashboard in a real headless Chromium (Debian's /usr/bin/chromium, never a download):
overview -> cluster -> PR -> run by clicking, what each shows, a hostile PR title as text.
Screenshots go to the test's tmp_path."""
from __future__ import annotations

import shutil

import pytest
from sqlalchemy import select

from etriage.seed import HOSTILE_TITLE

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
playwright = pytest.importorskip("playwright.sync_api")


def _browser_page(javascript: bool):
    if not shutil.which(CHROMIUM):
        pytest.skip(f"no chromium at {CHROMIUM} (scripts/system-deps.sh installs it)")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1280, "height": 900}, java_script_enabled=javascript)
        tab = context.new_page()
        tab.dialogs = []  # an injected alert() would land here
        tab.on("dialog", lambda dialog: (tab.dialogs.append(dialog.message), dialog.dismiss()))
        yield tab
        browser.close()


@pytest.fixture
def page():
    """JavaScript on: a script smuggled into a page would run (and be caught)."""
    yield from _browser_page(True)


@pytest.fixture
def page_without_js():
    yield from _browser_page(False)


def shot(page, tmp_path, name):
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000


def test_overview_to_cluster_to_pr_to_run(page, live_server, tmp_path):
    page.goto(f"{live_server}/dashboard/")
    assert page.locator("h1").first.inner_text() == "Overview"
    assert page.locator("svg.chart").count() == 2
    assert page.locator("svg.chart").first.locator("text.legend").count() >= 3
    shot(page, tmp_path, "overview")

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
    assert "#" in heading and heading.split("#")[1] in page.url
    assert page.locator("table.pushes tbody tr").count() >= 1
    shot(page, tmp_path, "pr")

    page.locator("table.pushes a.run").first.click()
    assert "/dashboard/runs/" in page.url
    assert page.locator("h1").inner_text().startswith("Run ")
    assert page.get_by_role("heading", name="Results").is_visible()
    if page.locator("mark.primary").count():  # the primary line is shown, the rest collapsed
        assert page.locator("mark.primary").is_visible()
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
    shot(page, tmp_path, "hostile")


def test_filters_and_pagination_work_without_javascript(page_without_js, live_server):
    page = page_without_js
    page.goto(f"{live_server}/dashboard/clusters")
    page.fill("input[name=category]", "lint")
    page.select_option("select[name=days]", "90")
    page.click("form.filters button")
    assert "category=lint" in page.url and "days=90" in page.url
    categories = page.locator("table.clusters tbody tr td:nth-child(2)").all_inner_texts()
    assert categories and set(categories) == {"lint"}
    page.goto(f"{live_server}/dashboard/prs")
    page.locator("a[rel=next]").click()
    assert "page=2" in page.url and page.locator("a[rel=prev]").is_visible()
