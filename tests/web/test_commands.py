"""handle_comment with the worker's real GitHubClient (HTTP to the GitHub double) and real Store."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from bot import repo_config
from bot.commands import CommandContext, devices_allowed, handle_comment
from bot.evidence import Entry

BOT = "etriage[bot]"
REPO = "pytorch/executorch"
PR = 7
HEAD, NEXT_HEAD, BASE_SHA = "a" * 40, "c" * 40, "b" * 40
LEVELS = ("none", "read", "triage", "write", "maintain", "admin")
WITH_DEVICES = "triage: {}\ncommands: {}\nlabels: {}\ndevices: {}\n"
TEST = "exir/backend/test/test_to_backend_multi_method.py::TestToBackendMultiMethod::test_multi_method_two_backends"
FAILURE = Entry(kind="pr", verdict="new", category="multi_method_lowering", title="Shared nodes across delegated subgraphs",
                explanation="getitem nodes were left dangling after the submodule was replaced.",
                suggestion="Keep getitem nodes with their delegate; see PR 10584.",
                primary_line="AssertionError: ```weird``` output", tests=[TEST],
                reproduce=f"python -m pytest {TEST}", fingerprints=["3fa9c1d2e4b5"], decided_by="model",
                confidence=0.81, decision=["rule multi-method-getitem (strength 0.9)", "frame exir/backend/backend_api.py"],
                looks_like=[{"source": "https://github.com/pytorch/executorch/pull/10584", "category": "multi_method_lowering",
                             "similarity": 0.72}],
                suspects=[{"path": "exir/backend/backend_api.py", "line": 705, "symbol": "to_backend", "reason": "in the traceback",
                           "score": 3.0}])
CI_FAILURE = Entry(kind="ci", verdict="pre_existing", category="runtime_error", title="Test or command timed out",
                   primary_line="Command took >15min, returning 124", tests=["unittest / linux"],
                   fingerprints=["38f1fbcd0675a65b"],
                   link="https://github.com/pytorch/executorch/actions/runs/30433642/job/399444496#step:4:12")


def stamp(seconds_ago: float) -> str:
    """A GitHub timestamp (whole seconds, UTC) `seconds_ago` before now."""
    return (datetime.now(timezone.utc) - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


class World:
    def __init__(self, double, github, store, dispatcher):
        self.double, self.github, self.store, self.dispatcher = double, github, store, dispatcher
        double.add_pull(REPO, PR, HEAD, BASE_SHA, author="outsider")
        self.push(HEAD, seconds_ago=3600)  # opened an hour ago (the worker records the webhook's time)
        for level in LEVELS:
            double.set_permission(REPO, level, level)  # user "write" has write access, ...
        double.set_permission(REPO, "outsider", "read")
        self.comment_at(HEAD, pr=[FAILURE], ci=[CI_FAILURE])

    def comment_at(self, head: str, *, pr=(), ci=()) -> None:
        """The worker's record of the PR's comment at `head`: each section's numbered entries."""
        self.store.record_pull(REPO, PR, head, base_ref="master", base_sha=BASE_SHA)
        for kind, entries in (("ci", ci), ("pr", pr)):  # stored in either order; numbered pr first
            run_id = self.store.start_run(REPO, PR, head, kind)
            self.store.update_run(run_id, summary=f"### {kind}", report={"index": [e.to_dict() for e in entries]})

    def push(self, sha: str, *, seconds_ago: float) -> None:
        """A push GitHub stamped `seconds_ago` before now: the double's head and the store's record."""
        self.double.push(REPO, PR, sha)
        self.store.record_head(REPO, PR, sha, datetime.fromisoformat(stamp(seconds_ago).replace("Z", "+00:00")))

    def comment(self, author: str, body: str, *, previous: str | None = None, action: str = "created",
                config: str | None = WITH_DEVICES, author_type: str = "User", written_at: str | None = "now"):
        comment_id = self.double.add_user_comment(REPO, PR, author, body)
        ctx = CommandContext(github=self.github, store=self.store, enqueue=self.dispatcher,
                             repo_config=repo_config.load(config), bot_login=BOT, installation_id=99)
        outcomes = handle_comment(ctx, repo=REPO, pr=PR, comment_id=comment_id, author=author,
                                  author_type=author_type, body=body, previous_body=previous, action=action,
                                  written_at=stamp(0) if written_at == "now" else written_at)
        self.last_comment = comment_id
        return outcomes

    def reactions(self) -> list[str]:
        return self.double.comments[self.last_comment]["reactions"]

    def replies(self) -> list[str]:
        return [c["body"] for c in self.double.comments_on(REPO, PR) if c["user"] == BOT]

    def triage_calls(self) -> list[dict]:
        return [args for task, args in self.dispatcher.calls if task == "triage_pr"]


@pytest.fixture
def world(github_double, github, store, dispatcher) -> World:
    return World(github_double, github, store, dispatcher)


COMMANDS = {
    "help": "/etriage help",
    "explain": "/etriage explain 1",
    "rerun": "/etriage rerun",
    "run": "/etriage run qnn",
    "label": '/etriage label "triage: lint"',
    "ignore": '/etriage ignore 1 --reason "flaky on the runner"',
    "ok-to-test": "/etriage ok-to-test",
}
PERMISSION_TABLE = [
    (verb, level, "answered" if verb in ("help", "explain")
     else "accepted" if level in ("write", "maintain", "admin") else "refused")
    for verb in COMMANDS for level in LEVELS
]


@pytest.mark.parametrize("verb, level, status", PERMISSION_TABLE)
def test_permissions_per_verb(world, verb, level, status):
    [outcome] = world.comment(level, COMMANDS[verb])
    assert (outcome.verb, outcome.status) == (verb, status), outcome.detail
    [audit] = world.store.audit_log(REPO, PR)
    assert (audit["actor"], audit["command"]) == (level, COMMANDS[verb])
    assert audit["outcome"].startswith(status)
    if status == "refused":
        assert world.reactions() == []
        [reply] = world.replies()
        assert f"`{verb}` needs write access to {REPO} (you have {level})" in reply
        assert world.dispatcher.calls == [] and world.double.labels_on(REPO, PR) == []
        assert world.store.ignored_failures(REPO, PR) == {}
        assert not world.store.is_approved_for_devices(REPO, PR, HEAD)
    else:
        assert world.reactions() == ["eyes"]


def test_accepted_commands_do_their_work(world):
    outcomes = world.comment("maintain", "\n".join([
        "/etriage rerun all --target qnn-htp-sim", "/etriage run multi_method on host", "/etriage run selected --all",
        '/etriage label "TRIAGE: LINT" "triage: multi-method"', '/etriage ignore 3fa9c1 --reason "known flaky"']))
    assert [o.status for o in outcomes] == ["accepted"] * 5
    assert world.triage_calls() == [
        dict(repo=REPO, pr=PR, head_sha=HEAD, base_ref="master", installation_id=99,
             reason="rerun:all", targets=["qnn-htp-sim"], suites=None, pushed_at=None),
        dict(repo=REPO, pr=PR, head_sha=HEAD, base_ref="master", installation_id=99,
             reason="run", targets=["host"], suites=["multi_method"], pushed_at=None),
        dict(repo=REPO, pr=PR, head_sha=HEAD, base_ref="master", installation_id=99,
             reason="run:all", targets=None, suites=["selected"], pushed_at=None),
    ]
    assert world.double.labels_on(REPO, PR) == ["triage: lint", "triage: multi-method"]
    assert world.store.ignored_failures(REPO, PR) == {"3fa9c1d2e4b5": "known flaky"}
    assert world.reactions() == ["eyes"]
    [reply] = world.replies()  # accepted commands are answered in words, in one reply
    assert "Queued: etriage runs every test of its suites on qnn-htp-sim again at `aaaaaaaaaaaa`" in reply
    assert "Queued: the suite `multi_method` on host at `aaaaaaaaaaaa`" in reply
    assert "Labelled: `triage: lint`, `triage: multi-method`." in reply
    assert f"Ignored 1 (`{TEST}`) on this pull request: *known flaky*" in reply


def test_help_and_explain_are_answered_in_one_reply(world):
    outcomes = world.comment("read", "/etriage help\n/etriage explain 1\n/etriage help")
    assert [o.status for o in outcomes] == ["answered"] * 3
    [reply] = world.replies()
    assert reply.count("**etriage commands**") == 1
    assert "`/etriage rerun [failed|all] [--target T]`" in reply and "`android-sm8650` (device)" in reply
    assert "**1. Shared nodes across delegated subgraphs**: new, category `multi_method_lowering`, " \
           "decided by `model`, confidence 0.81" in reply
    assert "````\nAssertionError: ```weird``` output\n````" in reply  # the log line cannot close the block
    assert f"```sh\npython -m pytest {TEST}\n```" in reply


def test_unknown_failure_is_explained_as_such(world):
    [outcome] = world.comment("read", "/etriage explain 99")
    assert outcome.status == "refused"
    assert "no failure `99` in this pull request's etriage comment; use its number there" in world.replies()[0]


@pytest.mark.parametrize("ref, number", [
    ("1", 1), ("#2", 2), (TEST, 1), ("test_multi_method_two_backends", 1), ("3fa9c1", 1), ("3FA9C1D2", 1),
    ("38f1fb", 2), ("unittest / linux", 2), ("3", None), ("0", None), ("3fa9c", None), ("nothing", None),
])
def test_explain_takes_the_number_in_the_comment_a_test_name_or_a_fingerprint_prefix(world, ref, number):
    """The comment numbers the bot's own entries first, then the CI's (bot.evidence, as
    compose_comment does); a prefix shorter than 6 or a number past the last names nothing."""
    [outcome] = world.comment("read", f'/etriage explain "{ref}"')
    assert outcome.status == ("answered" if number else "refused"), outcome.detail
    if number:
        assert outcome.detail == f"explained {number}"
        assert world.replies()[-1].startswith(f"**{number}. ")


def test_explain_says_what_the_comment_does_not(world):
    [outcome] = world.comment("read", "/etriage explain 1")
    reply = outcome.reply
    assert "**What decided the category:**\n- rule multi-method-getitem (strength 0.9)\n- frame exir/backend/backend_api.py" in reply
    assert ("**Looks like** (the nearest labelled failures):\n- (`multi_method_lowering`, 0.72), "
            "[pytorch/executorch\\#\u2060" "10584](https://github.com/pytorch/executorch/pull/10584)") in reply
    assert "**On trunk:** no failure like it is recorded on trunk." in reply
    assert "**Suspects in the diff:**\n- `exir/backend/backend_api.py:705` `to_backend`: in the traceback" in reply
    [ci] = world.comment("read", "/etriage explain 2")
    assert "**Evidence:** [the job log at the line](https://github.com/pytorch/executorch/actions/runs/30433642/" \
           "job/399444496#step:4:12)" in ci.reply


def test_ignore_by_number_ignores_that_entry_and_says_so(world):
    [outcome] = world.comment("write", '/etriage ignore 2 --reason "timeouts on this runner"')
    assert outcome.status == "accepted"
    assert world.store.ignored_failures(REPO, PR) == {"38f1fbcd0675a65b": "timeouts on this runner"}
    assert "but it is pre-existing, not counted against this change anyway" in world.replies()[-1]


def test_a_run_on_an_unknown_target_is_answered_with_the_valid_ones(world):
    [outcome] = world.comment("write", "/etriage run probes on qnn-sim")
    assert outcome.status == "refused" and world.triage_calls() == []
    [reply] = world.replies()
    assert "unknown target `qnn-sim`; known: `host`, " in reply and "`qnn-htp-sim`" in reply


def test_rerun_reruns_the_failed_github_actions_runs_of_the_head_and_says_what_was_queued(world):
    log = "boom\n"
    world.double.add_workflow_run(REPO, 501, HEAD, [{"id": 9001, "name": "pull / unittest", "conclusion": "failure", "log": log},
                                                    {"id": 9002, "name": "pull / lint", "conclusion": "success", "log": ""}])
    world.double.add_workflow_run(REPO, 502, HEAD, [{"id": 9003, "name": "trunk", "conclusion": "success", "log": ""}],
                                  conclusion="success")
    world.double.add_workflow_run(REPO, 503, BASE_SHA, [{"id": 9004, "name": "old", "conclusion": "failure", "log": log}])
    [outcome] = world.comment("write", "/etriage rerun")
    assert outcome.status == "accepted", outcome.detail
    assert [r.path for r in world.double.requests_to("POST", r"/rerun-failed-jobs$")] == [
        f"/repos/{REPO}/actions/runs/501/rerun-failed-jobs"]
    assert world.double.jobs[(REPO, 9001)]["status"] == "queued" and world.double.jobs[(REPO, 9002)]["conclusion"] == "success"
    assert [c["reason"] for c in world.triage_calls()] == ["rerun:failed"]
    [reply] = world.replies()
    assert reply.startswith("Queued: GitHub re-runs the failed jobs of `Build` run 501; etriage runs its suites")
    # while GitHub re-runs it, another rerun says so in words (GitHub's 403), and still runs etriage's
    [again] = world.comment("write", "/etriage rerun")
    assert again.status == "accepted"
    assert "Not done: no failed GitHub Actions run at `aaaaaaaaaaaa`." in world.replies()[-1]
    world.double.finish_rerun(REPO, 501, "failure")
    world.double.fail("POST", r"/rerun-failed-jobs$", 403, message="Resource not accessible by integration")
    [third] = world.comment("write", "/etriage rerun")
    reply = world.replies()[-1]
    assert third.status == "accepted"  # etriage's own suites still run
    assert "the bot could not re-run `Build` run 501; the operator has been told" in reply
    assert "Resource not accessible" not in reply  # the operator's problem stays in the log


def test_rerun_of_a_running_workflow_is_answered_not_failed(world):
    world.double.add_workflow_run(REPO, 601, HEAD, [{"id": 9101, "name": "pull", "conclusion": "failure", "log": "x"}])
    world.double.fail("POST", r"/rerun-failed-jobs$", 403, message="This workflow is already running")
    world.comment("write", "/etriage rerun")
    assert "Not done: `Build` run 601 is running again already." in world.replies()[-1]


def test_rerun_with_a_target_runs_only_etriage_there(world):
    world.double.add_workflow_run(REPO, 701, HEAD, [{"id": 9201, "name": "pull", "conclusion": "failure", "log": "x"}])
    world.comment("write", "/etriage rerun --target qnn-htp-sim")
    assert world.double.requests_to("POST", r"/rerun-failed-jobs$") == []
    assert world.triage_calls()[-1]["targets"] == ["qnn-htp-sim"]


def test_refusals_and_errors_make_one_reply_and_nothing_runs(world):
    outcomes = world.comment("write", "\n".join([
        "/etriage rerunn", "/etriage run nope", "/etriage run qnn on mars", "/etriage label wontfix",
        "/etriage rerun"]))
    assert [o.status for o in outcomes] == ["invalid", "refused", "refused", "refused", "accepted"]
    [reply] = world.replies()
    assert reply.startswith("@write these commands were not run:\n")
    assert "unknown command 'rerunn'; did you mean 'rerun'?" in reply
    assert ("unknown suite `nope`; known: `multi_method`, `mutable_buffer`, `index_put`, `probes`, `qnn_probes`, `qnn`, "
            "`selected`") in reply  # the catalogue's suites, named as the planner names them
    assert "unknown target `mars`" in reply
    assert "`wontfix` not in the allow-list" in reply
    assert len(world.triage_calls()) == 1 and world.reactions() == ["eyes"]
    assert len(world.store.audit_log(REPO, PR)) == 5


def test_a_thousand_commands_run_ten_and_reply_once(world):
    world.comment("admin", "/etriage rerun\n" * 1000)
    assert len(world.triage_calls()) == 10
    [reply] = world.replies()
    assert "990 more were ignored" in reply
    assert len(world.double.requests_to("POST", r"/reactions$")) == 1


@pytest.mark.parametrize("author, author_type", [
    (BOT, "Bot"), (BOT, "User"), ("etriage", "User"), ("dependabot[bot]", "Bot"),
    ("pytorchbot", "Bot"), ("renovate[bot]", "User"),
])
def test_bots_are_never_answered(world, author, author_type):
    assert world.comment(author, "/etriage rerun\n/etriage nope", author_type=author_type) == []
    assert world.double.requests == [] and world.dispatcher.calls == []
    assert world.store.audit_log(REPO, PR) == []


def test_an_edit_runs_only_the_new_commands(world):
    outcomes = world.comment("write", "/etriage rerun\n/etriage help", previous="/etriage rerun", action="edited")
    assert [o.verb for o in outcomes] == ["help"]
    assert world.triage_calls() == []
    assert world.comment("write", "/etriage rerun", previous="/etriage rerun", action="edited") == []
    assert world.comment("write", "/etriage rerun", action="deleted") == []


def test_commands_are_silent_where_the_config_turns_them_off(world):
    assert world.comment("admin", "/etriage rerun\n/etriage nope", config="triage: {}\n") == []
    assert world.double.requests == []


def test_features_that_are_off_are_refused_by_name(world):
    outcomes = world.comment("admin", '/etriage label "triage: lint"\n/etriage rerun', config="commands:\n")
    assert [o.status for o in outcomes] == ["refused", "refused"]
    [reply] = world.replies()
    assert "labels are not enabled here (no `labels:` section in .github/etriage.yml)" in reply
    assert "triage is not enabled here (no `triage:` section in .github/etriage.yml)" in reply


# ---- devices and ok-to-test ----------------------------------------------------------------------

def test_outside_contributor_pr_needs_ok_to_test_for_devices_until_the_next_push(world):
    device_run = "/etriage run qnn on android-sm8650"
    [refused] = world.comment("maintain", device_run)
    assert refused.status == "refused"
    assert "a maintainer must first say `/etriage ok-to-test` for its current head aaaaaaa" in world.replies()[-1]
    assert world.triage_calls() == []

    [self_approval] = world.comment("outsider", "/etriage ok-to-test")
    assert self_approval.status == "refused"
    assert not world.store.is_approved_for_devices(REPO, PR, HEAD)

    [approved] = world.comment("maintain", "/etriage ok-to-test")
    assert approved.status == "accepted"
    assert world.store.is_approved_for_devices(REPO, PR, HEAD)
    assert world.triage_calls()[-1]["reason"] == "ok-to-test"
    [accepted] = world.comment("maintain", device_run)
    assert accepted.status == "accepted"
    assert world.triage_calls()[-1]["targets"] == ["android-sm8650"]
    [emulator] = world.comment("outsider", "/etriage explain 1")
    assert emulator.status == "answered"

    world.push(NEXT_HEAD, seconds_ago=60)  # the approval ends with the next push
    [again] = world.comment("maintain", device_run)
    assert again.status == "refused"
    assert "current head ccccccc" in world.replies()[-1]
    assert devices_allowed(world.github, world.store, REPO, PR, head_sha=NEXT_HEAD, pr_author="outsider") is False
    assert devices_allowed(world.github, world.store, REPO, PR, head_sha=HEAD, pr_author="outsider") is True


def test_a_pr_from_someone_with_write_access_may_use_devices_directly(world):
    world.double.add_pull(REPO, PR, HEAD, BASE_SHA, author="write")
    [outcome] = world.comment("admin", "/etriage rerun --target android-sm8650")
    assert outcome.status == "accepted"
    assert devices_allowed(world.github, world.store, REPO, PR, head_sha=HEAD, pr_author="write")


def test_devices_are_refused_where_the_config_does_not_enable_them(world):
    [outcome] = world.comment("admin", "/etriage rerun --target android-sm8650", config=None)
    assert outcome.status == "refused"
    assert "device runs are not enabled for it (`devices:` in .github/etriage.yml)" in world.replies()[0]
    [approval] = world.comment("admin", "/etriage ok-to-test", config=None)
    assert approval.status == "accepted" and "device runs are not enabled here" in approval.detail
    # ok-to-test is also what lets an outside contributor's code run at all: a run starts
    assert [call["reason"] for call in world.triage_calls()] == ["ok-to-test"]


def test_github_failure_is_an_internal_error_not_the_users(world):
    world.double.fail("POST", r"/issues/7/labels$", 500, times=5)
    [outcome] = world.comment("admin", '/etriage label "triage: lint"')
    assert outcome.status == "failed"
    [reply] = world.replies()
    assert "could not be run because of an internal error (it was logged); please try again later" in reply


# ---- ok-to-test approves the head the maintainer saw ----------------------------------------------

def test_ok_to_test_approves_the_head_there_when_the_comment_was_written_and_says_which(world):
    [approved] = world.comment("maintain", "/etriage ok-to-test")
    assert approved.status == "accepted" and world.store.is_approved_for_devices(REPO, PR, HEAD)
    assert f"Approved `{HEAD[:12]}` (the head when you wrote this) to run" in world.replies()[-1]
    assert [call["head_sha"] for call in world.triage_calls()] == [HEAD]


def test_a_push_after_the_comment_is_not_approved_by_it(world):
    """The comment was written two minutes ago; the head moved a minute ago (the command waited
    on GitHub in between): the old head is approved, the new one is not, and nothing runs."""
    world.push(NEXT_HEAD, seconds_ago=60)
    [outcome] = world.comment("maintain", "/etriage ok-to-test", written_at=stamp(120))
    assert outcome.status == "accepted"
    assert world.store.is_approved_for_devices(REPO, PR, HEAD)
    assert not world.store.is_approved_for_devices(REPO, PR, NEXT_HEAD)
    assert world.triage_calls() == []  # the approved head is no longer the head: nothing to run
    assert (f"Approved `{HEAD[:12]}`, the head when you wrote this. The pull request has moved to "
            f"`{NEXT_HEAD[:12]}` since, which is not approved") in world.replies()[-1]


@pytest.mark.parametrize("case, written, pushes", [
    ("pushed in the same second as the comment", 0, [(NEXT_HEAD, 0)]),
    ("the first head pushed again after the comment", 30, [(NEXT_HEAD, 60), (HEAD, 10)]),
    ("no time on the comment", None, []),
    ("the comment older than every known head", 7200, []),
])
def test_a_head_that_cannot_be_shown_to_predate_the_comment_is_not_approved(world, case, written, pushes):
    for sha, ago in pushes:
        world.push(sha, seconds_ago=ago)
    current = world.double.pulls[(REPO, PR)].head_sha
    [outcome] = world.comment("maintain", "/etriage ok-to-test", written_at=None if written is None else stamp(written))
    assert not world.store.is_approved_for_devices(REPO, PR, current), case
    assert world.triage_calls() == []
    if outcome.status == "refused":
        assert f"name it: `/etriage ok-to-test {current[:12]}`" in world.replies()[-1]


def test_ok_to_test_naming_the_head_approves_it_and_no_other(world):
    world.push(NEXT_HEAD, seconds_ago=0)  # too recent to be approved by time
    [wrong] = world.comment("maintain", f"/etriage ok-to-test {HEAD[:10]}")
    assert wrong.status == "refused" and "is not this pull request's head (it is now `cccccccccccc`)" in wrong.reply
    assert not world.store.is_approved_for_devices(REPO, PR, HEAD)
    [named] = world.comment("maintain", f"/etriage ok-to-test {NEXT_HEAD[:7].upper()}")
    assert named.status == "accepted" and world.store.is_approved_for_devices(REPO, PR, NEXT_HEAD)
    assert f"Approved `{NEXT_HEAD[:12]}` (the head you named)" in world.replies()[-1]
    assert [call["head_sha"] for call in world.triage_calls()] == [NEXT_HEAD]
