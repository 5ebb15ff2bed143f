"""Benchmark: from a signed `workflow_run.completed` delivery to the updated PR comment.

Real parts throughout: the Flask app (werkzeug, threaded), an embedded redis-server (or
$REDIS_URL), a real Celery worker process, the GitHub API double over real HTTP, SQLite, and
a small git clone so the CI comparison uses the true merge base. Each event is a new failed
workflow run on the PR's head with a real CI log (GitHub's example delivery, mapped to it):
the worker fetches the jobs and the log, classifies it, compares it with the merge base's CI
and edits the one summary comment. The clock runs from the POST to the moment the double
holds a comment naming that run's job. Events go one after another (the latency of one event,
not throughput). Prints percentiles; asserts nothing.

    .venv/bin/python bench/event_to_comment.py [--events 200] [--concurrency 2]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from etriage.demo import install, log_text, workflow_run_payload  # noqa: E402
from etriage.replay import send  # noqa: E402
from etriage.serve import Service  # noqa: E402
from triage_rules.model import cache_dir as model_cache_dir  # noqa: E402

REPO, PR = "Codertocat/Hello-World", 2
LOG = "pytest_failure.txt"


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


def git_checkout(path: Path) -> tuple[str, str]:
    """base and a PR head one commit on; the worker finds their merge base here."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(path), "GIT_AUTHOR_NAME": "b", "GIT_COMMITTER_NAME": "b",
           "GIT_AUTHOR_EMAIL": "b@example.com", "GIT_COMMITTER_EMAIL": "b@example.com"}

    def git(*args):
        return subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True, text=True,
                              env=env).stdout.strip()

    path.mkdir(parents=True)
    git("init", "-q", "-b", "main")
    (path / "README.md").write_text("bench\n")
    git("add", "-A")
    git("commit", "-q", "-m", "base")
    base = git("rev-parse", "HEAD")
    (path / "README.md").write_text("bench, changed\n")
    git("commit", "-q", "-am", "head")
    return base, git("rev-parse", "HEAD")


def comment_names(double, job: str) -> bool:
    return any(f"`{job}`" in c["body"] for c in double.comments_on(REPO, PR) if c["user"] == double.bot_login)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=2, help="the worker's processes")
    parser.add_argument("--timeout", type=float, default=60, help="seconds one event may take")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="etriage-bench-e2c-"))
    base, head = git_checkout(root / "repo")
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(root), "ETRIAGE_REPO_PATHS": f"{REPO}={root / 'repo'}",
               "ETRIAGE_GITHUB_WRITE_INTERVAL": "0", "ETRIAGE_MODEL_CACHE": str(model_cache_dir())}
    serve_args = argparse.Namespace(port=0, host="127.0.0.1", data_dir=root / "data",
                                    concurrency=args.concurrency, github_double=True, log_file=root / "worker.log")
    log = log_text(LOG)
    with Service(serve_args, environ) as service:
        double, secret, url = service.double, service.settings.webhook_secrets[0], service.url + "/webhook"
        install(service, url, secret, 60)  # the worker drops deliveries of an unknown installation
        double.add_pull(REPO, PR, head, base, files=[("README.md", "modified")])
        # the merge base's CI first: the PR's identical failures are then pre-existing
        double.add_workflow_run(REPO, 900, base, [{"id": 9000, "name": "unittest base", "conclusion": "failure",
                                                   "log": log}])
        send(url, secret, "workflow_run", workflow_run_payload(base, 900))
        warm = time.monotonic()
        double.add_workflow_run(REPO, 901, head, [{"id": 9001, "name": "warm-up", "conclusion": "failure",
                                                   "log": log}])
        send(url, secret, "workflow_run", workflow_run_payload(head, 901))
        double.wait_for(lambda: comment_names(double, "warm-up"), 300, "the warm-up event (model training)")
        print(f"warm-up (first event: worker start, model load) {time.monotonic() - warm:.1f}s", flush=True)

        latencies, answers = [], []
        for i in range(args.events):
            run_id, job = 1000 + i, f"unittest shard {i}"
            double.add_workflow_run(REPO, run_id, head, [{"id": 20000 + i, "name": job, "conclusion": "failure",
                                                          "log": log}])
            start = time.perf_counter()
            answer = send(url, secret, "workflow_run", workflow_run_payload(head, run_id))
            answers.append(answer.status_code)
            double.wait_for(lambda: comment_names(double, job), args.timeout, f"event {i}")
            latencies.append((time.perf_counter() - start) * 1000)
        [comment] = [c for c in double.comments_on(REPO, PR) if c["user"] == double.bot_login]

    print(f"events: {len(latencies)} workflow_run.completed deliveries (answers {sorted(set(answers))}), "
          f"worker concurrency {args.concurrency}, one comment edited {comment['edits']} times")
    print(f"event -> comment: p50 {percentile(latencies, 50):.0f} ms, p90 {percentile(latencies, 90):.0f} ms, "
          f"p99 {percentile(latencies, 99):.0f} ms, max {max(latencies):.0f} ms, "
          f"mean {statistics.mean(latencies):.0f} ms")
    print(json.dumps({"events": len(latencies), "p50_ms": round(percentile(latencies, 50)),
                      "p99_ms": round(percentile(latencies, 99))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
