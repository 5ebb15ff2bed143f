"""GitHubClient against the GitHub double over real HTTP: auth, the summary comment, check
runs, labels, logs, rate limits and retries, and tokens kept out of logs."""
from __future__ import annotations

import logging
import time

import pytest

from bot.github_client import (SUMMARY_MARKER, Annotation, GitHubClient, GitHubConfig,
                               GitHubError, GitHubUnavailable, RedactTokensFilter, job_line_url, redact)
from tests.service.github_double import GitHubDouble

REPO = "o/r"
TOKEN = "ghp_0123456789abcdefghijABCDEFGHIJ012345"


@pytest.fixture
def double():
    with GitHubDouble() as github:
        github.add_pull(REPO, 7, "a" * 40, "b" * 40)
        yield github


def client(double, **overrides) -> GitHubClient:
    config = GitHubConfig(base_url=double.url, token=TOKEN, seconds_between_writes=None,
                          backoff_seconds=0.01, **overrides)
    return GitHubClient(config, 1)


def test_summary_is_created_once_then_edited_only_when_it_changes(double):
    gh = client(double)
    foreign = double.add_user_comment(REPO, 7, "someone", f"quoting {SUMMARY_MARKER}")
    first, changed = gh.upsert_summary(REPO, 7, "one")
    assert changed and first != foreign
    assert gh.upsert_summary(REPO, 7, "one") == (first, False)
    assert gh.upsert_summary(REPO, 7, "two") == (first, True)
    assert len(double.requests_to("POST", r"/comments$")) == 1
    assert len(double.requests_to("PATCH", r"/comments/")) == 1
    assert double.comments_on(REPO, 7)[0]["body"] == f"quoting {SUMMARY_MARKER}"  # untouched


def test_summary_is_found_on_a_later_page(double):
    for n in range(35):
        double.add_user_comment(REPO, 7, "someone", f"comment {n}")
    gh = client(double)
    first, _ = gh.upsert_summary(REPO, 7, "body")
    assert gh.upsert_summary(REPO, 7, "body") == (first, False)


def test_annotations_go_in_batches_of_fifty(double):
    gh = client(double)
    run_id = gh.create_check_run(REPO, "a" * 40, status="in_progress", title="t", summary="s")
    gh.update_check_run(REPO, run_id, conclusion="failure", title="T", summary="S",
                        annotations=[Annotation("x.py", i + 1, f"m{i}") for i in range(120)])
    patches = [r.body for r in double.requests_to("PATCH", r"/check-runs/")]
    assert [len(p["output"].get("annotations", [])) for p in patches] == [50, 50, 20]
    assert ["conclusion" in p for p in patches] == [False, False, True]
    [run] = double.check_runs_for(REPO)
    assert len(run["annotations"]) == 120 and run["conclusion"] == "failure"


@pytest.fixture(scope="module")
def app_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode()


def app_client(double, key) -> GitHubClient:
    return GitHubClient(GitHubConfig(base_url=double.url, app_id="123", private_key=key,
                                     seconds_between_writes=None), 42)


def test_app_authentication_exchanges_a_jwt_for_an_installation_token(double, app_key):
    gh = app_client(double, app_key)
    assert gh.pull(REPO, 7)["head_sha"] == "a" * 40
    assert gh.pull(REPO, 7)["head_sha"] == "a" * 40
    assert [r.path for r in double.requests] == ["/app/installations/42/access_tokens",
                                                 "/repos/o/r/pulls/7", "/repos/o/r/pulls/7"]
    assert double.tokens_issued == 1  # an hour-long token is reused


def test_installation_token_is_renewed_before_it_expires(double, app_key):
    """Tokens that expire in 21 s: the client renews one that has under 20 s left (PyGithub's
    margin) before using it, and the double refuses any request with an expired token."""
    double.token_lifetime = 21
    gh = app_client(double, app_key)
    gh.pull(REPO, 7)
    [first] = [r.token for r in double.requests_to("GET", r"/pulls/7$")]
    renew_from = double.token_expiry[first] - 20
    while time.time() <= renew_from:  # a clock condition: the token enters its last 20 s
        time.sleep(0.05)
    gh.pull(REPO, 7)
    gh.labels(REPO, 7)
    used = [r.token for r in double.requests if not r.path.startswith("/app/")]
    assert used[0] == first and first not in used[1:] and None not in used
    assert double.tokens_issued >= 2
    assert [r.status for r in double.requests if r.status == 401] == []


def test_double_refuses_an_expired_installation_token(double, app_key):
    """What makes the renewal test above able to fail: an expired token gets 401."""
    double.token_lifetime = 0  # expired when issued (GitHub never does this; clock skew could)
    with pytest.raises(GitHubError) as refused:
        app_client(double, app_key).pull(REPO, 7)
    assert refused.value.status == 401


def test_a_revoked_installation_token_is_replaced_once(double, app_key):
    """A token GitHub revoked before its expiry: the 401 drops it, a fresh one is fetched and
    the request is made once more; later requests keep using the fresh token."""
    gh = app_client(double, app_key)
    gh.pull(REPO, 7)
    [first] = double.revoke_tokens()
    assert gh.pull(REPO, 7)["number"] == 7
    gh.labels(REPO, 7)
    calls = [(r.path, r.status, r.token) for r in double.requests]
    fresh = calls[-1][2]
    assert fresh not in (first, None)
    assert calls == [("/app/installations/42/access_tokens", 201, None),
                     ("/repos/o/r/pulls/7", 200, first),
                     ("/repos/o/r/pulls/7", 401, first),
                     ("/app/installations/42/access_tokens", 201, None),
                     ("/repos/o/r/pulls/7", 200, fresh),
                     ("/repos/o/r/issues/7/labels", 200, fresh)]


def test_a_second_401_is_a_clear_error(double, app_key):
    gh = app_client(double, app_key)
    gh.pull(REPO, 7)
    double.revoke_tokens()
    double.token_lifetime = 0  # the replacement is refused too
    with pytest.raises(GitHubError) as refused:
        gh.pull(REPO, 7)
    assert refused.value.status == 401 and not isinstance(refused.value, GitHubUnavailable)
    assert "refused a freshly fetched installation token" in str(refused.value)
    assert [r.status for r in double.requests_to("GET", r"/pulls/7$")] == [200, 401, 401]
    assert double.tokens_issued == 2  # one replacement, not a loop


def test_a_401_with_a_personal_token_is_not_retried(double):
    double.fail("GET", r"/pulls/7$", 401, message="Bad credentials")
    with pytest.raises(GitHubError) as refused:
        client(double).pull(REPO, 7)
    assert refused.value.status == 401 and "Bad credentials" in str(refused.value)
    assert len(double.requests_to("GET", r"/pulls/7$")) == 1


def test_a_reply_github_applied_but_answered_502_is_not_posted_twice(double):
    fault_route = r"/issues/7/comments$"
    gh = client(double)
    double.fail("POST", fault_route, 502, applied=True)
    reply_id = gh.reply(REPO, 7, "@visitor `rerun` needs write access", in_reply_to=555)
    again = gh.reply(REPO, 7, "@visitor `rerun` needs write access", in_reply_to=555)
    mine = [c for c in double.comments_on(REPO, 7) if c["user"] == double.bot_login]
    assert [c["id"] for c in mine] == [reply_id] and again == reply_id
    assert mine[0]["body"].startswith("@visitor `rerun` needs write access")
    assert [r.status for r in double.requests_to("POST", fault_route)] == [502]
    other = gh.reply(REPO, 7, "another answer", in_reply_to=556)  # another comment: posted
    assert other != reply_id


def test_a_summary_github_applied_but_answered_502_is_not_posted_twice(double):
    gh = client(double)
    double.fail("POST", r"/issues/7/comments$", 502, applied=True)
    comment_id, _ = gh.upsert_summary(REPO, 7, "body")
    assert [c["id"] for c in double.comments_on(REPO, 7)] == [comment_id]


def test_5xx_is_retried_and_then_given_up(double):
    gh = client(double, attempts=3)
    double.fail("GET", r"/pulls/7$", 502, times=2)
    assert gh.pull(REPO, 7)["number"] == 7
    double.fail("GET", r"/pulls/7$", 503, times=5)
    with pytest.raises(GitHubUnavailable):
        gh.pull(REPO, 7)
    assert len(double.requests_to("GET", r"/pulls/7$")) == 6


def test_a_long_rate_limit_goes_back_to_the_queue(double):
    gh = client(double, max_inline_wait=2)
    double.fail_rate_limited("GET", r"/pulls/7$", reset_in=120)
    with pytest.raises(GitHubUnavailable) as caught:
        gh.pull(REPO, 7)
    assert caught.value.retry_after > 60
    assert len(double.requests_to("GET", r"/pulls/7$")) == 1


def test_labels_permission_logs_and_missing_files(double):
    gh = client(double)
    gh.add_labels(REPO, 7, ["triage: multi-method"])
    gh.remove_label(REPO, 7, "triage: multi-method")
    gh.remove_label(REPO, 7, "triage: multi-method")  # already gone: no error
    assert double.labels_on(REPO, 7) == []
    double.set_permission(REPO, "alice", "maintain")
    assert gh.permission(REPO, "alice") == "maintain"
    double.add_workflow_run(REPO, 5, "a" * 40, [{"id": 9, "name": "j", "conclusion": "failure",
                                                  "log": "line\nError: boom\n"}])
    assert gh.job_log(REPO, 9) == "line\nError: boom\n"
    [log_request] = double.requests_to("GET", r"/_logs/9")
    assert log_request.query["urlSigningMethod"] == "HMACV1"
    assert gh.read_file(REPO, ".github/etriage.yml") is None


@pytest.mark.parametrize("line", [
    f"token is {TOKEN}",
    "Authorization: token ghs_16C7e42F292c6912E7710c838347Ae178B4a",
    "jwt eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiIxMjMifQ.c2lnbmF0dXJlc2lnbmF0dXJl",
])
def test_tokens_are_redacted_from_logs(line, caplog):
    assert "***" in redact(line)
    logger = logging.getLogger("etriage.test.redaction")
    handler_filter = RedactTokensFilter()
    caplog.handler.addFilter(handler_filter)
    logger.warning("sending %s", line)
    caplog.handler.removeFilter(handler_filter)
    assert "***" in caplog.text and "16C7e42F" not in caplog.text and TOKEN not in caplog.text


# ---- GitHub Actions: the head's failed runs re-run, a log line's address ----------------------
def test_failed_runs_of_a_head_are_rerun_with_githubs_rerun_failed_jobs(double):
    gh = client(double)
    double.add_workflow_run(REPO, 1, "a" * 40, [{"id": 11, "name": "t", "conclusion": "failure", "log": "x"}])
    double.add_workflow_run(REPO, 2, "a" * 40, [{"id": 12, "name": "t", "conclusion": "success", "log": ""}],
                            conclusion="success")
    double.add_workflow_run(REPO, 3, "c" * 40, [{"id": 13, "name": "t", "conclusion": "failure", "log": "x"}])
    assert [r["id"] for r in gh.failed_workflow_runs(REPO, "a" * 40)] == [1]
    assert double.requests_to("GET", r"/actions/runs$")[-1].query["head_sha"] == "a" * 40
    gh.rerun_failed_jobs(REPO, 1)
    [post] = double.requests_to("POST", r"/rerun-failed-jobs$")
    assert (post.path, post.status) == (f"/repos/{REPO}/actions/runs/1/rerun-failed-jobs", 201)
    assert gh.failed_workflow_runs(REPO, "a" * 40) == []  # queued again: not a failed run any more
    with pytest.raises(GitHubError) as running:
        gh.rerun_failed_jobs(REPO, 1)
    assert running.value.status == 403 and "already running" in str(running.value)
    with pytest.raises(GitHubError) as missing:
        gh.rerun_failed_jobs(REPO, 99)
    assert missing.value.status == 404


STEPS = [{"number": 1, "name": "Set up job", "conclusion": "success",
          "started_at": "2020-01-20T09:42:40.000-08:00", "completed_at": "2020-01-20T09:42:41.000-08:00"},
         {"number": 2, "name": "Checkout", "conclusion": "success",
          "started_at": "2020-01-20T09:42:41.000-08:00", "completed_at": "2020-01-20T09:42:41.000-08:00"},
         {"number": 3, "name": "Test", "conclusion": "failure",
          "started_at": "2020-01-20T09:42:41.000-08:00", "completed_at": "2020-01-20T09:42:59.000-08:00"}]
ACTIONS_LOG = ("2020-01-20T17:42:40.1234567Z Current runner version: '2.321.0'\n"
               "2020-01-20T17:42:40.2234567Z Runner name: 'linux.2xlarge'\n"
               "2020-01-20T17:42:41.0000000Z ##[group]Run pytest\n"
               "2020-01-20T17:42:58.5000000Z FAILED test_x.py::test_y - AssertionError\n")
JOB = {"id": 399444496, "run_id": 29679449, "steps": STEPS,
       "html_url": "https://github.com/octo-org/octo-repo/runs/29679449/jobs/399444496"}
JOB_PAGE = "https://github.com/o/r/actions/runs/29679449/job/399444496"


@pytest.mark.parametrize("job, log, line, url", [
    (JOB, ACTIONS_LOG, 2, f"{JOB_PAGE}#step:1:2"),
    # steps 2 and 3 started in the same second: the failed one wrote it, from its first line
    (JOB, ACTIONS_LOG, 4, f"{JOB_PAGE}#step:3:2"),
    (JOB, "no timestamps\nhere\n", 2, JOB_PAGE),  # nothing to place the line by: the job's page
    (dict(JOB, steps=[]), ACTIONS_LOG, 4, JOB_PAGE),
    (JOB, ACTIONS_LOG, 99, JOB_PAGE),
    (dict(JOB, html_url="https://ghe.corp.example/octo-org/octo-repo/runs/1/jobs/2"), ACTIONS_LOG, 2,
     "https://ghe.corp.example/o/r/actions/runs/29679449/job/399444496#step:1:2"),  # Enterprise: its host
    (dict(JOB, html_url="javascript:alert(1)//"), ACTIONS_LOG, 2, f"{JOB_PAGE}#step:1:2"),
    (dict(JOB, id="399444496"), ACTIONS_LOG, 2, ""),  # no ids: no address
])
def test_a_log_line_is_addressed_as_githubs_log_viewer_anchors_it(job, log, line, url):
    assert job_line_url("o/r", job, log, line) == url
