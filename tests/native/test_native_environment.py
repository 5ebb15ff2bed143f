"""Compiled parts of a commit, decided and built on ExecuTorch v1.4.1's real sources (the
archive, plus pybind11, tagged v1.4.1 as upstream tags the wheel's commit).

Always on: the repository's layout maps to the wheel's package file for file; the merge base's
native sources equal the wheel's, so its .so files serve; a Python-only change keeps them; a
change to a portable kernel needs its own build, and then both sides are built alike.
With --run-slow: that build, for real (the `pybind` recipe in the sandbox, with the compiler
cache; cold about 519 s on a quiet machine, one .cpp about 7 s), and a triage through
`etriage triage` whose new failure is at that .cpp."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tasks import environments
from tasks.environments import layout
from tasks.pipeline.build import Workspace, compiled_choices
from tasks.pipeline.overlay import installed_package_dir

pytestmark = [pytest.mark.executorch, pytest.mark.timeout(7200)]
OP_ADD = "kernels/portable/cpu/op_add.cpp"
REAL_ADD = "return val_a + val_alpha * val_b;"


def workspace(source_repo, data: Path, run_dir: Path) -> Workspace:
    return Workspace(repo=source_repo.path, python=sys.executable, installed=installed_package_dir(sys.executable),
                     run_dir=run_dir, data_dir=data)


def sign_bug(text: str) -> str:
    first = text.index(REAL_ADD)
    at = text.index(REAL_ADD, first + 1)  # add_out's real-number branch
    return text[:at] + "return val_a - val_alpha * val_b;" + text[at + len(REAL_ADD):]


def test_the_repository_layout_is_the_wheels_package_file_for_file(source_repo):
    table = environments.table()
    files = layout.package_files(source_repo.path, source_repo.base, table)
    installed = installed_package_dir(sys.executable)
    index = layout.package_index(installed, table, source_repo.path.parent / "index")
    modules = [p for p in files if p.endswith(".py")]
    assert len(modules) > 3000
    assert [p for p in modules if index.get(p) != files[p].blob] == []
    assert files["exir/_serialize/program.fbs"].blob == index["exir/_serialize/program.fbs"]  # setup.py's copy


def test_python_changes_keep_the_wheels_compiled_parts_and_a_kernel_change_builds_both_sides(source_repo, tmp_path):
    ws = workspace(source_repo, tmp_path / "data", tmp_path / "run")
    python_only = source_repo.branch("env-python-only", {"exir/backend/backend_api.py": lambda t: "# a comment\n" + t})
    kernel = source_repo.branch("env-op-add", {OP_ADD: sign_bug})

    base = environments.choose_compiled(ws.environments(), source_repo.base)
    assert (base.source, base.release) == ("wheel", "1.4.1") and "tag v1.4.1" in base.reason
    assert compiled_choices(ws, [source_repo.base, python_only])[python_only].source == "wheel"
    pair = compiled_choices(ws, [source_repo.base, kernel])
    assert pair[kernel].source == "built" and pair[kernel].native_key != base.native_key
    assert pair[source_repo.base].source == "built"  # made the same way as head's
    assert pair[source_repo.base].native_key == base.native_key


@pytest.mark.slow
def test_a_kernel_bug_is_built_into_the_commits_pybindings_and_caught_at_its_cpp(source_repo, native_data):
    head = source_repo.branch("env-op-add-triage", {OP_ADD: sign_bug})
    proc = subprocess.run([sys.executable, "-m", "etriage.cli", "triage", "--repo", str(source_repo.path),
                           "--base", "main", "--head", head, "--suite", "probes", "--target", "host",
                           "--data-dir", str(native_data), "--format", "json"],
                          capture_output=True, text=True, timeout=7000)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    head_env, base_env = data["build"]["environment"], data["base_environment"]
    assert head_env["compiled"] == base_env["compiled"] == "built", (head_env, base_env)
    assert base_env["healthy"] is True, base_env["health"]
    assert Path(head_env["compiled_dir"]).name == "executorch"
    new = [r for r in data["results"] if r["verdict"] == "new"]
    assert new, (data["summary"], proc.stderr[-3000:])
    assert {r["suspects"][0]["path"] for r in new} == {OP_ADD}
