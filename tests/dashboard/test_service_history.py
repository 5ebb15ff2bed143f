"""A real triage through the worker lands in the dashboard: signed webhook -> Flask -> Redis ->
a real Celery worker process -> the pipeline -> bot.history.record_run -> the PR's page."""
from __future__ import annotations

import pytest

from bot.app import create_app
from bot.dashboard import DashboardConfig
from bot.history import History
from tests.service.conftest import (PR, REPO, checkout, clean_redis, double, payloads,  # noqa: F401
                                    service_env, web, workers)

pytestmark = pytest.mark.service


def test_a_triaged_pull_request_has_its_dashboard_page(web, workers, payloads):  # noqa: F811
    workers()
    answer = web.post("pull_request", payloads.pull_request("opened", web.head, web.base))
    assert answer.status_code == 202, answer.text
    web.double.wait_for(lambda: [r for r in web.double.check_runs_for(REPO, web.head)
                                 if r["status"] == "completed"], 90, "the check run")
    store = web.store()
    history = History(store)
    try:
        [run] = web.double.wait_for(lambda: [r for r in [history.run(1)] if r and r["status"] == "completed"],
                                    30, "the run in the history")
        assert (run["repo"], run["pr"], run["head_sha"]) == (REPO, PR, web.head)
        assert run["trigger"] and run["stage_seconds"]["total"] >= 0
        app = create_app(web.settings, redis_client=web.redis,
                         dashboard_config=DashboardConfig(database_url=web.env["DATABASE_URL"]))
        page = app.test_client().get(f"/dashboard/pr/{REPO}/{PR}")
        assert page.status_code == 200
        html = page.get_data(as_text=True)
        assert web.head[:12] in html and "Every push" in html
        api = app.test_client().get(f"/api/prs/{REPO}/{PR}").get_json()
        assert api["pushes"][0]["head_sha"] == web.head and api["pushes"][0]["status"] == "completed"
        assert "documentation-only change" in api["comment"]  # the section the PR comment carries
    finally:
        store.close()
