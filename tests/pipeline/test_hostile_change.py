"""The issue's attacker, end to end: a change that appends code to exir/backend/backend_api.py
(run at import time), triaged by the real pipeline. From inside the probes run it reads the bot's
key and database, other processes' environments, connects to Redis/PostgreSQL/an outside
address, writes outside its work directory, tries to escalate, then sleeps forever. Every
attempt is refused, the run is killed at the wall-clock limit and the report says so, and every
process the pipeline started was either git or the sandbox (an audit hook watches)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tasks.pipeline.report import to_markdown
from tasks.pipeline.run import TriageOptions, triage

pytestmark = pytest.mark.executorch

HOSTILE = Path(__file__).resolve().parents[1] / "sandbox" / "hostile.py"
SPAWNS: list[tuple[str, tuple]] | None = None  # filled while a test watches


def _audit(event: str, args: tuple) -> None:
    if SPAWNS is not None and event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn",
                                        "os.spawn", "os.fork", "os.forkpty", "pty.spawn"):
        SPAWNS.append((event, args))


sys.addaudithook(_audit)  # hooks cannot be removed; SPAWNS = None keeps it idle


def hostile_edit(secrets: dict[str, Path], worker_pid: int):
    """Append the attacker's code to backend_api.py: it runs when a probe imports the module."""
    targets = {"read": [str(p) for p in secrets.values()] + ["/root", "/proc/1/environ"],
               "connect": ["127.0.0.1:6379", "127.0.0.1:5432", "10.255.255.1:443"],
               "write": [str(p.parent / "planted") for p in secrets.values()]}
    payload = f'''
# ---- appended by a hostile change ----
import sys as _sys
if "tasks.probes" in _sys.modules and "_hostile" not in _sys.modules:
    _sys.modules["_hostile"] = _sys
    _ns = {{"__name__": "_hostile"}}
    exec(compile({HOSTILE.read_text()!r}, "hostile", "exec"), _ns)
    _ns["read"](*{targets["read"]!r})
    _ns["environ"]({str(worker_pid)!r})
    _ns["connect"](*{targets["connect"]!r})
    _ns["write"](*{targets["write"]!r}, __file__ + ".planted")
    _ns["escalate"]()
    _ns["sleep_forever"]()
'''

    def edit(repo: Path) -> None:
        path = repo / "exir" / "backend" / "backend_api.py"
        path.write_text(path.read_text() + payload)
    return edit, targets


def test_a_hostile_change_is_contained_and_reported(et_repo, data_dir, monkeypatch):
    global SPAWNS
    monkeypatch.setenv("ETRIAGE_GITHUB_TOKEN", "ghs_secret_token_of_the_worker")
    secrets = {"key": data_dir / "app-key.pem", "db": data_dir / "etriage.db"}
    secrets["key"].write_text("-----BEGIN RSA PRIVATE KEY-----\nsecret\n")
    secrets["key"].chmod(0o600)
    secrets["db"].write_bytes(b"SQLite format 3\x00whsec_webhook")
    edit, targets = hostile_edit(secrets, os.getpid())
    head = et_repo.branch("hostile", edit=edit)

    SPAWNS = []
    try:
        report = triage(TriageOptions(repo=et_repo.path, base="main", head=head, data_dir=data_dir,
                                      suites=["probes"], suite_timeout=15))
    finally:
        spawned, SPAWNS = SPAWNS, None

    [probes] = [s for s in report.suites if s.commit == head and s.suite == "probes"]
    assert probes.status == "crashed"
    assert probes.reason == "no JUnit results (killed: the sandbox's wall-clock limit (15 s))"
    assert "probes on host: crashed (no JUnit results (killed: the sandbox's wall-clock limit (15 s)))" \
        in to_markdown(report)
    log = probes.log_excerpt
    assert "HOSTILE sleep started" in log, log
    reported = {line.split(" ", 3)[2]: line.split(" ", 3)[3] for line in log.splitlines()
                if line.startswith("HOSTILE ") and len(line.split(" ", 3)) == 4}
    for target in [*targets["read"], *targets["connect"], *targets["write"], "1", str(os.getpid()),
                   "setuid(0)", "capabilities", "unshare(user)"]:
        assert reported.get(target, "").startswith("refused"), (target, log)
    assert "ESCAPED" not in log and "ghs_secret" not in log
    assert not [p for p in secrets.values() if (p.parent / "planted").exists()]
    assert not list(Path(et_repo.path).rglob("*.planted"))

    # the one door: every process the pipeline started ran git or the sandbox
    programs = [os.path.basename(str(args[1][0])) if event == "subprocess.Popen" else event
                for event, args in spawned]
    assert programs and set(programs) <= {"git", "bwrap"}, sorted(set(programs))
    assert "bwrap" in programs
