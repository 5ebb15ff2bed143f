"""Probe-test fixtures: the overlay helper and one pristine run shared by several tests."""
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
    """`python -m tasks.probes ...` as the pipeline runs it; returns the process and JUnit root."""
    proc = subprocess.run(
        [sys.executable, "-m", "tasks.probes", *args, "--junit-xml", str(junit)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert junit.exists(), f"no JUnit written (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}"
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
