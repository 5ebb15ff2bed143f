"""A push to a branch pull requests target queues a build of that commit's environment on the
`build` queue (bot/routing.py), so a PR opened on it starts warm; any other push is ignored with
the reason. The payload is GitHub's example push (fixtures/README.md)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import REPO

PUSH = Path(__file__).resolve().parent / "fixtures" / "push.with-installation.json"
SHA = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"


def push(ref: str, after: str = SHA, deleted: bool = False) -> dict:
    payload = json.loads(PUSH.read_text())
    payload.update(ref=ref, after=after, deleted=deleted)
    return payload


@pytest.mark.parametrize("ref", ["refs/heads/master", "refs/heads/release/1.5"])
def test_a_push_to_a_branch_prs_target_queues_its_environment(deliver, dispatcher, ref):
    answer = deliver.json("push", push(ref))
    assert answer.status_code == 202 and answer.json["status"] == "queued", answer.json
    assert dispatcher.calls == [("warm_environment", {"repo": REPO, "branch": ref[len("refs/heads/"):],
                                                      "sha": SHA, "installation_id": 1})]


@pytest.mark.parametrize("payload, why", [
    (push("refs/tags/simple-tag", "0" * 40, True), "not a branch"),  # the example itself: a tag deleted
    (push("refs/heads/feature/x"), "pull requests target master, release/*"),
    (push("refs/heads/master", "0" * 40, True), "branch master deleted"),
])
def test_other_pushes_are_ignored_with_the_reason(deliver, dispatcher, payload, why):
    answer = deliver.json("push", payload)
    assert answer.status_code == 202 and answer.json["status"] == "ignored"
    assert why in answer.json["detail"]
    assert dispatcher.calls == []


def test_the_publisher_queues_it_on_the_build_queue(redis_url):
    import redis as redis_module

    from bot.publisher import Publisher, publishing_app

    client = redis_module.Redis.from_url(redis_url)
    client.delete("build")
    Publisher(publishing_app(redis_url), redis_url).warm_environment(REPO, "master", SHA, 1)
    [raw] = client.lrange("build", 0, -1)
    message = json.loads(raw)
    assert message["headers"]["task"] == "etriage.warm_environment"
    client.delete("build")
