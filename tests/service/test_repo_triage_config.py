"""The default branch's `.github/etriage.yml` chooses the suites and targets of an automatic
run, within the worker's ETRIAGE_SUITES / ETRIAGE_TARGETS: through the real service (webhook
over HTTP, a real Celery worker on Redis, the pipeline on a small clone, the GitHub double)."""
from __future__ import annotations

import pytest

from tests.service.conftest import PR, REPO
from tasks.sample_repo import commit_all, init_repo

pytestmark = pytest.mark.service

CONFIG = ".github/etriage.yml"
NOTE = "exir/_etriage_note.py"


@pytest.fixture
def checkout(tmp_path):
    """A change to one Python file under exir/: the plan would pick every suite of every
    backend (multi_method, mutable_buffer, probes, selected) unless told otherwise."""
    repo = init_repo(tmp_path / "Hello-World")
    (repo / "README.md").write_text("Hello World\n")
    base = commit_all(repo, "base")
    (repo / "exir").mkdir()
    (repo / NOTE).write_text("# a note; nothing imports this module\n")
    return repo, base, commit_all(repo, "exir: a note")


def completed(double, sha):
    return [r for r in double.check_runs_for(REPO, sha) if r["status"] == "completed"]


def summary(double) -> str:
    [comment] = [c for c in double.comments_on(REPO, PR)
                 if c["user"] == double.bot_login and "etriage:summary" in c["body"]]
    return comment["body"]


def run(web, workers, payloads, config: str | None, **worker_env):
    double, store = web.double, web.store()
    double.pulls[(REPO, PR)].files = [(NOTE, "added")]
    if config is not None:
        double.set_file(REPO, CONFIG, config)  # the default branch's file (no ref)
    workers(**worker_env)
    answer = web.post("pull_request", payloads.pull_request("opened", web.head, web.base))
    assert answer.status_code == 202, answer.text
    [check] = double.wait_for(lambda: completed(double, web.head), 180, "the check run")
    double.wait_for(lambda: not store.pending_reports(), 30, "the publish")
    return check, summary(double)


def test_repo_config_suites_decide_what_an_automatic_run_runs(web, workers, payloads):
    check, body = run(web, workers, payloads, "triage:\n  suites: [probes]\n")
    assert "- probes on host: ran, " in body
    for other in ("multi_method", "mutable_buffer", "selected"):
        assert f"{other} on host" not in body, other
    assert check["conclusion"] == "success"
    results = web.store().results_for(REPO, web.head)
    assert results and {r["suite"] for r in results} == {"probes"}


def test_worker_suites_bound_the_repo_config(web, workers, payloads):
    """The file asks for probes; this worker runs only multi_method: nothing runs, and the
    check run says why without blaming the change."""
    check, body = run(web, workers, payloads, "triage:\n  suites: [probes]\n",
                      ETRIAGE_SUITES="multi_method")
    assert check["conclusion"] == "neutral" and check["output"]["title"] == "Environment problem"
    assert "Not run: suite(s) `probes` of .github/etriage.yml; this worker runs only " \
           "`multi_method` (ETRIAGE_SUITES)." in body
    assert web.store().results_for(REPO, web.head) == []


def test_repo_config_targets_within_the_worker_targets(web, workers, payloads):
    check, body = run(web, workers, payloads, "triage:\n  targets: [qnn-htp-sim]\n")
    assert "Not run: target(s) `qnn-htp-sim` of .github/etriage.yml; this worker runs only " \
           "`host`, `host-native` (ETRIAGE_TARGETS)." in body
    assert check["conclusion"] == "neutral"
    assert web.store().results_for(REPO, web.head) == []
