"""What automatic triage decides before it runs anything, through the real service: nothing of
an outside contributor's PR runs until a maintainer's ok-to-test for that head (Prow's model;
device targets included), and a PR that edits
.github/etriage.yml gets its validation on the check run (the config in force stays the
default branch's)."""
from __future__ import annotations

import subprocess
import uuid

import pytest

from tests.service.conftest import PR, REPO, github_time

pytestmark = pytest.mark.service

CONFIG = ".github/etriage.yml"
WITH_DEVICES = "triage: {}\ncommands: {}\nlabels: {}\ndevices:\n  targets: [android-sm8650]\n"
WAITING = "until a maintainer comments `/etriage ok-to-test`"
NO_RUNNER = "Not run on `android-sm8650`: this worker has no runner for it."


def completed(double, sha):
    return [r for r in double.check_runs_for(REPO, sha) if r["status"] == "completed"]


def summary_comment(double):
    [comment] = [c for c in double.comments_on(REPO, PR)
                 if c["user"] == double.bot_login and "etriage:summary" in c["body"]]
    return comment["body"]


def test_outside_contributor_runs_only_after_ok_to_test_for_that_head(web, workers, payloads):
    double, store = web.double, web.store()
    double.set_file(REPO, CONFIG, WITH_DEVICES)
    double.set_permission(REPO, "maintainer", "maintain")
    double.set_permission(REPO, "Codertocat", "read")  # an outside contributor
    workers()
    web.post("pull_request", payloads.pull_request("opened", web.head, web.base))
    [first] = double.wait_for(lambda: completed(double, web.head), 90, "the check run")
    double.wait_for(lambda: not store.pending_reports(), 30, "the publish")
    body = summary_comment(double)
    assert WAITING in body and "@Codertocat has no write access" in body
    assert "Suites not run: waiting for a maintainer" in body
    assert NO_RUNNER not in body  # nothing was planned, no target chosen
    assert first["conclusion"] == "neutral"
    assert first["output"]["title"] == "Waiting for a maintainer: /etriage ok-to-test"
    assert WAITING in first["output"]["summary"]
    assert double.requests_to("GET", r"/collaborators/Codertocat/permission$")
    assert store.results_for(REPO, web.head) == []  # nothing of the change ran

    comment_id = double.add_user_comment(REPO, PR, "maintainer", "/etriage ok-to-test")
    answer = web.post("issue_comment", payloads.issue_comment(comment_id, "maintainer",
                                                              "/etriage ok-to-test"))
    assert answer.status_code == 202, answer.text
    double.wait_for(lambda: len(completed(double, web.head)) == 2, 90, "the approved run")
    double.wait_for(lambda: not store.pending_reports(), 30, "the publish")
    body = summary_comment(double)
    assert WAITING not in body and NO_RUNNER in body  # chosen now; this worker has no phone
    assert store.is_approved_for_devices(REPO, PR, web.head)


def test_a_writer_s_pull_request_needs_no_approval(web, workers, payloads):
    double, store = web.double, web.store()
    double.set_file(REPO, CONFIG, WITH_DEVICES)
    double.set_permission(REPO, "Codertocat", "write")
    workers()
    web.post("pull_request", payloads.pull_request("opened", web.head, web.base))
    double.wait_for(lambda: completed(double, web.head), 90, "the check run")
    double.wait_for(lambda: not store.pending_reports(), 30, "the publish")
    body = summary_comment(double)
    assert NO_RUNNER in body and WAITING not in body


def test_a_trusted_login_in_the_default_branch_config_needs_no_approval(web, workers, payloads):
    double, store = web.double, web.store()
    double.set_permission(REPO, "Codertocat", "read")
    double.set_file(REPO, CONFIG, "triage:\n  trusted: [codertocat]\ncommands: {}\n")  # any case
    double.set_file(REPO, CONFIG, "triage:\n  trusted: [someone-else]\n", ref=web.head)  # not in force
    workers()
    web.post("pull_request", payloads.pull_request("opened", web.head, web.base))
    [run] = double.wait_for(lambda: completed(double, web.head), 90, "the check run")
    double.wait_for(lambda: not store.pending_reports(), 30, "the publish")
    assert run["conclusion"] == "success" and WAITING not in summary_comment(double)


def test_an_edited_repo_config_is_validated_on_the_check_run(web, workers, payloads):
    double, store = web.double, web.store()
    double.pulls[(REPO, PR)].files = [("docs/usage.md", "modified"), (CONFIG, "modified")]
    broken = "triage:\n  suites: [multi_method]\n  tragets: [host]\nlabels:\n  no_such_category: x\n"
    double.set_file(REPO, CONFIG, broken, ref=web.head)  # the default branch has no file
    workers()
    web.post("pull_request", payloads.pull_request("opened", web.head, web.base))
    [run] = double.wait_for(lambda: completed(double, web.head), 90, "the check run")
    double.wait_for(lambda: not store.pending_reports(), 30, "the publish")
    text = run["output"]["text"]
    assert "## Repository configuration" in text and "2 problem(s)" in text
    assert "line 3: triage: unknown key 'tragets'" in text
    assert "line 5: labels.no_such_category" in text
    assert sorted((a["path"], a["start_line"], a["annotation_level"]) for a in run["annotations"]) \
        == [(CONFIG, 3, "failure"), (CONFIG, 5, "failure")]
    # a docs change that passes everything else still fails: merged, this file would switch the
    # repository's triage off (every later event would meet a broken config)
    assert run["conclusion"] == "failure" and "2 problem(s)" in run["output"]["title"]
    # Read at the head only to validate; the config in force came from the default branch.
    reads = [r.query.get("ref") for r in double.requests_to("GET", r"/contents/\.github/etriage\.yml$")]
    assert reads.count(web.head) == 1 and None in reads


def test_a_valid_repo_config_edit_is_confirmed(web, workers, payloads):
    double = web.double
    double.pulls[(REPO, PR)].files = [(CONFIG, "added")]
    double.set_file(REPO, CONFIG, WITH_DEVICES, ref=web.head)
    workers()
    web.post("pull_request", payloads.pull_request("opened", web.head, web.base))
    [run] = double.wait_for(lambda: completed(double, web.head), 90, "the check run")
    assert "is valid; it takes effect once merged" in run["output"]["text"]
    assert run["annotations"] == []
    # The PR's own `devices:` section is not in force: only its author's was looked up (to
    # decide whether its code may run), nobody's for devices.
    assert {r.path.rsplit("/", 2)[-2] for r in double.requests_to("GET", r"/collaborators/")} == {"Codertocat"}


def new_head(checkout, name: str) -> str:
    """One more commit on the checkout's branch (what a contributor's push adds); its sha."""
    def git(*args):
        return subprocess.run(["git", "-C", str(checkout), *args], check=True, capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(checkout), "GIT_AUTHOR_NAME": "t",
                                   "GIT_COMMITTER_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                                   "GIT_COMMITTER_EMAIL": "t@example.com"}).stdout.strip()
    (checkout / "docs" / name).write_text("pushed while the approval waited\n")
    git("add", "-A")
    git("commit", "-q", "-m", name)
    return git("rev-parse", "HEAD")


def test_a_push_while_ok_to_test_waits_on_github_is_not_approved(web, workers, payloads):
    """The attack: the maintainer approves head A; the permission lookup is held; the contributor
    pushes B; the lookup answers. The approval is A's only, B's check run is not green, the reply
    names A, and the same signed comment replayed under a new delivery id runs nothing again."""
    double, store = web.double, web.store()
    double.set_permission(REPO, "maintainer", "maintain")
    double.set_permission(REPO, "Codertocat", "read")  # an outside contributor
    worker = workers()
    web.post("pull_request", payloads.pull_request("opened", web.head, web.base, at=github_time(-120)))
    double.wait_for(lambda: completed(double, web.head), 90, "A's waiting check run")

    held = double.hold("GET", r"/collaborators/maintainer/permission$")
    comment_id = double.add_user_comment(REPO, PR, "maintainer", "/etriage ok-to-test")
    comment = payloads.issue_comment(comment_id, "maintainer", "/etriage ok-to-test", at=github_time(-30))
    assert web.post("issue_comment", comment).status_code == 202
    assert held.reached.wait(60), "the permission lookup was never made"
    pushed = new_head(web.checkout, "pushed.md")
    double.push(REPO, PR, pushed)
    web.post("pull_request", payloads.pull_request("synchronize", pushed, web.base, at=github_time()))
    [waiting] = double.wait_for(lambda: completed(double, pushed), 90, "B's check run")
    held.release()

    def reply():
        return [c["body"] for c in double.comments_on(REPO, PR)
                if c["user"] == double.bot_login and "etriage:summary" not in c["body"]]
    [answer] = double.wait_for(reply, 60, "the reply")
    assert f"Approved `{web.head[:12]}`, the head when you wrote this" in answer
    assert f"moved to `{pushed[:12]}` since, which is not approved" in answer
    assert store.is_approved_for_devices(REPO, PR, web.head)
    assert not store.is_approved_for_devices(REPO, PR, pushed)
    assert waiting["conclusion"] == "neutral" and waiting["output"]["title"].startswith("Waiting for a maintainer")
    assert [r["conclusion"] for r in double.check_runs_for(REPO, pushed)] == ["neutral"]

    # the same signed body, a new delivery id: acknowledged, and its command does not run again
    assert web.post("issue_comment", comment, delivery=str(uuid.uuid4())).status_code == 202
    double.wait_for(lambda: "already ran; a replay runs nothing" in worker.log_path.read_text(), 60, "the replay")
    assert len(reply()) == 1 and len([a for a in store.audit_log(REPO, PR) if a["command"] == "/etriage ok-to-test"]) == 1


@pytest.mark.parametrize("installation, why", [
    (999, "installation 999 is not known to the store"),
    (1, "installation 1 belongs to someone-else, not this repository's owner"),
])
def test_a_delivery_for_an_installation_the_store_does_not_know_is_acknowledged_and_dropped(
        web, workers, payloads, installation, why):
    double, store = web.double, web.store()
    store.record_installation(1, "someone-else", "created") if installation == 1 else None
    worker = workers()
    payload = payloads.pull_request("opened", web.head, web.base)
    payload["installation"] = {"id": installation}
    assert web.post("pull_request", payload).status_code == 202  # acknowledged
    double.wait_for(lambda: why in worker.log_path.read_text(), 60, "the worker's refusal")
    assert double.check_runs_for(REPO, web.head) == [] and double.comments_on(REPO, PR) == []
    assert not double.requests_to("POST", r"/access_tokens$")  # not even a token was asked for
