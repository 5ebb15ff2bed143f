"""The installation token and the worker's mirrors are out of reach of a change's code: a PR
whose module, imported by the probes inside the sandbox, reports what it can see (its
environment, whether the worker's mirrors and worktrees exist for it) through the real service.
The worker itself holds the token (ETRIAGE_GITHUB_TOKEN) and fetched the change with it."""
from __future__ import annotations

import base64
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.service.conftest import PR, REPO, TOKEN, make_checkout

pytestmark = [pytest.mark.service, pytest.mark.executorch]

# Replaces executorch's backend_api.py in the run's overlay; the probes import it.
SPY = '''import json, os, sys
if "tasks.probes" in sys.modules:
    values = list(os.environ.values())
    seen = {{"names": sorted(os.environ),
            "github_token": any("gh" + "s_" in v or "ghp_" in v for v in values),
            "auth_header": any("Authorization" in v or "extraHeader" in v for v in values),
            "mirrors": os.path.exists({repos!r}),
            "data_dir": sorted(os.listdir({data!r})) if os.path.isdir({data!r}) else None}}
    raise RuntimeError("SANDBOX-SEES " + json.dumps(seen, separators=(",", ":")))
'''


@pytest.fixture
def checkout(tmp_path):
    path = tmp_path / "Hello-World"
    base, _ = make_checkout(path)
    spy = path / "exir" / "backend" / "backend_api.py"
    spy.parent.mkdir(parents=True)
    spy.write_text(SPY.format(repos=str(tmp_path / "data" / "repos"), data=str(tmp_path / "data")))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(path), "GIT_AUTHOR_NAME": "t", "GIT_COMMITTER_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", "spy"], check=True, env=env)
    head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], check=True, env=env,
                          capture_output=True, text=True).stdout.strip()
    return path, base, head


def test_a_sandboxed_run_sees_neither_the_token_nor_the_mirrors(web, workers, payloads, tmp_path):
    double, store = web.double, web.store()
    double.pulls[(REPO, PR)].files = [("exir/backend/backend_api.py", "added")]
    workers(ETRIAGE_SUITES="probes", ETRIAGE_VISIBILITY_TIMEOUT="900")  # no redelivered copy beside it
    web.post("pull_request", payloads.pull_request("opened", web.head, web.base))
    double.wait_for(lambda: [r for r in double.check_runs_for(REPO, web.head) if r["status"] == "completed"],
                    900, "the check run")  # patience for a busy machine, not a speed goal
    double.wait_for(lambda: not store.pending_reports(), 30, "the publish")
    [comment] = [c for c in double.comments_on(REPO, PR) if c["user"] == double.bot_login]
    assert "SANDBOX-SEES" in comment["body"], comment["body"][-3000:]  # the change's code ran and reported
    # read back whole from the stored failure: the comment shows it escaped (bot/md.py)
    lines = [f["line"] for f in store.failures_for(REPO, web.head) if "SANDBOX-SEES" in (f["line"] or "")]
    found = re.search(r"SANDBOX-SEES (\{.*?\})", lines[0] if lines else "")
    assert found, lines
    seen = json.loads(found.group(1))
    assert seen["github_token"] is False and seen["auth_header"] is False
    # the data directory exists in there only as the parent of the run's own bound folders
    assert seen["mirrors"] is False and "repos" not in (seen["data_dir"] or [])
    assert not [n for n in seen["names"] if n.startswith(("GIT_", "ETRIAGE_", "REDIS", "DATABASE"))], seen["names"]
    # and the worker did fetch it, with the token, which appears in none of its logs
    assert double.requests_to("POST", rf"^/{REPO}\.git/git-upload-pack$")
    log = Path(tmp_path / "worker-0.log").read_text()
    assert TOKEN not in log and base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode() not in log
