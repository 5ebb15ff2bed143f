"""The beat tasks through a real Celery worker: `publish_pending` posts what GitHub refused
earlier exactly once, `expire_runs` marks runs stuck in progress. The reports left behind are
made by the real `publish` against the GitHub double refusing the write."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from bot.github_client import GitHubError
from tasks import service
from tasks.celery_app import WorkerOptions, get_app
from tasks.summary import PublishPayload
from tests.service.conftest import INSTALLATION, PR, REPO

pytestmark = pytest.mark.service


def beat(task: str):
    """Run one beat task on the worker (as celery beat would send it); its return value."""
    return get_app().send_task(f"etriage.{task}", queue="triage").get(timeout=60)


def left_pending(web, head_sha: str) -> PublishPayload:
    """A finished run whose report GitHub refused: it stays in pending_reports."""
    ctx = service.WorkerContext.create(web.settings, WorkerOptions.from_env(web.env))
    payload = PublishPayload(kind="pr", head_sha=head_sha,
                             section="### Rebuild and tests\nall good",
                             check_conclusion="success", check_title="0 new failure(s)",
                             check_summary="No new failures.")
    web.double.fail("POST", r"/issues/2/comments$", 403,
                    message="Resource not accessible by integration")
    try:
        with pytest.raises(GitHubError):
            service.publish(ctx, REPO, PR, INSTALLATION, payload)
    finally:
        ctx.store.close()
        ctx.redis.close()
    return payload


def bot_comments(double):
    return [c for c in double.comments_on(REPO, PR) if c["user"] == double.bot_login]


def test_publish_pending_posts_a_refused_report_once(web, workers):
    left_pending(web, web.head)
    store = web.store()
    [row] = store.pending_reports()
    assert row["head_sha"] == web.head and row["attempts"] == 1
    assert bot_comments(web.double) == []
    workers()
    assert beat("publish_pending") == 1
    [comment] = bot_comments(web.double)
    assert "all good" in comment["body"] and web.head[:12] in comment["body"]
    [check] = web.double.check_runs_for(REPO, web.head)
    assert check["conclusion"] == "success" and check["output"]["title"] == "0 new failure(s)"
    assert store.pending_reports() == []
    writes = len([r for r in web.double.requests if r.method != "GET"])
    assert beat("publish_pending") == 0  # nothing left: no second comment, no write at all
    assert len([r for r in web.double.requests if r.method != "GET"]) == writes
    assert len(bot_comments(web.double)) == 1


def test_publish_pending_keeps_what_github_still_refuses(web, workers):
    left_pending(web, web.head)
    workers()
    web.double.fail("POST", r"/issues/2/comments$", 403, message="still not allowed")
    assert beat("publish_pending") == 0
    [row] = web.store().pending_reports()
    assert row["attempts"] == 2 and "still not allowed" in row["last_error"]  # one per failed try
    assert bot_comments(web.double) == []


def test_publish_pending_drops_a_report_a_newer_push_made_stale(web, workers):
    left_pending(web, web.head)
    web.redis.set(service.head_key(REPO, PR), "f" * 40)  # the webhook saw a newer push
    workers()
    assert beat("publish_pending") == 0
    assert web.store().pending_reports() == []
    assert bot_comments(web.double) == [] and web.double.check_runs_for(REPO) == []


def test_expire_runs_marks_runs_stuck_in_progress(web, workers):
    store = web.store()
    stuck = store.start_run(REPO, PR, "a" * 40, "pr")
    recent = store.start_run(REPO, PR, "b" * 40, "pr")
    finished = store.start_run(REPO, PR, "c" * 40, "pr")
    store.update_run(finished, status="completed", conclusion="success")
    long_ago = datetime.now(timezone.utc) - timedelta(hours=7)
    runs = store.t["runs"]
    with store.engine.begin() as conn:  # older than ETRIAGE_RUN_EXPIRY_HOURS (6)
        conn.execute(runs.update().where(runs.c.id.in_([stuck, finished]))
                     .values(updated_at=long_ago))
    workers()
    assert beat("expire_runs") == 1
    assert {r["id"]: r["status"] for r in store.runs_for(REPO, PR)} == {
        stuck: "expired", recent: "in_progress", finished: "completed"}
    assert beat("expire_runs") == 0
