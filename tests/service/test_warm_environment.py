"""Warm before the PR arrives, through the real service: a signed `push` to the default branch
reaches the webhook, `warm_environment` runs on a real worker's `build` queue, and the tip's
environment is made from the worker's own fetch of the tip and recorded for the dashboard (ready,
with its time and disk); a push of a repository the worker cannot fetch is recorded as skipped,
with the reason."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bot.queues import ENVIRONMENTS_KEY

from .conftest import REPO

PUSH = Path(__file__).resolve().parents[1] / "web" / "fixtures" / "push.with-installation.json"
pytestmark = pytest.mark.timeout(900)


def push(ref: str, after: str, repo: str = REPO) -> dict:
    payload = json.loads(PUSH.read_text())
    payload.update(ref=ref, after=after, deleted=False)
    payload["repository"]["full_name"] = repo
    return payload


def entry(redis_client, repo: str, sha: str, states: tuple[str, ...], timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        raw = redis_client.hget(ENVIRONMENTS_KEY, f"{repo}@{sha}")
        if raw and json.loads(raw)["state"] in states:
            return json.loads(raw)
        time.sleep(0.5)  # the worker writes Redis; there is no event to wait on here
    raise TimeoutError(f"no {states} environment for {repo}@{sha[:12]}")


def test_a_push_to_the_default_branch_makes_its_environment_before_any_pr(web, workers):
    workers()
    answer = web.post("push", push("refs/heads/master", web.head))
    assert answer.status_code == 202 and answer.json()["status"] == "queued", answer.text
    made = entry(web.redis, REPO, web.head, ("ready", "failed"))
    assert made["state"] == "ready", made
    assert made["branch"] == "master" and made["compiled"] == "wheel" and made["seconds"] > 0
    assert made["disk_bytes"] is not None
    laid = list((Path(web.env["ETRIAGE_DATA_DIR"]) / "environments" / "trees").glob("*/laid.json"))
    assert [json.loads(p.read_text())["commit"] for p in laid] == [web.head]

    other = "Codertocat/not-hosted-here"  # the installation's account; not on the double
    web.post("push", push("refs/heads/master", web.base, repo=other))
    skipped = entry(web.redis, other, web.base, ("skipped",), timeout=120)
    assert "could not fetch Codertocat/not-hosted-here" in skipped["reason"], skipped
