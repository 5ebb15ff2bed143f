"""The live-repository case end to end (issue 19): a tree that has moved past the installed wheel
(tests/environments/conftest.py: the wheel's sources plus upstream 6a44f599b9's API move), served
by the GitHub double's git; a contributor's comment-only change to backend_api.py lives in a fork
and reaches the worker only as refs/pull/N/head. The worker fetches it, runs each side on its own
commit's whole tree over the wheel's compiled parts (found by the v1.4.1 tag the mirror fetched),
and posts no new failure: the overlay of old reported 14."""
from __future__ import annotations

import pytest

from tasks.sample_repo import build_sample_repo, git
from tests.environments.conftest import MOVED
from tests.service.conftest import PR, REPO

pytestmark = [pytest.mark.service, pytest.mark.executorch]

API = "exir/backend/backend_api.py"
FORK = "contributor/Hello-World"


@pytest.fixture(scope="module")
def moved(tmp_path_factory):
    sample = build_sample_repo(tmp_path_factory.mktemp("moved-svc") / "executorch")
    base = sample.branch("moved", patch=MOVED)
    git(sample.path, "reset", "-q", "--hard", base)  # main is the moved tree
    git(sample.path, "checkout", "-q", "-b", "comment-only")
    path = sample.path / API
    path.write_text("# a contributor's comment\n" + path.read_text())
    git(sample.path, "commit", "-q", "-am", "Comment backend_api.py")
    head = git(sample.path, "rev-parse", "HEAD").strip()
    git(sample.path, "checkout", "-q", "main")
    return sample.path, base, head


@pytest.fixture
def checkout(moved):
    return moved


@pytest.fixture
def hosting(double, moved):
    path, _, _ = moved
    double.git.create(REPO, source=path)  # branches and tags (v1.4.1: the wheel's sources)
    double.git.delete_ref(REPO, "refs/heads/comment-only")
    double.git.forget_unreachable(REPO)
    double.git.fork(FORK, of=REPO)
    double.git.push(FORK, path, "refs/heads/comment-only:refs/heads/comment-only")
    return FORK


def test_a_comment_only_change_on_a_moved_tree_fetched_from_a_fork_has_no_new_failure(web, workers, payloads):
    double = web.double
    double.pulls[(REPO, PR)].files = [(API, "modified")]
    assert "ETRIAGE_REPO_PATHS" not in web.env
    workers(ETRIAGE_SUITES="probes")
    answer = web.post("pull_request", payloads.pull_request("opened", web.head, web.base))
    assert answer.status_code == 202, answer.text
    [run] = double.wait_for(lambda: [r for r in double.check_runs_for(REPO, web.head)
                                     if r["status"] == "completed"], 900, "the check run")
    assert run["conclusion"] == "success", run["output"]
    assert run["output"]["title"].startswith("0 new failure(s)"), run["output"]
    [comment] = double.wait_for(lambda: [c for c in double.comments_on(REPO, PR)
                                         if c["user"] == double.bot_login], 60, "the comment")
    body = comment["body"]
    assert "No new failures caused by this change" in body.splitlines()[1], body
    assert "the wheel's compiled parts" in body and "copy_exported_program_for_preprocess" not in body, body
    assert double.requests_to("POST", rf"^/{REPO}\.git/git-upload-pack$")  # fetched, not read from a clone
