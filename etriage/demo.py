"""`etriage demo`: the whole service on this machine catching a real regression.

It builds a throwaway ExecuTorch git repository from the installed package (base = the
package as installed, PR head = the base with a real regression patch: multi-method lowering
gives every method the first method's partitioner), starts `etriage serve --github-double`
in-process (embedded Redis, SQLite, a real Celery worker whose logs go to a file in the data
directory), replays GitHub's real `pull_request/opened` payload signed like GitHub does, follows
the check run's progress, then replays failed `workflow_run`s of the base and the head whose job
log is a real CI log, and prints the PR comment, the check run (with annotations) and labels.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import tasks.probes
from bot.store import Store
from etriage.dev.github_double import default_fixtures_dir
from etriage.replay import send
from etriage.serve import Service
from tasks.sample_repo import SampleRepoError, build_sample_repo
from triage_rules.model import cache_dir as model_cache_dir

REPO, PR = "Codertocat/Hello-World", 2
DEMO_LOG = "pytest_failure.txt"
REGRESSION = "multi_method_first_partitioner_for_all.patch"  # in tasks/probes/regressions/
SUITES = "probes"  # the multi-method and mutable-buffer probes: about a minute on a laptop


def add_arguments(parser) -> None:
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the bot")
    parser.add_argument("--keep", type=Path, help="use (and keep) this directory for the run")


def fixtures_root() -> Path:
    return default_fixtures_dir().parent.parent  # etriage/dev/fixtures: copies of shared/fixtures


def regression_patch(name: str = REGRESSION) -> Path:
    """A real regression patch shipped with the package (tasks/probes/regressions/)."""
    return Path(tasks.probes.__file__).resolve().parent / "regressions" / name


def say(message: str) -> None:
    print(f"etriage demo: {message}", flush=True)


def log_text(name: str, logs_dir: Path | None = None) -> str:
    """A real CI log fragment with the fixture's markers removed."""
    logs_dir = logs_dir or fixtures_root() / "logs" / "pytorch-log-classifier"
    raw = (logs_dir / name).read_text()
    lines = [line for line in raw.splitlines() if not line.startswith("#=SOURCE=#")]
    return "\n".join(line.replace("#=MATCH=# ", "", 1).replace("‹", "").replace("›", "")
                     for line in lines) + "\n"


def pull_request_payload(base: str, head: str) -> bytes:
    text = (fixtures_root() / "github" / "webhooks" / "pull_request" / "opened.json").read_text()
    payload = json.loads(text)
    return text.replace(payload["pull_request"]["head"]["sha"], head) \
               .replace(payload["pull_request"]["base"]["sha"], base).encode()


def install(service, url: str, secret: str, timeout: float) -> None:
    """GitHub's `installation.created` delivery for the App on the sample's owner, as GitHub
    sends it when the App is installed: the worker drops deliveries of unknown installations."""
    payload = json.loads((fixtures_root() / "github" / "webhooks" / "installation" / "created.json").read_text())
    payload["installation"]["id"] = 1  # the id the pull_request example payload carries
    answer = send(url, secret, "installation", json.dumps(payload).encode())
    say(f"replayed installation.created for {payload['installation']['account']['login']} -> "
        f"{answer.status_code} {answer.json().get('status')}")
    store, deadline = Store.from_settings(service.settings), time.monotonic() + timeout
    try:
        while store.installation(1) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("the installation was not recorded")
            time.sleep(0.2)  # the worker records it; no event to wait on across processes
    finally:
        store.close()


def workflow_run_payload(head: str, run_id: int) -> bytes:
    """GitHub's example `workflow_run` delivery, for this repository's commit `head`."""
    path = fixtures_root() / "github" / "webhooks" / "workflow_run" / "completed.with-pull-requests.json"
    payload = json.loads(path.read_text())
    run = payload["workflow_run"]
    run.update(id=run_id, head_sha=head, conclusion="failure")
    payload["repository"]["full_name"] = REPO
    payload["installation"] = {"id": 1}
    return json.dumps(payload).encode()


def run(args) -> int:
    if not default_fixtures_dir().is_dir():
        say(f"GitHub fixtures not found at {default_fixtures_dir()}")
        return 2
    started = time.monotonic()
    root = (args.keep or Path(tempfile.mkdtemp(prefix="etriage-demo-"))).resolve()
    root.mkdir(parents=True, exist_ok=True)
    log_file = root / "etriage.log"
    try:
        return _demo(args, root, log_file, started)
    except TimeoutError as error:
        say(f"gave up: {error}; the worker's log is {log_file}")
        return 1
    finally:
        if args.keep is None:  # keep only the log of the run
            for part in ("executorch", "data"):
                shutil.rmtree(root / part, ignore_errors=True)


def _demo(args, root: Path, log_file: Path, started: float) -> int:

    say("building a throwaway ExecuTorch repository from the installed package ...")
    try:
        sample = build_sample_repo(root / "executorch")
        head = sample.branch("multi-method-regression", patch=regression_patch())
    except SampleRepoError as error:
        say(f"cannot build the sample repository: {error}")
        return 2
    base = sample.base
    say(f"  {sample.path}: base {base[:12]} (executorch as installed), "
        f"PR head {head[:12]} (+ {REGRESSION})")
    port = free_port()  # known before the service starts: the comment links to its evidence pages
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(root), "ETRIAGE_SUITES": SUITES,
               "ETRIAGE_PUBLIC_URL": f"http://127.0.0.1:{port}",
               "ETRIAGE_GITHUB_WRITE_INTERVAL": "0",
               # the engine's learned model: trained once per machine, not per demo
               "ETRIAGE_MODEL_CACHE": str(model_cache_dir())}
    serve_args = argparse.Namespace(port=port, host="127.0.0.1", data_dir=root / "data",
                                    concurrency=2, github_double=True, log_file=log_file)
    say("starting web + Celery worker + embedded Redis + GitHub double ...")
    say(f"  worker and web logs: {log_file}")
    with Service(serve_args, environ) as service:
        double, secret = service.double, service.settings.webhook_secrets[0]
        # The double serves the sample over git (the PR's head as refs/pull/N/head): the worker
        # fetches it into its own mirror, as it fetches from GitHub (docs/FETCHING.md).
        double.git.host(REPO, sample.path)
        double.add_pull(REPO, PR, head, base, base_ref="main", files=[("exir/backend/backend_api.py", "modified")])
        # The PR's author can write to the repository, so its code runs at once; an outside
        # contributor's would wait for a maintainer's `/etriage ok-to-test` (docs/SANDBOX.md).
        double.set_permission(REPO, "Codertocat", "write")
        url = service.url + "/webhook"
        install(service, url, secret, args.timeout)
        answer = send(url, secret, "pull_request", pull_request_payload(base, head))
        say(f"replayed pull_request.opened for {REPO}#{PR} (GitHub's example payload, mapped "
            f"to the sample repository) -> {answer.status_code} {answer.json().get('status')}")
        follow_check_run(double, head, args.timeout)
        wait_published(service, args.timeout)
        ci_demo(service, base, head, args.timeout)
        print(render(double, head), flush=True)
        dashboard, shown = dashboard_page(service.url)
    say(f"done in {time.monotonic() - started:.0f}s; the worker's log: {log_file}")
    say(f"the dashboard's page of {REPO}#{PR}: {dashboard} ({shown}; served while the demo ran, "
        "`etriage serve` keeps one up)")
    return 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def actions_log(text: str) -> tuple[str, list[dict]]:
    """A real job log's tests step (`text`, timestamped as Actions writes every line) after the
    job's set-up and checkout steps, and the job's steps as the API lists them: what the
    comment's link to the failing line (#step:S:L) is computed from."""
    from datetime import datetime, timedelta

    stamps = re.findall(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", text, flags=re.MULTILINE)
    first = datetime.fromisoformat(stamps[0]) if stamps else datetime(2026, 1, 20, 17, 42, 40)
    last = datetime.fromisoformat(stamps[-1]) if stamps else first
    at = lambda seconds: (first + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")
    before = [(-4, "Current runner version: '2.321.0'"), (-4, "Runner name: 'linux.2xlarge'"),
              (-2, "##[group]Run actions/checkout@v4"), (-2, "Syncing repository: pytorch/executorch"),
              (-2, "##[endgroup]")]
    lines = [f"{at(s)}.0000000Z {line}" for s, line in before] + text.splitlines()
    steps = [{"name": name, "status": "completed", "number": n, "conclusion": conclusion,
              "started_at": start + "Z", "completed_at": end + "Z"}
             for n, (name, conclusion, start, end) in enumerate([
                 ("Set up job", "success", at(-4), at(-3)), ("Run actions/checkout@v4", "success", at(-2), at(-1)),
                 ("Run pytest", "failure", at(0), last.strftime("%Y-%m-%dT%H:%M:%S"))], 1)]
    return "\n".join(lines) + "\n", steps


def dashboard_page(base_url: str) -> tuple[str, str]:
    """The PR's dashboard URL, and what it answered while the service was up."""
    url = f"{base_url}/dashboard/pr/{REPO}/{PR}"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return url, f"answered {answer.status}"
    except urllib.error.HTTPError as error:
        return url, f"answered {error.code}"
    except OSError as error:
        return url, f"not reachable: {error}"


def follow_check_run(double, head: str, timeout: float) -> dict:
    """Print the check run's progress as the worker reports it, until it completes."""
    seen, deadline = None, time.monotonic() + timeout

    def change():
        runs = double.check_runs_for(REPO, head)
        if not runs:
            return None
        run = runs[-1]
        state = (run["status"], (run.get("output") or {}).get("summary", ""))
        return (state, run) if state != seen else None

    while True:
        seen, run = double.wait_for(change, max(deadline - time.monotonic(), 0.1),
                                    "the check run to complete")
        status, summary = seen
        if status == "completed":
            say(f"  check run completed: {run['conclusion']}")
            return run
        say(f"  check run {status}: {summary.splitlines()[0] if summary else ''}")


def wait_published(service, timeout: float) -> None:
    """Until the worker has written all it had to (comment, check run, labels)."""

    store = Store.from_settings(service.settings)
    try:
        service.double.wait_for(lambda: not store.pending_reports(), timeout, "the publish")
    finally:
        store.close()


def ci_demo(service, base: str, head: str, timeout: float) -> None:
    """Failed CI of the base, then the same failure on the PR head: pre-existing, not blamed."""

    double, secret, url = service.double, service.settings.webhook_secrets[0], service.url + "/webhook"
    log, steps = actions_log(log_text(DEMO_LOG))
    jobs = lambda job_id: [{"id": job_id, "name": "unittest / linux", "conclusion": "failure",
                            "log": log, "steps": steps}]
    double.add_workflow_run(REPO, 30433641, base, jobs(399444495))
    double.add_workflow_run(REPO, 30433642, head, jobs(399444496))
    store = Store.from_settings(service.settings)
    try:
        send(url, secret, "workflow_run", workflow_run_payload(base, 30433641))
        say("replayed workflow_run.completed (failure) of the base commit ...")
        double.wait_for(lambda: store.failures_for(REPO, base), timeout, "the base's CI failures")
        answer = send(url, secret, "workflow_run", workflow_run_payload(head, 30433642))
        say(f"replayed workflow_run.completed (failure) of the PR head -> {answer.status_code}")
        double.wait_for(lambda: any(r["kind"] == "ci" and r["status"] == "completed"
                                    for r in store.runs_for(REPO, PR)), timeout,
                        "the CI triage to be published")
    finally:
        store.close()
    wait_published(service, timeout)


def render(double, head: str) -> str:
    comments = [c for c in double.comments_on(REPO, PR) if c["user"] == double.bot_login]
    out = []
    for comment in comments:
        out += [f"\n===== PR comment on {REPO}#{PR} by {comment['user']} =====",
                re.sub(r"\n{3,}", "\n\n", comment["body"]).strip()]
    for check in double.check_runs_for(REPO, head):
        output = check.get("output") or {}
        out += [f"\n===== check run `{check['name']}`: {check['status']} / {check['conclusion']} =====",
                f"title: {output.get('title', '')}", output.get("summary", "")]
        if output.get("text"):
            out.append(output["text"])
        for note in check.get("annotations", []):
            out.append(f"annotation {note['annotation_level']} {note['path']}:{note['start_line']}: "
                       f"{note.get('title', '')}: {note['message'].splitlines()[0]}")
    out.append(f"\nlabels: {', '.join(double.labels_on(REPO, PR)) or '(none)'}")
    return "\n".join(out)
