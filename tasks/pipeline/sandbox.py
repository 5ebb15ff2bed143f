"""How the pipeline runs code from a change: a scrubbed environment, per-run HOME/TMPDIR,
output captured to a log file, a timeout. Nothing from the bot's own environment
(tokens, keys, proxies) reaches the subprocess.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# Variables a worker may pass through on purpose (not secrets: tool locations).
PASS_THROUGH = ("QNN_SDK_ROOT", "ANDROID_NDK_ROOT", "LD_LIBRARY_PATH")


def scrubbed_env(run_dir: Path, *, pythonpath: list[str] | None = None,
                 extra: dict[str, str] | None = None,
                 pass_through: dict[str, str] | None = None) -> dict[str, str]:
    home, tmp = run_dir / "home", run_dir / "tmp"
    home.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        # Read the installed package's .pyc files but never write into the shared venv.
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    for key, value in (pass_through or {}).items():
        if key in PASS_THROUGH and value:
            env[key] = value
    env.update(extra or {})
    return env


@dataclass
class Completed:
    returncode: int | None  # None: timed out
    seconds: float
    log_path: Path

    def tail(self, limit: int = 6000) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text[-limit:]


def run_logged(cmd: list[str], *, cwd: Path, env: dict[str, str], log_path: Path,
               timeout: float) -> Completed:
    """Run cmd with stdout+stderr into log_path; never raises on failure or timeout."""
    start = time.monotonic()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # the whole process group: pytest may have children
            proc.wait()
            log.write(f"\n[etriage] timed out after {timeout:.0f}s\n".encode())
            returncode = None
    return Completed(returncode, time.monotonic() - start, log_path)
