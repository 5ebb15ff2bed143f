"""Fetching through the real service (web, Celery worker, Redis, the GitHub double's git over
HTTP): a fetch that fails is an environment verdict naming what failed, never the PR's fault,
with its worktree cleaned and the next pull request served; a configured local clone
(ETRIAGE_REPO_PATHS) is used as it is, never fetched."""
from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest

from tests.service.conftest import PR, REPO, TOKEN

pytestmark = pytest.mark.service


def git(path: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(path), "GIT_AUTHOR_NAME": "t",
                               "GIT_COMMITTER_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                               "GIT_COMMITTER_EMAIL": "t@example.com"}).stdout.strip()


def worktrees_left(data: Path) -> list[str]:
    folder = data / "repos" / "worktrees"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def completed(double, sha):
    return [r for r in double.check_runs_for(REPO, sha) if r["status"] == "completed"]


def summary(double, pr: int) -> str:
    [comment] = [c for c in double.comments_on(REPO, pr) if c["user"] == double.bot_login]
    return comment["body"]


def opened(payloads, number: int, head: str, base: str) -> dict:
    payload = payloads.pull_request("opened", head, base)
    payload["pull_request"]["number"] = payload["number"] = number
    return payload


def side_commit(checkout: Path, base: str, branch: str, name: str) -> str:
    """A commit on its own branch off `base` (the checkout stays on master); its sha."""
    git(checkout, "checkout", "-q", "-b", branch, base)
    (checkout / "docs" / name).write_text(f"{branch}\n")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", branch)
    git(checkout, "checkout", "-q", "master")
    return git(checkout, "rev-parse", branch)


def test_a_failed_fetch_is_an_environment_verdict_and_the_next_pull_request_is_served(
        web, workers, payloads, tmp_path):
    double, store = web.double, web.store()
    # PR 3's base is a tag, not a branch
    git(web.checkout, "tag", "v1.0", web.base)
    tagged = side_commit(web.checkout, web.base, "on-a-tag", "tagged.md")
    double.add_pull(REPO, PR + 1, tagged, web.base, base_ref="v1.0", files=[("docs/tagged.md", "added")])
    # PR 4's head was on a contributor's branch that is gone, with refs/pull/4/head, after the
    # webhook was sent (GitHub's API still names it)
    gone = side_commit(web.checkout, web.base, "gone", "gone.md")
    double.add_pull(REPO, PR + 2, gone, web.base, files=[("docs/gone.md", "added")])
    git(web.checkout, "branch", "-q", "-D", "gone")
    double.git.delete_ref(REPO, f"refs/pull/{PR + 2}/head")
    double.git.forget_unreachable(REPO)

    worker = workers()
    web.post("pull_request", opened(payloads, PR + 1, tagged, web.base))
    web.post("pull_request", opened(payloads, PR + 2, gone, web.base))
    [tag_run] = double.wait_for(lambda: completed(double, tagged), 120, "PR 3's check run")
    [gone_run] = double.wait_for(lambda: completed(double, gone), 120, "PR 4's check run")
    double.wait_for(lambda: not store.pending_reports(), 30, "the publish")
    for run, pr, title, words in [
            (tag_run, PR + 1, "the base branch could not be fetched",
             "the base `v1.0` is not a branch of Codertocat/Hello-World (a tag"),
            (gone_run, PR + 2, "the pull request's head could not be fetched", f"refs/pull/{PR + 2}/head is gone")]:
        assert run["conclusion"] == "neutral" and run["output"]["title"] == f"Environment problem: {title}"
        assert words in run["output"]["summary"], run["output"]["summary"]
        body = summary(double, pr)
        assert "Environment problem — not caused by this change." in body and words in body
        assert "## etriage: ✅ No new failures caused by this change · 1 environment" in body
    assert worktrees_left(tmp_path / "data") == []

    # the next pull request: fetched and triaged by the same worker
    web.post("pull_request", payloads.pull_request("opened", web.head, web.base))
    [next_run] = double.wait_for(lambda: completed(double, web.head), 120, "PR 2's check run")
    double.wait_for(lambda: not store.pending_reports(), 30, "the publish")
    assert next_run["conclusion"] == "success"
    assert "No new failures caused by this change" in summary(double, PR)
    assert worker.process.poll() is None
    log = (tmp_path / "worker-0.log").read_text()
    assert "fetch failed (base)" in log and "fetch failed (head)" in log
    assert TOKEN not in log and base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode() not in log


def test_a_configured_local_clone_is_used_as_it_is_and_never_fetched(web, workers, payloads, tmp_path):
    double, store = web.double, web.store()
    workers(ETRIAGE_REPO_PATHS=f"{REPO}={web.checkout}")
    web.post("pull_request", payloads.pull_request("opened", web.head, web.base))
    [run] = double.wait_for(lambda: completed(double, web.head), 120, "the check run")
    assert run["conclusion"] == "success"
    # a head the clone lacks: the operator's clone is not fetched, and the verdict says so
    other = tmp_path / "elsewhere"
    other.mkdir()
    git(other, "init", "-q", "-b", "master")
    (other / "x.md").write_text("x\n")
    git(other, "add", "-A")
    git(other, "commit", "-q", "-m", "not in the clone")
    stranger = git(other, "rev-parse", "HEAD")
    double.git.create(REPO, source=web.checkout)  # GitHub's copy has the new head, the clone does not
    double.git.push(REPO, other, f"{stranger}:refs/heads/elsewhere")
    double.add_pull(REPO, PR + 1, stranger, web.base, files=[("x.md", "added")])
    web.post("pull_request", opened(payloads, PR + 1, stranger, web.base))
    [missing] = double.wait_for(lambda: completed(double, stranger), 120, "the second check run")
    double.wait_for(lambda: not store.pending_reports(), 30, "the publish")
    assert missing["conclusion"] == "neutral"
    # the operator's configuration is the operator's (logged): the PR reads that it was told
    summary = missing["output"]["summary"]
    assert f"could not read commit `{stranger[:12]}` of this pull request" in summary
    assert "the operator has been told" in summary and "ETRIAGE_REPO_PATHS" not in summary
    assert all("ETRIAGE_REPO_PATHS" not in c["body"] for c in double.comments_on(REPO, PR + 1))
    assert double.requests_to("GET", r"\.git/info/refs$") == []  # git never asked the double
    assert not (tmp_path / "data" / "repos" / "mirrors").exists()
