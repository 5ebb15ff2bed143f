"""Signed webhooks over real HTTP -> the Flask app -> Redis -> a real Celery worker process ->
the GitHub double. Every assertion is about what GitHub (the double) received."""
from __future__ import annotations

import subprocess
import time

import pytest

from tests.service.conftest import PR, REPO
from tests.service.github_double import ci_log, marked_line

pytestmark = pytest.mark.service

MARKER = "<!-- etriage:summary -->"


def completed_runs(double, sha):
    return [r for r in double.check_runs_for(REPO, sha) if r["status"] == "completed"]


def bot_comments(double):
    return [c for c in double.comments_on(REPO, PR) if c["user"] == double.bot_login]


def summaries(double):
    """The bot's one living comment (its replies to commands are other comments)."""
    return [c for c in bot_comments(double) if "etriage:summary" in c["body"]]


def test_pull_request_gets_one_comment_and_one_check_run(web, workers, payloads):
    workers()
    answer = web.post("pull_request", payloads.pull_request("opened", web.head, web.base))
    assert answer.status_code == 202, answer.text
    [run] = web.double.wait_for(lambda: completed_runs(web.double, web.head), 90, "check run")
    [comment] = web.double.wait_for(lambda: bot_comments(web.double), 30, "comment")
    assert MARKER in comment["body"] and web.head[:12] in comment["body"]
    assert "documentation-only change" in comment["body"]  # the pipeline's plan ran on the clone
    assert comment["body"].count("## etriage") == 1  # one headline, the run's report below it
    assert "## etriage: ✅ No new failures caused by this change\n" in comment["body"]
    assert "### Rebuild and tests" in comment["body"]
    assert run["name"] == "etriage" and run["conclusion"] == "success"
    # queued -> in_progress (with a progress summary) -> completed, on the same check run
    [create] = web.double.requests_to("POST", r"/check-runs$")
    assert create.body["status"] == "queued" and create.body["head_sha"] == web.head
    patches = [r.body for r in web.double.requests_to("PATCH", r"/check-runs/\d+$")]
    assert patches[0]["status"] == "in_progress" and patches[0]["output"]["summary"]
    assert patches[-1]["conclusion"] == "success"
    assert all("Authorization" not in r.headers for r in web.double.requests)


def test_redelivery_changes_nothing(web, workers, payloads):
    workers()
    payload = payloads.pull_request("opened", web.head, web.base)
    assert web.post("pull_request", payload, delivery="d-1").status_code == 202
    web.double.wait_for(lambda: completed_runs(web.double, web.head), 90, "check run")
    store = web.store()
    web.double.wait_for(lambda: not store.pending_reports(), 30, "the publish to finish")
    seen = len(web.double.requests)
    again = web.post("pull_request", payload, delivery="d-1")
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    # A new delivery of the same head (e.g. `reopened`) finds the finished run: no new writes.
    assert web.post("pull_request", payloads.pull_request("reopened", web.head, web.base)).status_code == 202
    web.double.wait_for(lambda: len(web.double.requests_to("GET", r"/pulls/2$")) >= 3, 30, "task")
    time.sleep(1)  # nothing to wait on: proving that no write comes needs a quiet interval
    writes = [r for r in web.double.requests[seen:] if r.method != "GET"]
    assert writes == []
    assert len(bot_comments(web.double)) == 1 and len(web.double.check_runs_for(REPO)) == 1


def test_newer_push_supersedes_the_older_run(web, workers, payloads, checkout):
    workers()
    first, base = web.head, web.base
    hold = web.double.hold("POST", r"/check-runs$")  # freeze the first run mid-task
    web.post("pull_request", payloads.pull_request("opened", first, base))
    assert hold.reached.wait(60)
    second = _commit(web.checkout, "docs/usage.md", "second push\n")
    web.double.push(REPO, PR, second)
    web.post("pull_request", payloads.pull_request("synchronize", second, base))
    web.double.wait_for(lambda: completed_runs(web.double, second), 90, "second check run")
    hold.release()
    [old] = web.double.wait_for(lambda: completed_runs(web.double, first), 60, "first cancelled")
    assert old["conclusion"] == "cancelled" and second[:12] in old["output"]["summary"]
    [comment] = bot_comments(web.double)
    assert second[:12] in comment["body"] and first[:12] not in comment["body"]


def test_worker_killed_mid_task_redelivers_without_duplicates(web, workers, payloads):
    worker = workers(ETRIAGE_VISIBILITY_TIMEOUT="2")
    hold = web.double.hold("GET", r"/pulls/2$")
    web.post("pull_request", payloads.pull_request("opened", web.head, web.base))
    assert hold.reached.wait(60)
    worker.kill()  # SIGKILL to the whole worker: main process and pool
    hold.release()
    _wait_until_unacked_expired(web.redis, visibility_timeout=2)
    workers(ETRIAGE_VISIBILITY_TIMEOUT="2")
    web.double.wait_for(lambda: completed_runs(web.double, web.head), 90, "redelivered run")
    assert len(bot_comments(web.double)) == 1
    assert len(web.double.check_runs_for(REPO, web.head)) == 1


@pytest.mark.parametrize("fault", ["502", "rate_limit_403", "secondary_429"])
def test_github_faults_still_end_with_one_comment(web, workers, payloads, fault):
    if fault == "502":
        web.double.fail("POST", r"/issues/2/comments$", 502, times=2)
    elif fault == "rate_limit_403":
        web.double.fail_rate_limited("POST", r"/issues/2/comments$", reset_in=1)
    else:
        web.double.fail_secondary("PATCH", r"/check-runs/\d+$", retry_after=1)
    workers()
    web.post("pull_request", payloads.pull_request("opened", web.head, web.base))
    web.double.wait_for(lambda: completed_runs(web.double, web.head), 90, "check run")
    assert len(bot_comments(web.double)) == 1
    statuses = [r.status for r in web.double.requests if r.method in ("POST", "PATCH")]
    assert {502, 403, 429} & set(statuses)  # the fault really happened


def test_failed_workflow_run_is_classified_into_the_comment(web, workers, payloads):
    workers()
    log = ci_log("pytest_failure.txt")
    web.double.add_workflow_run(REPO, 101, web.base, [{"id": 11, "name": "unittest / linux",
                                                       "conclusion": "failure", "log": log}])
    web.double.add_workflow_run(REPO, 102, web.head, [
        {"id": 21, "name": "unittest / linux", "conclusion": "failure", "log": log},
        {"id": 22, "name": "lint", "conclusion": "success", "log": "ok\n"}])
    # CI of the base commit (no PR) records its failures; the PR's identical failure is then
    # pre-existing, not blamed on the change.
    assert web.post("workflow_run", payloads.workflow_run(101, web.base)).status_code == 202
    store = web.store()
    web.double.wait_for(lambda: store.failures_for(REPO, web.base), 60, "base failures")
    assert web.post("workflow_run", payloads.workflow_run(102, web.head)).status_code == 202
    [comment] = web.double.wait_for(lambda: bot_comments(web.double), 60, "comment")
    body = comment["body"]
    assert "### CI logs" in body and "`unittest / linux`" in body and "lint" not in body
    assert marked_line("pytest_failure.txt").split("Z ", 1)[1][:60] in body
    assert "`runtime_error`" in body and "pre-existing" in body and "❌" not in body
    assert [r.path for r in web.double.requests_to("GET", r"/_logs/")] == ["/_logs/11", "/_logs/21"]


def test_ci_is_compared_with_the_merge_base_not_the_moved_base_branch(web, workers, payloads):
    """master moved on after the PR branched: its CI at the merge base, not at the PR's newer
    base sha, says what was already broken."""
    workers()
    moved = subprocess.run(["git", "-C", str(web.checkout), "commit-tree", f"{web.base}^{{tree}}", "-p", web.base,
                            "-m", "master moves on"], check=True, capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "HOME": str(web.checkout), "GIT_AUTHOR_NAME": "t",
                                "GIT_COMMITTER_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                                "GIT_COMMITTER_EMAIL": "t@example.com"}).stdout.strip()
    web.double.add_pull(REPO, PR, web.head, moved, files=[("docs/usage.md", "modified")])
    log = ci_log("pytest_failure.txt")
    web.double.add_workflow_run(REPO, 111, web.base, [{"id": 41, "name": "unittest / linux",
                                                       "conclusion": "failure", "log": log}])
    web.double.add_workflow_run(REPO, 112, web.head, [{"id": 42, "name": "unittest / linux",
                                                       "conclusion": "failure", "log": log}])
    assert web.post("workflow_run", payloads.workflow_run(111, web.base)).status_code == 202
    store = web.store()
    web.double.wait_for(lambda: store.failures_for(REPO, web.base), 60, "merge-base failures")
    assert web.post("workflow_run", payloads.workflow_run(112, web.head)).status_code == 202
    [comment] = web.double.wait_for(lambda: bot_comments(web.double), 60, "comment")
    assert f"compared with the merge base `{web.base[:12]}`" in comment["body"]
    assert "pre-existing" in comment["body"] and "**new**" not in comment["body"]


def test_new_ci_failure_is_blamed_and_an_unsure_category_labels_nothing(web, workers, payloads):
    """Two tests past their time limit: new (the merge base's CI had neither), but a hang and a
    slow runner read alike, so the category is stated as unsure and no label is applied (a
    sure category's label: test_ignoring_a_new_ci_failure_... below)."""
    workers()
    web.double.add_workflow_run(REPO, 103, web.head, [
        {"id": 31, "name": "test", "conclusion": "failure", "log": ci_log("pytest_failure.txt")}])
    web.post("workflow_run", payloads.workflow_run(103, web.head))
    web.double.wait_for(lambda: any("**new**" in c["body"] for c in bot_comments(web.double)), 60, "the comment")
    web.double.wait_for(lambda: not web.store().pending_reports(), 30, "the publish")
    [comment] = bot_comments(web.double)
    assert "## etriage: ❌ 2 new failures caused by this change\n" in comment["body"]
    assert "`runtime_error` or `other`, unsure" in comment["body"]
    assert web.double.labels_on(REPO, PR) == []


def test_ignoring_a_new_ci_failure_takes_it_out_of_the_count_and_the_labels(web, workers, payloads):
    """`/etriage ignore` on a CI log's failure, through the worker: the CI section is rendered
    again from its stored report, as the bot's own section is (test_regression_e2e.py)."""
    workers()
    web.double.add_workflow_run(REPO, 104, web.head, [
        {"id": 51, "name": "lint", "conclusion": "failure", "log": ci_log("lint_lintrunner.txt")}])
    web.post("workflow_run", payloads.workflow_run(104, web.head))
    web.double.wait_for(lambda: web.double.labels_on(REPO, PR), 60, "label")
    store = web.store()
    [failure] = [f for f in store.failures_for(REPO, web.head) if f["verdict"] == "new"]
    text = f'/etriage ignore {failure["fingerprint"][:8]} --reason "rule changed upstream"'
    web.double.set_permission(REPO, "maintainer", "write")
    comment_id = web.double.add_user_comment(REPO, PR, "maintainer", text)
    web.post("issue_comment", payloads.issue_comment(comment_id, "maintainer", text))
    web.double.wait_for(lambda: not web.double.labels_on(REPO, PR), 60, "the label to go")
    web.double.wait_for(lambda: not store.pending_reports(), 30, "the publish")
    [comment] = summaries(web.double)
    assert "## etriage: ✅ No new failures caused by this change · 1 ignored\n" in comment["body"]
    [reply] = [c["body"] for c in bot_comments(web.double) if c not in summaries(web.double)]
    assert reply.startswith("Ignored 1 (`lint: benchmarks/distributed/bench_symmetric_memory_all_gather.py`) on this "
                            "pull request: *rule changed upstream*.")
    assert "**ignored** · `lint` · job `lint`" in comment["body"] and "*rule changed upstream*" in comment["body"]


def test_rerun_command_from_a_writer_reacts_and_enqueues(web, workers, payloads):
    workers()
    web.double.set_permission(REPO, "maintainer", "write")
    web.double.add_workflow_run(REPO, 301, web.head, [
        {"id": 61, "name": "lint", "conclusion": "failure", "log": ci_log("lint_lintrunner.txt")}])
    comment_id = web.double.add_user_comment(REPO, PR, "maintainer", "/etriage rerun")
    answer = web.post("issue_comment", payloads.issue_comment(comment_id, "maintainer", "/etriage rerun"))
    assert answer.status_code == 202, answer.text
    web.double.wait_for(lambda: completed_runs(web.double, web.head), 90, "rerun check run")
    [mine] = [c for c in web.double.comments_on(REPO, PR) if c["id"] == comment_id]
    assert mine["reactions"] == ["eyes"]
    assert [a["command"] for a in web.store().audit_log(REPO, PR)] == ["/etriage rerun"]
    # GitHub re-runs the head's failed Actions jobs, and the reply says what was queued
    assert [r.path for r in web.double.requests_to("POST", r"/rerun-failed-jobs$")] == [
        f"/repos/{REPO}/actions/runs/301/rerun-failed-jobs"]
    [reply] = web.double.wait_for(lambda: [c["body"] for c in bot_comments(web.double)
                                           if c["body"].startswith("Queued:")], 30, "the reply")
    assert reply.startswith("Queued: GitHub re-runs the failed jobs of `Build` run 301; etriage runs its suites")


def test_rerun_command_from_a_reader_is_refused(web, workers, payloads):
    workers()
    web.double.set_permission(REPO, "visitor", "read")
    comment_id = web.double.add_user_comment(REPO, PR, "visitor", "/etriage rerun")
    web.post("issue_comment", payloads.issue_comment(comment_id, "visitor", "/etriage rerun"))
    [reply] = web.double.wait_for(lambda: bot_comments(web.double), 60, "reply")
    assert "@visitor" in reply["body"] and "write access" in reply["body"]
    assert web.double.check_runs_for(REPO) == []
    [mine] = [c for c in web.double.comments_on(REPO, PR) if c["id"] == comment_id]
    assert mine["reactions"] == []


def _commit(repo_dir, path, text) -> str:
    import subprocess

    (repo_dir / path).write_text(text)
    env = {"PATH": "/usr/bin:/bin", "GIT_AUTHOR_NAME": "t", "GIT_COMMITTER_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_EMAIL": "t@e", "HOME": str(repo_dir)}
    subprocess.run(["git", "-C", str(repo_dir), "commit", "-qam", "push"], check=True, env=env)
    return subprocess.run(["git", "-C", str(repo_dir), "rev-parse", "HEAD"], check=True,
                          env=env, capture_output=True, text=True).stdout.strip()


def _wait_until_unacked_expired(client, visibility_timeout: float) -> None:
    """Kombu restores an unacked message once it is older than the visibility timeout; the
    next worker restores at start, so start it only after that point (a clock condition)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        scores = [s for _, s in client.zrange("unacked_index", 0, -1, withscores=True)]
        assert scores, "the killed worker's message is not in the unacked index"
        if max(scores) < time.time() - visibility_timeout - 0.5:
            return
        time.sleep(0.2)
    raise TimeoutError("unacked message never expired")
