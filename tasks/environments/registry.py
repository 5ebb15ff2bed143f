"""Packages from the registry (PyPI), unpacked into a directory of their own.

`pip install --no-deps --only-binary=:all: --target DIR name==version`: wheels only, so no
package's build code runs, and nothing of a change is involved (the name and version come from
the commit, but only as a requirement pip resolves). It needs the registry, which the sandbox
shuts out, so this module starts pip itself (tests/sandbox/test_one_door.py lists it). Its
environment is the worker's PATH and pip's own settings (PIP_*: index, find-links, certificates)
and nothing else: no token reaches it.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*$")


@dataclass
class Fetched:
    ok: bool
    directory: Path
    seconds: float
    reason: str = ""  # pip's own last words when it failed
    log: str = ""


def pip_env() -> dict[str, str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C.UTF-8",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_") and k != "PIP_TARGET"})
    return env


def install(requirement: str, directory: Path, log_path: Path, *, timeout: float = 1800,
            python: str = sys.executable, extra_args: tuple[str, ...] = ()) -> Fetched:
    """Unpack `requirement` (name==version) into `directory`, made atomically (a half-made
    directory is never left under its name)."""
    start = time.monotonic()
    if not REQUIREMENT.match(requirement):
        return Fetched(False, directory, 0.0, f"not a pinned requirement: {requirement!r}")
    if (directory / ".complete").is_file():
        return Fetched(True, directory, 0.0)
    tmp = directory.with_name(f"{directory.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    args = ["install", "--no-deps", "--only-binary=:all:", "--no-compile", "--disable-pip-version-check",
            "--target", str(tmp), *extra_args, requirement]
    argv = [python, "-m", "pip", *args]
    try:
        proc = subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout,
                              env=pip_env())
        output, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired:
        output, code = f"pip did not finish in {timeout:.0f} s", None
    log_path.write_text(f"$ {' '.join(argv)}\n{output}")
    if code != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        lines = [line.strip() for line in output.splitlines() if line.strip().startswith("ERROR")] \
            or [line.strip() for line in output.splitlines() if line.strip()][-1:] or [f"exit code {code}"]
        return Fetched(False, directory, time.monotonic() - start, lines[0][:300], output[-4000:])
    (tmp / ".complete").write_text(requirement + "\n")
    directory.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp, directory)
    except OSError:  # another worker unpacked it first
        shutil.rmtree(tmp, ignore_errors=True)
    return Fetched(True, directory, time.monotonic() - start)
