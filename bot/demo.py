"""`etriage demo`: the whole service on this machine, against a local GitHub double.

It starts `etriage serve --github-double` in-process (embedded Redis, SQLite, a real Celery
worker), makes a small git checkout for the payload's repository (Codertocat/Hello-World, PR #2),
replays GitHub's real `pull_request/opened` payload signed like GitHub does, then a failed
`workflow_run` whose job log is a real CI log, waits for the bot's work, prints the PR comment
and the check run, and shuts everything down.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path

from bot.github_double import default_fixtures_dir

REPO, PR = "Codertocat/Hello-World", 2
DEMO_LOG = "pytest_failure.txt"


def add_arguments(parser) -> None:
    parser.add_argument("--timeout", type=float, default=180, help="seconds to wait for the bot")
    parser.add_argument("--keep", type=Path, help="use (and keep) this directory for the run")


def fixtures_root() -> Path:
    return default_fixtures_dir().parent.parent  # shared/fixtures


def make_checkout(path: Path) -> tuple[str, str]:
    """A two-commit repository: base, and a head that edits the docs (fast to triage)."""
    def git(*args):
        return subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True,
                              text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(path),
                                              "GIT_AUTHOR_NAME": "demo", "GIT_COMMITTER_NAME": "demo",
                                              "GIT_AUTHOR_EMAIL": "demo@example.com",
                                              "GIT_COMMITTER_EMAIL": "demo@example.com"}).stdout.strip()

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


def log_text(name: str) -> str:
    """A real CI log fragment with the fixture's markers removed."""
    raw = (fixtures_root() / "logs" / "pytorch-log-classifier" / name).read_text()
    lines = [line for line in raw.splitlines() if not line.startswith("#=SOURCE=#")]
    return "\n".join(line.replace("#=MATCH=# ", "", 1).replace("‹", "").replace("›", "")
                     for line in lines) + "\n"


def pull_request_payload(base: str, head: str) -> bytes:
    text = (fixtures_root() / "github" / "webhooks" / "pull_request" / "opened.json").read_text()
    payload = json.loads(text)
    return text.replace(payload["pull_request"]["head"]["sha"], head) \
               .replace(payload["pull_request"]["base"]["sha"], base).encode()


def workflow_run_payload(head: str, run_id: int) -> bytes:
    path = fixtures_root() / "github" / "webhooks" / "workflow_run" / "completed.with-pull-requests.json"
    payload = json.loads(path.read_text())
    run = payload["workflow_run"]
    run.update(id=run_id, head_sha=head, conclusion="failure")
    payload["repository"]["full_name"] = REPO
    payload["installation"] = {"id": 1}
    return json.dumps(payload).encode()


def run(args) -> int:
    from bot.replay import send
    from bot.serve import Service
    from bot.store import Store

    if not default_fixtures_dir().is_dir():
        print(f"etriage demo: GitHub fixtures not found at {default_fixtures_dir()}")
        return 2
    with tempfile.TemporaryDirectory(prefix="etriage-demo-") as scratch:
        root = args.keep or Path(scratch)
        checkout = root / "Hello-World"
        base, head = make_checkout(checkout)
        environ = {"PATH": "/usr/bin:/bin", "HOME": str(root),
                   "ETRIAGE_REPO_PATHS": f"{REPO}={checkout}", "ETRIAGE_GITHUB_WRITE_INTERVAL": "0"}
        serve_args = argparse.Namespace(port=0, host="127.0.0.1", data_dir=root / "data",
                                        concurrency=2, github_double=True)
        print("etriage demo: starting web + worker + embedded Redis + GitHub double ...", flush=True)
        with Service(serve_args, environ) as service:
            double, secret = service.double, service.settings.webhook_secrets[0]
            double.add_pull(REPO, PR, head, base, files=[("docs/usage.md", "modified")])
            double.add_workflow_run(REPO, 30433642, head, [
                {"id": 399444496, "name": "unittest / linux", "conclusion": "failure",
                 "log": log_text(DEMO_LOG)}])
            url = service.url + "/webhook"
            answer = send(url, secret, "pull_request", pull_request_payload(base, head))
            print(f"etriage demo: replayed pull_request.opened -> {answer.status_code} {answer.text.strip()}")
            double.wait_for(lambda: [r for r in double.check_runs_for(REPO, head)
                                     if r["status"] == "completed"], args.timeout,
                            "the check run to complete")
            answer = send(url, secret, "workflow_run", workflow_run_payload(head, 30433642))
            print(f"etriage demo: replayed workflow_run.completed (failure) -> {answer.status_code}")
            store = Store.from_settings(service.settings)
            double.wait_for(lambda: any(r["kind"] == "ci" and r["status"] == "completed"
                                        for r in store.runs_for(REPO, PR)), args.timeout,
                            "the CI triage to be published")
            store.close()
            print(render(double, head))
    return 0


def render(double, head: str) -> str:
    comments = double.comments_on(REPO, PR)
    runs = double.check_runs_for(REPO, head)
    out = [f"\n===== PR comment on {REPO}#{PR} by {comments[0]['user']} =====",
           re.sub(r"\n{3,}", "\n\n", comments[0]["body"]).strip()]
    for check in runs:
        out += [f"\n===== check run `{check['name']}`: {check['status']} / {check['conclusion']} =====",
                (check.get("output") or {}).get("title", ""),
                (check.get("output") or {}).get("summary", "")]
    out.append(f"\nlabels: {', '.join(double.labels_on(REPO, PR)) or '(none)'}")
    return "\n".join(out)
