"""A real triage through the worker lands in the dashboard: signed webhook -> Flask -> Redis ->
a real Celery worker process -> the pipeline -> bot.history.record_run -> the PR's page."""
from __future__ import annotations

import pytest

from bot.app import create_app
from bot.dashboard import DashboardConfig
from bot.history import History
from tests.service.conftest import (PR, REPO, checkout, clean_redis, double, hosting, payloads,  # noqa: F401
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


def test_ci_logs_land_in_the_history_and_trunk_ci_feeds_the_clusters(web, workers, payloads):  # noqa: F811
    """A failed CI job of a PR is a `ci` run of that PR; a failed CI job on the branch the PRs
    target (no PR of its own) is a trunk run, so the same failure on a PR joins a cluster seen
    on trunk."""
    from sqlalchemy import select

    from bot.history import TRUNK
    from tests.service.github_double import ci_log

    workers()
    log = ci_log("pytest_failure.txt")
    web.double.add_workflow_run(REPO, 201, web.head, [
        {"id": 61, "name": "unittest / linux", "conclusion": "failure", "log": log}])
    assert web.post("workflow_run", payloads.workflow_run(201, web.head)).status_code == 202
    store = web.store()
    history = History(store)
    runs = history.t["triage_runs"]

    def ci_runs(pr):
        with history.engine.connect() as conn:
            return [dict(r) for r in conn.execute(select(runs).where(
                runs.c.kind == "ci", runs.c.pr == pr, runs.c.status == "completed")).mappings()]

    try:
        [pr_run] = web.double.wait_for(lambda: ci_runs(PR), 60, "the PR's CI run in the history")
        assert pr_run["head_sha"] == web.head and pr_run["counts"]["new"] >= 1
        [base_ref] = store.base_refs(REPO)  # recorded from the PR when its CI was triaged
        web.double.add_workflow_run(REPO, 202, "f" * 40, [
            {"id": 62, "name": "unittest / linux", "conclusion": "failure", "log": log, "head_branch": base_ref}])
        assert web.post("workflow_run", payloads.workflow_run(202, "f" * 40)).status_code == 202
        [trunk_run] = web.double.wait_for(lambda: ci_runs(TRUNK), 60, "the trunk CI run in the history")
        assert trunk_run["head_sha"] == "f" * 40
        failures = history.t["failure_events"]
        with history.engine.connect() as conn:
            rows = conn.execute(select(failures.c.pr, failures.c.cluster_id, failures.c.primary_line)).all()
        on = {pr: {r.cluster_id for r in rows if r.pr == pr} for pr in (PR, TRUNK)}
        assert on[PR] and on[PR] == on[TRUNK]  # the same failures: the same clusters, seen on trunk
        assert {history.trunk_cluster(r.primary_line)["id"] for r in rows if r.pr == PR} == on[PR]
    finally:
        store.close()
