"""Probe-test fixtures: regression patches laid over the installed package by the pipeline's
own overlay (tasks.pipeline.overlay), and one pristine run shared by several tests.

Probe subprocesses run inside the pipeline's sandbox (tasks.pipeline.sandbox), as a triage runs
them: the expectations of these tests, unchanged from before the sandbox, are the proof that
isolation changes no probe's result."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tasks.pipeline import overlay
from tasks.pipeline.build import Workspace
from tasks.pipeline.sandbox import scrubbed_env

REPO_ROOT = Path(__file__).resolve().parents[2]
REGRESSIONS = REPO_ROOT / "tasks" / "probes" / "regressions"


def installed_package() -> Path:
    return overlay.installed_package_dir(sys.executable)


def touched_files(patch: Path) -> list[str]:
    return [line[len("+++ b/"):].split("\t")[0].strip() for line in patch.read_text().splitlines()
            if line.startswith("+++ b/")]


def patched_files(patch: Path, scratch: Path) -> dict[str, bytes]:
    """The files `patch` touches as it leaves them: the installed copies with the patch applied."""
    for name in touched_files(patch):
        (scratch / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(installed_package() / name, scratch / name)
    subprocess.run(["git", "apply", str(patch)], cwd=scratch, check=True, capture_output=True, text=True)
    return {name: (scratch / name).read_bytes() for name in touched_files(patch)}


def regression_overlay(patch: Path, dest: Path) -> Path:
    """The installed package with `patch` applied, as the pipeline lays a change's Python files
    over it (a symlink farm; site-packages is never written); returns the PYTHONPATH entry."""
    root = dest / "overlay"
    overlay.lay_overlay(installed_package(), root, patched_files(patch, dest / "patched"))
    return root


def overlay_misses(root: Path, modules: list[str], scratch: Path, qnn=None) -> list[str]:
    """The pipeline's check that `modules` import from the overlay, not site-packages: the
    modules that do not (an empty list: the overlay wins). `qnn` (a tasks.qnn.sdk.QnnSdk) is
    needed to import executorch.backends.qualcomm at all."""
    scratch.mkdir(parents=True, exist_ok=True)
    for path in (scratch, root):
        path.chmod(0o755)  # the sandbox's user may read these
    ws = Workspace(repo=REPO_ROOT, python=sys.executable, installed=installed_package(), run_dir=scratch,
                   data_dir=scratch)
    env = scrubbed_env(scratch, sandbox=ws.sandbox, python=ws.python, pythonpath=[str(root)])
    env.update(qnn.env() if qnn else {})
    misses, note = overlay.verify_overlay(ws, env, root, root / overlay.PACKAGE, modules,
                                          readable=[qnn.root] if qnn else [])
    assert not note, note
    return misses


def overlay_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env["PYTHONPATH"] = str(root)
    return env


def run_probe_subprocess(args: list[str], env: dict, cwd: Path, junit: Path,
                         readable: list[Path] = ()) -> tuple[subprocess.CompletedProcess, ET.Element]:
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
                           cwd=Path("/tmp"), python=sys.executable, readable=[*overlays, *readable], writable=[junit])
    proc = subprocess.run(argv, env=dict(env, HOME="/tmp", TMPDIR="/tmp"), cwd="/", capture_output=True,
                          text=True, timeout=600)
    assert junit.stat().st_size, f"no JUnit written (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc, ET.parse(junit).getroot()


@pytest.fixture(scope="session")
def probe_subprocess():
    return run_probe_subprocess


@pytest.fixture(scope="session")
def pristine_run(tmp_path_factory):
    """All probes once against the installed executorch, from an unrelated working directory."""
    cwd = tmp_path_factory.mktemp("pristine")
    env = overlay_env(cwd)  # PYTHONPATH points at an empty dir: nothing is shadowed
    return run_probe_subprocess(["--suite", "all", "--format", "json"], env, cwd, cwd / "probes.xml")
