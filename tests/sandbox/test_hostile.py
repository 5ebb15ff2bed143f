"""A change's code attacks the worker from inside the sandbox (tests/sandbox/hostile.py), for real:
bubblewrap, real sockets to the real Redis and the GitHub double, real fork bombs. Every attempt
must be refused or bounded, the run must end with the limit it hit named, and this process (the
worker's stand-in) must not notice."""
from __future__ import annotations

import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest

from tasks.pipeline.sandbox import Limits, Sandbox, SandboxUnavailable, run_logged, scrubbed_env, stop_tree

HOSTILE = Path(__file__).with_name("hostile.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
SMALL = Sandbox(limits=Limits(processes=64, tmp_bytes=8 << 20, file_bytes=16 << 20, memory_bytes=2 << 30,
                              cpu_seconds=60))


@pytest.fixture
def arena(tmp_path, monkeypatch):
    """A run's tree (read-only, holds the hostile code, as an overlay would), its work dir, and
    the bot's secrets where a worker keeps them: a key file, the database, a config file."""
    monkeypatch.setenv("ETRIAGE_GITHUB_TOKEN", "ghs_secret_token_of_the_worker")
    data = tmp_path / "data"
    data.mkdir()
    key = data / "app-key.pem"
    key.write_text("-----BEGIN RSA PRIVATE KEY-----\nsecret\n")
    key.chmod(0o600)
    db = data / "etriage.db"
    with sqlite3.connect(db) as conn:
        conn.execute("create table secrets (value text)")
        conn.execute("insert into secrets values ('whsec_webhook')")
    config = data / "etriage.env"
    config.write_text("ETRIAGE_WEBHOOK_SECRET=whsec_webhook\n")
    tree = tmp_path / "run" / "tree"
    tree.mkdir(parents=True)
    tree.chmod(0o755)
    shutil.copy(HOSTILE, tree / "hostile.py")
    bound_key = tree / "key-in-a-bound-dir.pem"  # root's 0600 file inside a path the run can see
    bound_key.write_text("-----BEGIN RSA PRIVATE KEY-----\nsecret\n")
    bound_key.chmod(0o600)
    work = tmp_path / "run" / "work"
    work.mkdir()
    return SimpleNamespace(data=data, key=key, db=db, config=config, tree=tree, bound_key=bound_key,
                           work=work, logs=tmp_path / "logs")


def attack(arena, *args, sandbox=SMALL, timeout=60.0, outputs=()):
    env = scrubbed_env(arena.work, sandbox=sandbox)
    done = run_logged([sys.executable, str(arena.tree / "hostile.py"), *map(str, args)], cwd=arena.tree,
                      env=env, log_path=arena.logs / f"{args[0]}.log", timeout=timeout, sandbox=sandbox,
                      readable=[arena.tree], writable=[arena.work], outputs=outputs)
    return done, done.log_path.read_text(errors="replace")


def verdicts(text: str) -> dict[str, str]:
    """target -> 'refused'/'ESCAPED' line from the HOSTILE lines of a log."""
    found = {}
    for line in text.splitlines():
        parts = line.split(" ", 3)
        if parts[0] == "HOSTILE" and len(parts) == 4:
            found[parts[2]] = parts[3]
    return found


def assert_all_refused(text: str, targets) -> None:
    found = verdicts(text)
    missing = [str(t) for t in targets if str(t) not in found]
    assert not missing, f"attempts that never reported: {missing}\n{text}"
    escaped = {t: found[str(t)] for t in targets if not found[str(t)].startswith("refused")}
    assert not escaped, text


def leftovers(marker: str) -> list[str]:
    """Processes still running whose command line holds the marker (the run's own path)."""
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            alive.append(f"{pid}: {cmdline[:120]}")
    return alive


def test_the_bot_s_secrets_are_not_there(arena):
    targets = [arena.key, arena.db, arena.config, arena.bound_key, "/root/.bash_history", "/root",
               REPO_ROOT / ".git" / "config", REPO_ROOT / "bot" / "settings.py", "/etc/shadow", "/etc/passwd",
               "/home", "/var/lib", "/run/redis/redis-server.sock", "/var/run/postgresql/.s.PGSQL.5432"]
    done, text = attack(arena, "read", *targets)
    assert done.returncode == 0, text
    assert_all_refused(text, targets)


def test_no_environment_of_another_process_is_readable(arena):
    done, text = attack(arena, "environ", os.getpid())
    assert done.returncode == 0, text
    assert_all_refused(text, ["1", str(os.getpid())])
    assert "ghs_secret" not in text


def test_no_network_not_even_the_host_s_loopback(arena, redis_url, double):
    listener = socket.create_server(("127.0.0.1", 0))  # something that would accept
    redis_port = urlsplit(redis_url).port
    targets = [f"127.0.0.1:{redis_port}", "127.0.0.1:6379", "127.0.0.1:5432",
               f"127.0.0.1:{urlsplit(double.url).port}", f"127.0.0.1:{listener.getsockname()[1]}",
               "10.255.255.1:443"]  # outside: with no interface, connect() fails before any packet
    done, text = attack(arena, "connect", *targets)
    listener.close()
    assert done.returncode == 0, text
    assert_all_refused(text, targets)
    assert double.requests == []


def test_it_writes_nowhere_but_its_work_dir(arena):
    targets = [arena.tree / "planted.py", arena.data / "planted", REPO_ROOT / "planted", "/planted",
               "/usr/planted", "/etc/planted", Path(sys.executable).parent / "planted"]
    done, text = attack(arena, "write", *targets, arena.work / "allowed")
    assert done.returncode == 0, text
    assert_all_refused(text, targets)
    assert not [t for t in targets if Path(t).exists()]
    assert (arena.work / "allowed").read_text() == "pwned\n"  # its own work dir is writable


def test_it_cannot_kill_the_worker_or_the_sandbox_s_init(arena):
    done, text = attack(arena, "kill", os.getpid())
    assert_all_refused(text, [f"pid{os.getpid()}", "init"])
    # Killing its parent (bubblewrap, same user) only ends the run itself: --die-with-parent.
    assert "HOSTILE kill parent-attempted" in text and done.returncode != 0
    done, text = attack(arena, "write", arena.work / "next-run")  # the next run is unaffected
    assert done.returncode == 0 and "next-run ESCAPED: written" in text


def test_no_escalation_no_capabilities_no_setuid_root(arena):
    done, text = attack(arena, "escalate")
    assert done.returncode == 0, text
    assert_all_refused(text, ["setuid(0)", "capabilities", "unshare(user)"])


def test_a_fork_bomb_is_bounded_and_the_whole_tree_is_killed(arena):
    marker = str(arena.tree / "hostile.py")
    peak = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            peak.append(len(leftovers(marker)))
            time.sleep(0.2)

    counter = threading.Thread(target=count)
    counter.start()
    start = time.monotonic()
    done, text = attack(arena, "forkbomb", timeout=8)
    stop.set()
    counter.join()
    assert done.returncode is None and done.limit == "wall-clock limit (8 s)"
    assert time.monotonic() - start < 30
    # + bubblewrap's own four (outer, its init, inner, its child) that carry the same argv
    assert max(peak) <= SMALL.limits.processes + 4, max(peak)
    assert "[etriage] stopped at the sandbox's wall-clock limit (8 s)" in text
    assert not leftovers(marker)
    os.fork and os.getpid()  # this process still forks: the limit was the sandbox's, not ours


def test_a_stopped_run_leaves_nothing_running_even_in_a_session_of_its_own(tmp_path):
    """What the sandbox's inner session and PID namespace do to a plain process-group kill: a
    grandchild in a new session is out of the group, and must still be gone when the run
    returns (so the next run on this worker starts on a quiet machine)."""
    marker = str(tmp_path / "own-session-marker")
    sleeper = f"{sys.executable} -c 'import time; time.sleep(300)' {marker}"
    script = f"setsid {sleeper} & {sleeper} & wait"
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    deadline = time.monotonic() + 10
    while len(leftovers(marker)) < 3 and time.monotonic() < deadline:  # the shell and its two
        time.sleep(0.05)
    assert len(leftovers(marker)) == 3
    assert stop_tree(proc) == []
    assert not leftovers(marker)


def test_filling_the_disk_stops_at_the_tmpfs_and_the_file_size_limit(arena):
    done, text = attack(arena, "fill", "/tmp/fill")
    assert done.returncode == 1 and done.limit == "disk limit (tmpfs /tmp of 8 MiB)", text
    assert re.search(r"ENOSPC after [78] MiB", text), text
    output = arena.work / "junit.xml"
    done, text = attack(arena, "fill", output, outputs=[output])
    assert done.limit == "file-size limit (16 MiB)", text
    assert output.stat().st_size <= 16 << 20


def test_sleeping_forever_is_killed_with_its_children(arena):
    marker = str(arena.tree / "hostile.py")
    done, text = attack(arena, "sleep", timeout=3)
    assert "HOSTILE sleep started" in text
    assert done.returncode is None and done.limit == "wall-clock limit (3 s)"
    deadline = time.monotonic() + 5
    while leftovers(marker) and time.monotonic() < deadline:
        time.sleep(0.1)  # the kernel reaps the namespace's processes right after its init dies
    assert not leftovers(marker)
    assert not leftovers("time.sleep(100000)")


def test_memory_is_bounded(arena):
    done, text = attack(arena, "memory")
    assert done.returncode == 1 and done.limit == "memory limit (address space 2 GiB)", text
    assert "ESCAPED" not in text


def test_without_a_sandbox_nothing_runs(arena):
    broken = Sandbox(bwrap="/nonexistent/bwrap")
    assert "bubblewrap (bwrap) is not installed" in broken.problem()
    with pytest.raises(SandboxUnavailable):
        attack(arena, "write", arena.work / "ran-bare", sandbox=broken)
    assert not (arena.work / "ran-bare").exists()
