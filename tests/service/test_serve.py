"""`etriage serve`, `replay` and `demo` as a user runs them: real processes, real signals."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.pipeline.sandbox import descendants, running
from tests.service.conftest import REPO_ROOT

ETRIAGE = [sys.executable, "-m", "etriage.cli"]
pytestmark = pytest.mark.service


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_stops_web_worker_and_redis_on_signal(tmp_path, sig):
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    process = subprocess.Popen(ETRIAGE + ["serve", "--port", "0", "--github-double",
                                          "--data-dir", str(tmp_path), "--concurrency", "1"],
                               cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        lines = []
        for line in process.stdout:
            lines.append(line)
            text = "".join(lines)
            if "ready." in text and "Ctrl-C stops everything" in text:  # every piece is up
                break
        banner = "".join(lines)
        assert "webhook at http://127.0.0.1:" in banner and "webhook secret (generated" in banner
        secret = (tmp_path / "webhook-secret").read_text()
        assert secret in banner and len(secret) == 40
        children = descendants(process.pid)
        names = {Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0] for p in children if running(p)}
        assert any(b"redis-server" in n for n in names)
        assert len(children) >= 3  # redis-server, the worker and its pool
        process.send_signal(sig)
        process.communicate(timeout=60)
        assert process.returncode == 0
        survivors = [p for p in children if running(p)]
        assert survivors == []
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_replay_signs_the_payload_and_reports_bad_input(tmp_path, shared_dir):
    payload = shared_dir / "fixtures/github/webhooks/ping/ping.json"
    result = subprocess.run(ETRIAGE + ["replay", str(payload), "--event", "ping",
                                       "--data-dir", str(tmp_path)],
                            cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 2 and "start `etriage serve` or pass --url" in result.stderr
    assert "Traceback" not in result.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = subprocess.run(ETRIAGE + ["replay", str(bad), "--event", "ping", "--url", "http://x",
                                       "--secret", "s"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 2 and "is not JSON" in result.stderr


def test_replay_against_a_running_app(web, shared_dir):
    from etriage.replay import sign

    assert sign(b"{}", "s") == "sha256=" + __import__("hmac").new(
        b"s", b"{}", "sha256").hexdigest()
    result = subprocess.run(
        ETRIAGE + ["replay", str(shared_dir / "fixtures/github/webhooks/ping/ping.json"), "--event", "ping",
                   "--url", web.url, "--secret", "test-webhook-secret"],
        cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0 and '"pong"' in result.stdout, result.stdout + result.stderr


@pytest.mark.executorch
def test_demo_catches_the_regression_and_prints_what_github_received(tmp_path):
    """`etriage demo` (`make run`) with nothing but the venv: it must catch the real
    regression it plants, print one headline, and keep the worker's logs off the console."""
    result = subprocess.run(ETRIAGE + ["demo", "--timeout", "300", "--keep", str(tmp_path)],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                            env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    [comment] = out.split("===== PR comment on Codertocat/Hello-World#2 by etriage[bot] =====")[1:]
    assert comment.count("## etriage") == 1
    assert re.search(r"## etriage: ❌ \d+ new failures? caused by this change · 2 pre-existing", comment)
    assert "### Rebuild and tests" in comment and "### CI logs" in comment
    assert "`multi_method_lowering`" in comment and "`exir/backend/backend_api.py" in comment
    assert "===== check run `etriage`: completed / failure =====" in out
    assert re.search(r"annotation failure exir/backend/backend_api\.py:\d+: multi_method_lowering", out)
    assert "labels: triage: multi-method" in out
    log = tmp_path / "etriage.log"
    assert f"worker and web logs: {log}" in out and "ready." in log.read_text()
    assert "celery@" not in out and "[tasks]" not in out and "POST /webhook" not in out
    assert result.stderr.strip() == "", result.stderr[-2000:]
