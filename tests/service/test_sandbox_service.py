"""The sandbox through the real service (web, Celery worker, Redis, GitHub double): a worker that
cannot start bubblewrap runs nothing and says so on the check run; a change whose code sleeps
forever is killed at the suite's wall-clock limit, the comment names it, and the same worker
then triages the next pull request."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.service.conftest import PR, REPO, make_checkout

pytestmark = [pytest.mark.service, pytest.mark.executorch]

# Replaces executorch's backend_api.py in the run's overlay; the probes import it.
HOSTILE_MODULE = '''import sys, time
if "tasks.probes" in sys.modules:
    print("hostile change: sleeping forever", flush=True)
    time.sleep(10**6)
'''


def git(path: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(path), "GIT_AUTHOR_NAME": "t",
                               "GIT_COMMITTER_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                               "GIT_COMMITTER_EMAIL": "t@example.com"}).stdout.strip()


@pytest.fixture
def checkout(tmp_path):
    """base, a docs-only commit, then the hostile head on top of it (exir/backend/backend_api.py)."""
    path = tmp_path / "Hello-World"
    base, docs_head = make_checkout(path)
    (path / "exir" / "backend").mkdir(parents=True)
    (path / "exir" / "backend" / "backend_api.py").write_text(HOSTILE_MODULE)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "hostile: sleep at import")
    return path, base, git(path, "rev-parse", "HEAD")


def completed(double, sha):
    return [r for r in double.check_runs_for(REPO, sha) if r["status"] == "completed"]


def summary(double, pr=PR) -> str:
    [comment] = [c for c in double.comments_on(REPO, pr)
                 if c["user"] == double.bot_login and "etriage:summary" in c["body"]]
    return comment["body"]


def test_a_worker_without_a_sandbox_runs_nothing_and_says_so(web, workers, payloads):
    double, store = web.double, web.store()
    workers(ETRIAGE_SUITES="probes", ETRIAGE_SANDBOX_BWRAP="/nonexistent/bwrap")
    web.post("pull_request", payloads.pull_request("opened", web.head, web.base))
    [run] = double.wait_for(lambda: completed(double, web.head), 90, "the check run")
    double.wait_for(lambda: not store.pending_reports(), 30, "the publish")
    assert run["conclusion"] == "neutral"
    assert run["output"]["title"].startswith("Not run: no sandbox: bubblewrap (bwrap) is not installed")
    body = summary(double)
    assert "probes on host: not run: no sandbox" in body
    assert "never runs a change's code outside its sandbox" in body
    assert store.results_for(REPO, web.head) == []


def test_a_change_that_sleeps_forever_is_killed_and_the_worker_serves_the_next_pr(web, workers, payloads):
    double, store = web.double, web.store()
    worker = workers(ETRIAGE_SUITES="probes", ETRIAGE_SUITE_TIMEOUT="10")
    web.post("pull_request", payloads.pull_request("opened", web.head, web.base))
    [run] = double.wait_for(lambda: completed(double, web.head), 240, "the hostile run's check run")
    double.wait_for(lambda: not store.pending_reports(), 30, "the publish")
    body = summary(double)
    # (10 s is short enough that the merge base's probes are cut off too: the verdict is not the
    # point here, the kill and the worker after it are)
    assert "probes on host: crashed (no JUnit results (killed: the sandbox's wall-clock limit (10 s)))" in body

    # the next pull request: a docs-only change, triaged by the same worker
    docs_head = git(web.checkout, "rev-parse", "HEAD~1")
    double.add_pull(REPO, PR + 1, docs_head, web.base, files=[("docs/usage.md", "modified")])
    next_pr = payloads.pull_request("opened", docs_head, web.base)
    next_pr["pull_request"]["number"] = next_pr["number"] = PR + 1
    web.post("pull_request", next_pr)
    [second] = double.wait_for(lambda: completed(double, docs_head), 90, "the next PR's check run")
    assert second["conclusion"] == "success"
    assert worker.process.poll() is None
