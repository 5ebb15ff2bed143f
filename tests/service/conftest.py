"""The service under test, made of real parts: the Flask app in a real HTTP server thread, a
real Celery worker process on a real Redis, SQLite (or PostgreSQL) and the GitHub double."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis

from etriage.dev.github_double import GitHubDouble
from triage_rules.model import cache_dir as model_cache_dir
from etriage.replay import send

REPO_ROOT = Path(__file__).resolve().parents[2]
REPO, PR, INSTALLATION = "Codertocat/Hello-World", 2, 1
SECRET = "test-webhook-secret"
TOKEN = "ghs_testtoken0123456789abcdefABCDEF"


@pytest.fixture
def double():
    with GitHubDouble() as github:
        github.git_tokens.add(TOKEN)  # git over HTTP checks it on every request
        yield github


def make_checkout(path: Path) -> tuple[str, str]:
    """A two-commit repository: base, and a head that edits the docs (fast to triage)."""
    def git(*args):
        return subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True,
                              text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(path),
                                              "GIT_AUTHOR_NAME": "t", "GIT_COMMITTER_NAME": "t",
                                              "GIT_AUTHOR_EMAIL": "t@example.com",
                                              "GIT_COMMITTER_EMAIL": "t@example.com"}).stdout.strip()

    path.mkdir(parents=True)
    git("init", "-q", "-b", "master")
    (path / "docs").mkdir()
    (path / "README.md").write_text("Hello World\n")
    (path / "docs" / "usage.md").write_text("# Usage\n")
    git("add", "-A")
    git("commit", "-q", "-m", "base")
    base = git("rev-parse", "HEAD")
    (path / "docs" / "usage.md").write_text("# Usage\n\nRun `etriage demo`.\n")
    git("commit", "-q", "-am", "docs: usage")
    return base, git("rev-parse", "HEAD")


@pytest.fixture
def checkout(tmp_path):
    base, head = make_checkout(tmp_path / "Hello-World")
    return tmp_path / "Hello-World", base, head


@pytest.fixture
def clean_redis(redis_url):
    client = redis.Redis.from_url(redis_url)
    client.flushdb()  # queues, unacked messages, locks and heads of the previous test
    yield client
    client.flushdb()
    client.close()


@dataclass
class Service:
    url: str
    env: dict
    settings: object
    double: GitHubDouble
    redis: redis.Redis
    base: str
    head: str
    checkout: Path

    def post(self, event: str, payload: dict | bytes, delivery: str | None = None):
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return send(self.url, SECRET, event, body, delivery or str(uuid.uuid4()))

    def store(self):
        from bot.store import Store

        return Store(self.env["DATABASE_URL"])


class Worker:
    """`celery -A tasks.celery_app worker` as a subprocess in its own process group."""

    def __init__(self, env: dict, log_path: Path):
        self.env, self.log_path = env, log_path
        self.process: subprocess.Popen | None = None

    def start(self, **extra_env) -> "Worker":
        env = dict(self.env, **extra_env)
        self.log = open(self.log_path, "a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tasks.celery_app", "worker",
             "-Q", "triage,build,emulator,device", "--concurrency", "2", "--loglevel", "INFO",
             "--without-mingle", "--without-gossip", "--hostname", f"test-{uuid.uuid4().hex[:8]}@%h"],
            cwd=REPO_ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + 60
        while "ready." not in self.log_path.read_text():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("worker did not start:\n" + self.log_path.read_text()[-3000:])
            time.sleep(0.1)  # the worker prints "ready." once it consumes; no event to wait on
        return self

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is None:
            return
        try:  # warm shutdown: the main process stops its pool itself
            self.process.terminate()
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        try:  # pool children left by a SIGKILLed main process
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.log.close()


@pytest.fixture
def service_env(tmp_path, double, checkout, redis_url, clean_redis):
    repo_dir, base, head = checkout
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
        "ETRIAGE_WEBHOOK_SECRET": SECRET, "ETRIAGE_GITHUB_TOKEN": TOKEN,
        "ETRIAGE_GITHUB_API_URL": double.url, "REDIS_URL": redis_url,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'etriage.db'}",
        "ETRIAGE_DATA_DIR": str(tmp_path / "data"),
        "ETRIAGE_GITHUB_WRITE_INTERVAL": "0",
        # longer than any triage on a loaded 2-core machine: a redelivered copy would run beside it
        "ETRIAGE_VISIBILITY_TIMEOUT": "1200",
        # the engine's model trained once for the whole run, not once per worker's HOME
        "ETRIAGE_MODEL_CACHE": str(model_cache_dir()),
    }


@pytest.fixture
def workers(service_env, tmp_path):
    started: list[Worker] = []

    def start(**extra_env) -> Worker:
        worker = Worker(service_env, tmp_path / f"worker-{len(started)}.log")
        started.append(worker)
        return worker.start(**extra_env)

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def hosting(double, checkout) -> str | None:
    """How the double serves REPO over git (the worker fetches it, tasks/repos.py): here the
    checkout itself, the PR's head in it; the repository the head lives in (None: REPO).
    A test of a fork's pull request overrides this."""
    double.git.host(REPO, checkout[0])
    return None


@pytest.fixture
def web(service_env, double, checkout, hosting, clean_redis):
    """The WEB's Flask app behind a real HTTP server thread; dispatch uses the same settings."""
    from werkzeug.serving import make_server

    from bot.app import create_app
    from bot.settings import Settings
    from tasks.celery_app import WorkerOptions, configure
    import threading

    settings = Settings.from_env(service_env)
    configure(settings, WorkerOptions.from_env(service_env))
    server = make_server("127.0.0.1", 0, create_app(settings), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    repo_dir, base, head = checkout
    branch = subprocess.run(["git", "-C", str(repo_dir), "symbolic-ref", "--short", "HEAD"], check=True,
                            capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}).stdout.strip()
    double.add_pull(REPO, PR, head, base, base_ref=branch, head_repo=hosting,  # and refs/pull/N/head
                    files=[("docs/usage.md", "modified")])
    # The PR's author may write here, so its code runs; tests of outside contributors say "read".
    double.set_permission(REPO, "Codertocat", "write")
    from bot.store import Store  # the App is installed on REPO's owner (what an installation delivery records)

    installations = Store(service_env["DATABASE_URL"])
    installations.record_installation(INSTALLATION, REPO.split("/")[0], "created")
    installations.close()
    yield Service(f"http://127.0.0.1:{server.server_port}/webhook", service_env, settings,
                  double, clean_redis, base, head, repo_dir)
    server.shutdown()
    server.server_close()


def fixture_json(shared_dir: Path, *parts: str) -> dict:
    return json.loads(shared_dir.joinpath("fixtures", "github", "webhooks", *parts).read_text())


def github_time(seconds_from_now: float = 0.0) -> str:
    """A GitHub timestamp (UTC, whole seconds) `seconds_from_now` from now (negative: before)."""
    moment = datetime.now(timezone.utc) + timedelta(seconds=seconds_from_now)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def payloads(shared_dir):
    """Real webhook payloads with the test's values. Their times are GitHub's for the moment:
    a push stamped a minute before now unless `at` says when, a comment stamped now."""

    def pull_request(action: str, head: str, base: str, *, at: str | None = None) -> dict:
        payload = fixture_json(shared_dir, "pull_request", "opened.json")
        payload["action"] = action
        payload["pull_request"]["head"]["sha"] = head
        payload["pull_request"]["base"]["sha"] = base
        payload["pull_request"]["updated_at"] = at or github_time(-60)
        return payload

    def workflow_run(run_id: int, head: str) -> dict:
        payload = fixture_json(shared_dir, "workflow_run", "completed.with-pull-requests.json")
        payload["workflow_run"].update(id=run_id, head_sha=head, conclusion="failure")
        payload["repository"]["full_name"] = REPO
        payload["installation"] = {"id": INSTALLATION}
        return payload

    def issue_comment(comment_id: int, author: str, body: str, *, at: str | None = None) -> dict:
        payload = fixture_json(shared_dir, "issue_comment", "created.with-installation.json")
        payload["issue"]["number"] = PR
        payload["issue"]["pull_request"] = {"url": f"https://api.github.com/repos/{REPO}/pulls/{PR}"}
        written = at or github_time()
        payload["comment"].update(id=comment_id, body=body, created_at=written, updated_at=written)
        payload["comment"]["user"].update(login=author, type="User")
        return payload

    return type("Payloads", (), {"pull_request": staticmethod(pull_request),
                                 "workflow_run": staticmethod(workflow_run),
                                 "issue_comment": staticmethod(issue_comment)})
