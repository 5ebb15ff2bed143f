"""Web-side fixtures: a signed-delivery client for the real app on the real Redis, and the
worker's real GitHub client (over HTTP to the GitHub double) and Store (SQLite) for commands."""
from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from pathlib import Path

import pytest

from bot.app import create_app

SECRET = "test-webhook-secret-3f9a"
REPO = "Codertocat/Hello-World"


class RecordingDispatcher:
    """Receives the webhook's enqueue calls; the signatures are the contract's (bot.publisher.Publisher),
    so a call that does not fit the contract fails here. Not a test of the service."""

    class DispatchError(RuntimeError):
        pass

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []
        self.fail_next = 0

    def _record(self, task: str, arguments: dict) -> str:
        if self.fail_next:
            self.fail_next -= 1
            raise self.DispatchError("broker unreachable: Error 111 connecting to 127.0.0.1:1")
        arguments.pop("self")
        self.calls.append((task, arguments))
        return f"task-{len(self.calls)}"

    def triage_pr(self, repo, pr, head_sha, base_ref, installation_id, *, reason, targets=None, suites=None,
                  pushed_at=None):
        return self._record("triage_pr", locals())

    def pr_closed(self, repo, pr, installation_id):
        return self._record("pr_closed", locals())

    def ci_completed(self, repo, head_sha, installation_id, *, run_id=None, job_id=None, check_suite_id=None):
        return self._record("ci_completed", locals())

    def comment(self, repo, pr, comment_id, installation_id, *, author, author_type, body, previous_body, action,
                written_at=None):
        return self._record("comment", locals())

    def installation(self, installation_id, account, action):
        return self._record("installation", locals())

    def warm_environment(self, repo, branch, sha, installation_id):
        return self._record("warm_environment", locals())


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class Deliverer:
    """Posts deliveries the way GitHub does: raw bytes, signed, with the three headers."""

    def __init__(self, client, fixtures: Path):
        self.client = client
        self.fixtures = fixtures

    def payload(self, name: str) -> dict:
        return json.loads((self.fixtures / name).read_bytes())

    def fixture(self, name: str, **kw):
        path = self.fixtures / name
        return self.post(path.read_bytes(), event=path.parent.name, **kw)

    def json(self, event: str, payload: dict, **kw):
        return self.post(json.dumps(payload).encode(), event=event, **kw)

    def post(self, body: bytes, *, event: str, delivery: str | None = None, signature: str | None = None,
             secret: str = SECRET, headers: dict | None = None):
        all_headers = {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-Hub-Signature-256": signature if signature is not None else sign(body, secret),
            "Content-Type": "application/json",
        }
        all_headers.update(headers or {})
        return self.client.post("/webhook", data=body,
                                headers={k: v for k, v in all_headers.items() if v is not None})


@pytest.fixture(scope="session")
def webhook_fixtures(shared_dir) -> Path:
    return shared_dir / "fixtures" / "github" / "webhooks"


@pytest.fixture
def dispatcher() -> RecordingDispatcher:
    return RecordingDispatcher()


@pytest.fixture
def app(redis_url, dispatcher):
    return create_app({"webhook_secrets": (SECRET,), "redis_url": redis_url}, dispatcher=dispatcher)


@pytest.fixture
def deliver(app, webhook_fixtures) -> Deliverer:
    return Deliverer(app.test_client(), webhook_fixtures)


# ---- the worker's real clients, for bot.commands.handle_comment ----------------------------------

@pytest.fixture
def github_double():
    from etriage.dev.github_double import GitHubDouble

    with GitHubDouble() as double:
        yield double


@pytest.fixture
def github(github_double):
    from bot.github_client import GitHubClient, GitHubConfig

    config = GitHubConfig(base_url=github_double.url, token="ghp_testtoken", attempts=1,
                          seconds_between_writes=None, timeout=5.0)
    return GitHubClient(config)


@pytest.fixture
def store(tmp_path):
    from bot.store import Store

    store = Store(f"sqlite:///{tmp_path / 'etriage.db'}")
    yield store
    store.close()
