"""Probe-test fixtures: the overlay helper and one pristine run shared by several tests.

Probe subprocesses run inside the pipeline's sandbox (tasks.pipeline.sandbox), as a triage runs
them: the expectations of these tests, unchanged from before the sandbox, are the proof that
isolation changes no probe's result."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _load_overlay():
    spec = importlib.util.spec_from_file_location("probe_overlay", HERE / "overlay.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def overlay():
    return _load_overlay()


def run_probe_subprocess(args: list[str], env: dict, cwd: Path, junit: Path) -> tuple[subprocess.CompletedProcess, ET.Element]:
    """`python -m tasks.probes ...` in the sandbox, as the pipeline runs it (stdout and stderr kept
    apart for the tests); returns the process and JUnit root."""
    from tasks.pipeline.sandbox import Sandbox

    sandbox = Sandbox()
    assert not sandbox.problem(), sandbox.problem()
    overlays = [Path(p) for p in env.get("PYTHONPATH", "").split(":") if p]
    for path in [cwd, *overlays]:
        path.chmod(0o755)  # pytest makes its temporary directories 0700: the sandbox's user may read these
    junit.write_bytes(b"")
    sandbox.give([junit])
    argv = sandbox.command([sys.executable, "-m", "tasks.probes", *args, "--junit-xml", str(junit)],
                           cwd=Path("/tmp"), python=sys.executable, readable=overlays, writable=[junit])
    proc = subprocess.run(argv, env=dict(env, HOME="/tmp", TMPDIR="/tmp"), cwd="/", capture_output=True,
                          text=True, timeout=600)
    assert junit.stat().st_size, f"no JUnit written (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc, ET.parse(junit).getroot()


@pytest.fixture(scope="session")
def probe_subprocess():
    return run_probe_subprocess


@pytest.fixture(scope="session")
def pristine_run(tmp_path_factory, overlay):
    """All probes once against the installed executorch, from an unrelated working directory."""
    cwd = tmp_path_factory.mktemp("pristine")
    env = overlay.overlay_env(cwd)  # PYTHONPATH points at an empty dir: nothing is shadowed
    return run_probe_subprocess(["--suite", "all", "--format", "json"], env, cwd, cwd / "probes.xml")
