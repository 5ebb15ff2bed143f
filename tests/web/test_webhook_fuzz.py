"""Webhook fuzzing (hypothesis): GitHub's real payloads, mutated in every field the router reads,
plus wrong and missing signatures, truncated and deeply nested JSON, huge strings and unknown
events, posted to the real app on the real Redis. Only 2xx/4xx may come back, never 5xx; nothing
is enqueued for a body that is not signed with the secret; the app still serves afterwards.
1,000 deliveries always; 10,000 with --run-slow."""
from __future__ import annotations

import copy
import json
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import SECRET, sign

EVENTS = ["pull_request", "workflow_run", "workflow_job", "check_suite", "issue_comment", "installation",
          "ping", "check_run", "push", "release", ""]
ACTIONS = ["opened", "reopened", "synchronize", "ready_for_review", "closed", "completed", "created",
           "edited", "deleted", "suspend", "labeled", "requested"]
# Every field bot.routing reads (and the parents it walks through).
ROUTER_FIELDS = [
    "action", "pull_request", "pull_request.number", "pull_request.draft", "pull_request.head",
    "pull_request.head.sha", "pull_request.base", "pull_request.base.ref", "repository",
    "repository.full_name", "installation", "installation.id", "installation.account",
    "installation.account.login", "workflow_run", "workflow_run.id", "workflow_run.conclusion",
    "workflow_run.head_sha", "workflow_job", "workflow_job.id", "workflow_job.run_id",
    "workflow_job.conclusion", "workflow_job.head_sha", "check_suite", "check_suite.app",
    "check_suite.app.slug", "check_suite.id", "check_suite.conclusion", "check_suite.head_sha", "issue",
    "issue.pull_request", "issue.number", "comment", "comment.user", "comment.user.login",
    "comment.user.type", "comment.body", "comment.id", "changes", "changes.body", "changes.body.from",
    "hook_id", "zen",
]
FIXTURES = ["pull_request/opened.json", "pull_request/synchronize.json", "pull_request/closed.json",
            "workflow_run/completed.json", "workflow_job/completed.json", "check_suite/completed.json",
            "issue_comment/created.json", "issue_comment/edited.json", "installation/created.json",
            "ping/ping.json"]
COMMANDS = ["/etriage rerun", "/etriage run probes on host", "@etriage help", "/etriage ok-to-test",
            "/etriage label x", "```\n/etriage rerun\n```", "/etriage ignore 1 --reason \"x\""]

scalars = (st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
           | st.floats(allow_nan=False) | st.text(max_size=40) | st.sampled_from(COMMANDS + ACTIONS))
# What an HTTP header can carry at all (no CR/LF; latin-1 on the wire).
header_text = st.text(st.characters(min_codepoint=32, max_codepoint=255, blacklist_characters="\x7f"), max_size=40)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)


def set_path(payload: dict, dotted: str, value, delete: bool) -> None:
    *parents, key = dotted.split(".")
    target = payload
    for parent in parents:
        if not isinstance(target.get(parent), dict):
            target[parent] = {}
        target = target[parent]
    if delete:
        target.pop(key, None)
    else:
        target[key] = value


@st.composite
def deliveries(draw, payloads: dict):
    """(event, body bytes, headers, signed with the secret?)"""
    name = draw(st.sampled_from(FIXTURES))
    event = draw(st.sampled_from([name.split("/")[0]] * 4 + EVENTS) | header_text)
    payload = copy.deepcopy(payloads[name])
    for _ in range(draw(st.integers(0, 4))):
        set_path(payload, draw(st.sampled_from(ROUTER_FIELDS)), draw(json_values), draw(st.booleans()))
    body = json.dumps(payload).encode()
    shape = draw(st.sampled_from(["as is"] * 6 + ["truncated", "nested", "huge string", "not json",
                                                  "not an object"]))
    if shape == "truncated":
        body = body[:draw(st.integers(0, max(0, len(body) - 1)))]
    elif shape == "nested":
        depth = draw(st.integers(1, 200_000))
        body = (b'{"a":' * depth + b"1" + b"}" * depth) if draw(st.booleans()) else b"[" * depth + b"]" * depth
    elif shape == "huge string":
        set_path(payload, draw(st.sampled_from(ROUTER_FIELDS)), "x" * draw(st.integers(10_000, 2_000_000)), False)
        body = json.dumps(payload).encode()
    elif shape == "not json":
        body = draw(st.binary(max_size=200))
    elif shape == "not an object":
        body = json.dumps(draw(json_values)).encode()
    signing = draw(st.sampled_from(["secret"] * 6 + ["missing", "other secret", "sha1", "garbage", "empty"]))
    signature = {"secret": sign(body), "missing": None, "other secret": sign(body, "not-the-secret"),
                 "sha1": "sha1=" + "0" * 40, "empty": "",
                 "garbage": "sha256=" + draw(header_text)}[signing]
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": draw(st.sampled_from([str(uuid.uuid4())] * 5 + [
        "", "../../etc", "x" * 200])), "Content-Type": "application/json"}
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    return event, body, headers, signing == "secret"


def fuzz(app, dispatcher, payloads, examples: int) -> dict[int, int]:
    client = app.test_client()
    seen: dict[int, int] = {}

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data):
        event, body, headers, signed = data.draw(deliveries(payloads))
        before = len(dispatcher.calls)
        answer = client.post("/webhook", data=body, headers=headers)
        seen[answer.status_code] = seen.get(answer.status_code, 0) + 1
        assert answer.status_code < 500, (answer.status_code, answer.get_data()[:300], headers,
                                          body[:200], len(body))
        assert answer.is_json and "status" in answer.get_json()
        if not signed:
            assert answer.status_code == 401 and len(dispatcher.calls) == before
    one()
    return seen


@pytest.fixture(scope="module")
def payloads(webhook_fixtures) -> dict:
    return {name: json.loads((webhook_fixtures / name).read_bytes()) for name in FIXTURES}


def still_serves(deliver) -> None:
    answer = deliver.fixture("pull_request/opened.json")
    assert answer.status_code == 202 and answer.get_json()["status"] == "queued"


def test_a_thousand_fuzzed_deliveries_get_no_5xx(app, deliver, dispatcher, payloads):
    seen = fuzz(app, dispatcher, payloads, 1000)
    assert {401, 202} <= set(seen), seen  # the fuzzer reached both the door and the router
    still_serves(deliver)


@pytest.mark.slow
def test_ten_thousand_fuzzed_deliveries_get_no_5xx(app, deliver, dispatcher, payloads):
    seen = fuzz(app, dispatcher, payloads, 10_000)
    assert {401, 400, 202} <= set(seen), seen
    still_serves(deliver)
