"""POST /webhook with GitHub's real example payloads, signed, against the real app and Redis."""
from __future__ import annotations

import json
import logging
import uuid

import pytest
import redis

from bot.app import create_app

from .conftest import REPO, SECRET, RecordingDispatcher, sign

PR_HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
JOB_HEAD = "3484a3fb816e0859fd6e1cea078d76385ff50625"


def on_pr(payload: dict, body: str = "/etriage rerun") -> dict:
    """The issue_comment examples are on an issue; GitHub marks PR comments with issue.pull_request."""
    payload["issue"]["pull_request"] = {"url": f"https://api.github.com/repos/{REPO}/pulls/1"}
    payload["comment"]["body"] = body
    return payload


def with_(path: str, value):
    def change(payload):
        *parents, key = path.split(".")
        target = payload
        for parent in parents:
            target = target[parent]
        target[key] = value
        return payload
    return change


# (fixture file, change to the payload or None to send the bytes unchanged,
#  expected HTTP status, expected status field, expected (task, arguments subset) or None)
EVENTS = [
    ("pull_request/opened.json", None, 202, "queued",
     ("triage_pr", dict(repo=REPO, pr=2, head_sha=PR_HEAD, base_ref="master", installation_id=1,
                        reason="pull_request.opened", targets=None, suites=None))),
    ("pull_request/synchronize.json", None, 202, "queued",
     ("triage_pr", dict(pr=2, head_sha=PR_HEAD, reason="pull_request.synchronize"))),
    ("pull_request/reopened.json", None, 202, "queued",
     ("triage_pr", dict(pr=2, reason="pull_request.reopened"))),
    ("pull_request/opened.json", with_("pull_request.draft", True), 202, "ignored", None),
    ("pull_request/opened.json", lambda p: with_("action", "ready_for_review")(p), 202, "queued",
     ("triage_pr", dict(pr=2, reason="pull_request.ready_for_review"))),
    ("pull_request/labeled.json", None, 202, "ignored", None),
    ("pull_request/closed.json", None, 202, "queued",
     ("pr_closed", dict(repo=REPO, pr=2, installation_id=1))),
    ("issue_comment/created.json", None, 202, "ignored", None),  # on an issue, not a PR
    ("issue_comment/created.json", on_pr, 202, "queued",
     ("comment", dict(repo=REPO, pr=1, comment_id=492700400, installation_id=None,
                      author="Codertocat", author_type="User", body="/etriage rerun",
                      previous_body=None, action="created"))),
    ("issue_comment/created.with-installation.json", on_pr, 202, "queued",
     ("comment", dict(installation_id=1))),
    ("issue_comment/created.json", lambda p: on_pr(p, "looks good to me"), 202, "ignored", None),
    ("issue_comment/created.json", lambda p: with_("comment.user.type", "Bot")(on_pr(p)), 202, "ignored", None),
    ("issue_comment/created.json", lambda p: with_("comment.user.login", "etriage[bot]")(on_pr(p)),
     202, "ignored", None),
    ("issue_comment/created.json", lambda p: with_("comment.user.login", "dependabot[bot]")(on_pr(p)),
     202, "ignored", None),
    ("issue_comment/edited.json", lambda p: with_("changes.body.from", "/etriage rerun")(on_pr(p)),
     202, "ignored", None),  # the edit added no command
    ("issue_comment/edited.json",
     lambda p: with_("changes.body.from", "/etriage rerun")(on_pr(p, "/etriage rerun\n/etriage help")),
     202, "queued", ("comment", dict(body="/etriage rerun\n/etriage help",
                                     previous_body="/etriage rerun", action="edited"))),
    ("issue_comment/created.json", lambda p: with_("action", "deleted")(on_pr(p)), 202, "ignored", None),
    ("check_suite/completed.json", None, 202, "ignored", None),  # success: nothing to pull
    ("check_suite/completed.json", with_("check_suite.conclusion", "failure"), 202, "queued",
     ("ci_completed", dict(repo=REPO, head_sha=PR_HEAD, installation_id=None, run_id=None, job_id=None,
                           check_suite_id=118578147))),
    ("check_suite/completed.json",
     lambda p: with_("check_suite.app.slug", "github-actions")(with_("check_suite.conclusion", "failure")(p)),
     202, "ignored", None),
    ("check_suite/completed.json",
     lambda p: with_("check_suite.app.slug", "etriage")(with_("check_suite.conclusion", "failure")(p)),
     202, "ignored", None),
    ("workflow_run/completed.json", None, 202, "ignored", None),
    ("workflow_run/completed.with-pull-requests.json", with_("workflow_run.conclusion", "timed_out"),
     202, "queued", ("ci_completed", dict(repo="octo-org/octo-repo", head_sha=JOB_HEAD, run_id=289782451,
                                          job_id=None, check_suite_id=None))),
    ("workflow_run/completed.json", with_("workflow_run.conclusion", "cancelled"), 202, "queued",
     ("ci_completed", dict(run_id=289782451))),
    ("workflow_job/completed.json", None, 202, "queued",
     ("ci_completed", dict(repo=REPO,
                           head_sha=JOB_HEAD, run_id=2202229078, job_id=289782451))),
    ("workflow_job/completed.success.json", None, 202, "ignored", None),
    ("check_run/completed.json", None, 202, "ignored", None),
    ("check_run/rerequested.json", None, 202, "ignored", None),
    ("installation/created.json", None, 202, "queued",
     ("installation", dict(installation_id=957387, account="Codertocat", action="created"))),
    ("ping/ping.json", None, 200, "pong", None),
    ("ping/with-app_id.json", None, 200, "pong", None),
]


@pytest.mark.parametrize("name, change, http_status, status, expected", EVENTS,
                         ids=[f"{e[0]}{'+' if e[1] else ''}-{e[3]}" for e in EVENTS])
def test_each_event_is_routed_to_its_task(deliver, dispatcher, name, change, http_status, status, expected):
    if change is None:
        response = deliver.fixture(name)
    else:
        event = name.split("/")[0]
        response = deliver.json(event, change(deliver.payload(name)))
    assert response.status_code == http_status, response.json
    assert response.json["status"] == status
    assert response.json["detail"]
    if expected is None:
        assert dispatcher.calls == []
    else:
        task, subset = expected
        assert [call[0] for call in dispatcher.calls] == [task]
        arguments = dispatcher.calls[0][1]
        assert {key: arguments[key] for key in subset} == subset


def test_unknown_event_is_accepted_and_ignored_with_the_reason(deliver, dispatcher):
    response = deliver.json("star", {"action": "created", "repository": {"full_name": REPO}})
    assert response.status_code == 202
    assert response.json == {"status": "ignored", "detail": "event 'star' is not handled"}
    assert dispatcher.calls == []


def test_success_completion_says_why_it_is_not_triaged(deliver):
    response = deliver.fixture("workflow_job/completed.success.json")
    assert response.json["detail"] == "workflow_job concluded success: no failure to triage"


def test_draft_says_when_triage_will_start(deliver):
    payload = with_("pull_request.draft", True)(deliver.payload("pull_request/opened.json"))
    assert "ready for review" in deliver.json("pull_request", payload).json["detail"]


# ---- security ----------------------------------------------------------------------------------

@pytest.mark.parametrize("signature, why", [
    (None, "missing"),
    ("", "missing"),
    ("sha256=" + "0" * 64, "does not match"),
    ("sha1=" + "0" * 40, "does not match"),
    ("sha256=", "does not match"),
    ("garbage", "does not match"),
    ("sha256=é", "does not match"),
])
def test_missing_or_wrong_signature_is_401(deliver, webhook_fixtures, dispatcher, signature, why):
    body = (webhook_fixtures / "pull_request/opened.json").read_bytes()
    if signature is None:  # the header is left out
        response = deliver.post(body, event="pull_request", headers={"X-Hub-Signature-256": None})
    else:
        response = deliver.post(body, event="pull_request", signature=signature)
    assert response.status_code == 401
    assert why in response.json["detail"]
    assert dispatcher.calls == []


def test_signature_with_another_secret_is_401(deliver):
    assert deliver.fixture("pull_request/opened.json", secret="not-the-secret").status_code == 401


def test_tampered_body_is_401(deliver, webhook_fixtures):
    body = (webhook_fixtures / "pull_request/opened.json").read_bytes()
    signature = sign(body)
    response = deliver.post(body.replace(b'"number": 2', b'"number": 3'), event="pull_request",
                            signature=signature)
    assert response.status_code == 401


def test_signature_is_checked_before_the_json_is_parsed(deliver):
    response = deliver.post(b"{not json", event="pull_request", signature="sha256=" + "0" * 64)
    assert response.status_code == 401


def test_rotated_secrets_are_all_accepted(redis_url, dispatcher, webhook_fixtures):
    from .conftest import Deliverer

    app = create_app({"webhook_secrets": "new-secret,old-secret", "redis_url": redis_url},
                     dispatcher=dispatcher)
    deliver = Deliverer(app.test_client(), webhook_fixtures)
    assert deliver.fixture("pull_request/opened.json", secret="new-secret").status_code == 202
    assert deliver.fixture("pull_request/opened.json", secret="old-secret").status_code == 202
    assert deliver.fixture("pull_request/opened.json", secret=SECRET).status_code == 401
    assert len(dispatcher.calls) == 2


def test_secrets_and_signatures_never_reach_the_log(deliver, caplog, webhook_fixtures):
    caplog.set_level(logging.DEBUG)
    body = (webhook_fixtures / "pull_request/opened.json").read_bytes()
    deliver.post(body, event="pull_request")
    deliver.post(body, event="pull_request", secret="wrong-secret")
    deliver.post(body, event="star")
    assert caplog.records, "the webhook logs what it did"
    assert SECRET not in caplog.text and "wrong-secret" not in caplog.text
    assert sign(body) not in caplog.text and sign(body)[7:] not in caplog.text


# ---- malformed requests ------------------------------------------------------------------------

@pytest.mark.parametrize("body, detail", [
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe\x00garbage", "not valid JSON"),
    (b"[1, 2, 3]", "not an object"),
    (b'"text"', "not an object"),
    (json.dumps({"action": "opened", "repository": {"full_name": REPO}}).encode(), "no object pull_request"),
    (json.dumps({"action": "opened", "pull_request": {"number": 2, "head": {}}}).encode(), "no "),
    (json.dumps({"action": "opened", "pull_request": "2", "repository": {}}).encode(), "no object pull_request"),
])
def test_malformed_payload_is_400(deliver, dispatcher, body, detail):
    response = deliver.post(body, event="pull_request")
    assert response.status_code == 400
    assert response.json["status"] == "bad_request"
    assert detail in response.json["detail"]
    assert dispatcher.calls == []


@pytest.mark.parametrize("header, value", [
    ("X-GitHub-Event", None), ("X-GitHub-Delivery", ""), ("X-GitHub-Delivery", "a b"),
    ("X-GitHub-Delivery", "x" * 101), ("X-GitHub-Delivery", "../../etc"),
])
def test_missing_event_or_delivery_header_is_400(deliver, header, value):
    response = deliver.fixture("pull_request/opened.json", headers={header: value})
    assert response.status_code == 400
    assert header in response.json["detail"]


def test_body_over_the_limit_is_413_before_anything_else(redis_url, dispatcher):
    app = create_app({"webhook_secrets": (SECRET,), "redis_url": redis_url, "max_body_bytes": 1000},
                     dispatcher=dispatcher)
    body = json.dumps({"action": "opened", "padding": "x" * 2000}).encode()
    client = app.test_client()
    for signature in (sign(body), "sha256=wrong"):
        response = client.post("/webhook", data=body, headers={
            "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": signature})
        assert response.status_code == 413
        assert response.json["status"] == "too_large"
    small = json.dumps({"action": "labeled"}).encode()
    response = client.post("/webhook", data=small, headers={
        "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(small)})
    assert response.status_code == 202


def test_other_methods_and_paths_answer_json(app):
    client = app.test_client()
    assert client.get("/webhook").status_code == 405
    assert client.get("/webhook").json["status"] == "error"
    assert client.get("/nowhere").status_code == 404
    assert client.get("/nowhere").json["status"] == "error"


# ---- each delivery once ------------------------------------------------------------------------

def test_redelivery_is_a_duplicate_and_runs_nothing_twice(deliver, dispatcher):
    delivery = str(uuid.uuid4())
    first = deliver.fixture("pull_request/opened.json", delivery=delivery)
    again = deliver.fixture("pull_request/opened.json", delivery=delivery)
    assert first.status_code == 202 and first.json["status"] == "queued"
    assert again.status_code == 200
    assert again.json["status"] == "duplicate"
    assert len(dispatcher.calls) == 1


def test_delivery_is_remembered_for_the_configured_time(deliver, redis_url):
    delivery = str(uuid.uuid4())
    deliver.fixture("pull_request/opened.json", delivery=delivery)
    client = redis.Redis.from_url(redis_url)
    assert client.get(f"etriage:delivery:{delivery}") == b"done"
    assert 7 * 24 * 3600 - 60 < client.ttl(f"etriage:delivery:{delivery}") <= 7 * 24 * 3600


def test_delivery_being_enqueued_elsewhere_is_409(deliver, dispatcher, redis_url):
    delivery = str(uuid.uuid4())
    redis.Redis.from_url(redis_url).set(f"etriage:delivery:{delivery}", "pending", ex=60)
    response = deliver.fixture("pull_request/opened.json", delivery=delivery)
    assert response.status_code == 409
    assert response.json["status"] == "in_progress"
    assert dispatcher.calls == []


def test_enqueue_failure_is_503_and_the_redelivery_is_processed(deliver, dispatcher, redis_url):
    delivery = str(uuid.uuid4())
    dispatcher.fail_next = 1
    failed = deliver.fixture("pull_request/opened.json", delivery=delivery)
    assert failed.status_code == 503
    assert failed.json["status"] == "unavailable"
    assert "redeliver" in failed.json["detail"] and "broker unreachable" in failed.json["detail"]
    assert redis.Redis.from_url(redis_url).exists(f"etriage:delivery:{delivery}") == 0
    retried = deliver.fixture("pull_request/opened.json", delivery=delivery)
    assert retried.status_code == 202
    assert [call[0] for call in dispatcher.calls] == ["triage_pr"]


def test_a_bug_in_the_dispatcher_is_500_and_releases_the_delivery(redis_url, webhook_fixtures):
    from .conftest import Deliverer

    class Broken(RecordingDispatcher):
        def pr_closed(self, repo, pr, installation_id):
            raise KeyError("a bug")

    app = create_app({"webhook_secrets": (SECRET,), "redis_url": redis_url}, dispatcher=Broken())
    deliver = Deliverer(app.test_client(), webhook_fixtures)
    delivery = str(uuid.uuid4())
    assert deliver.fixture("pull_request/closed.json", delivery=delivery).status_code == 500
    assert redis.Redis.from_url(redis_url).exists(f"etriage:delivery:{delivery}") == 0


def test_redis_down_is_503_with_nothing_enqueued(dispatcher, webhook_fixtures, unused_redis_url):
    from .conftest import Deliverer

    app = create_app({"webhook_secrets": (SECRET,), "redis_url": unused_redis_url}, dispatcher=dispatcher)
    response = Deliverer(app.test_client(), webhook_fixtures).fixture("pull_request/opened.json")
    assert response.status_code == 503
    assert "Redis is unavailable" in response.json["detail"]
    assert dispatcher.calls == []


def test_ignored_and_ping_deliveries_need_no_redis(dispatcher, webhook_fixtures, unused_redis_url):
    from .conftest import Deliverer

    app = create_app({"webhook_secrets": (SECRET,), "redis_url": unused_redis_url}, dispatcher=dispatcher)
    deliver = Deliverer(app.test_client(), webhook_fixtures)
    assert deliver.fixture("ping/ping.json").status_code == 200
    assert deliver.fixture("pull_request/labeled.json").status_code == 202


# ---- health ------------------------------------------------------------------------------------

def test_healthz_is_200_when_redis_answers(app):
    response = app.test_client().get("/healthz")
    assert response.status_code == 200
    assert response.json["status"] == "ok"


def test_healthz_is_503_when_redis_does_not(dispatcher, unused_redis_url):
    app = create_app({"webhook_secrets": (SECRET,), "redis_url": unused_redis_url}, dispatcher=dispatcher)
    response = app.test_client().get("/healthz")
    assert response.status_code == 503
    assert response.json["status"] == "unavailable"
    assert response.json["detail"].startswith("redis: ")

