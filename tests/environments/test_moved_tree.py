"""Each side on its own commit's environment, on a tree that has moved past the installed wheel
(conftest.py: the wheel's package plus upstream 6a44f599b9's move of
`copy_exported_program_for_preprocess` into backend_details.py).

Laying only a change's files over the wheel fails there; laying the commit's whole tree passes;
through `etriage triage`, a comment-only change gives no new failure and a real regression is
still caught at its file."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tasks import environments
from tasks.environments import health
from tasks.pipeline import gitio
from tasks.pipeline.overlay import lay_overlay
from tasks.pipeline.sandbox import Sandbox

REGRESSIONS = Path(__file__).resolve().parents[2] / "tasks" / "probes" / "regressions"
pytestmark = [pytest.mark.executorch, pytest.mark.timeout(1800)]
API = "exir/backend/backend_api.py"


def add_comment(repo: Path) -> None:
    path = repo / API
    path.write_text(path.read_text().replace("def lower_all_submodules_to_backend(",
                                             "# etriage: a comment, nothing else\ndef lower_all_submodules_to_backend(", 1))


def triage_cli(repo, head, data_dir, *extra) -> tuple[dict, str]:
    proc = subprocess.run([sys.executable, "-m", "etriage.cli", "triage", "--repo", str(repo), "--base", "main",
                           "--head", head, "--suite", "probes", "--target", "host", "--data-dir", str(data_dir),
                           "--format", "json", *extra], capture_output=True, text=True, timeout=1700)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), proc.stderr


def test_laying_only_the_changed_files_fails_and_the_whole_tree_passes(moved_repo, installed, tmp_path):
    head = moved_repo.branch("comment-lay", edit=add_comment)
    # the old rebuild: the wheel's package with the change's one file swapped in
    only_changed = tmp_path / "only-changed"
    lay_overlay(installed, only_changed, {API: gitio.show(moved_repo.path, head, API)})
    old = health.check(only_changed, only_changed / "executorch", [], [], python=sys.executable, sandbox=Sandbox(),
                       work_dir=tmp_path / "work-old", expected_torch="")
    assert not old.healthy and "copy_exported_program_for_preprocess" in old.detail, old.detail

    ctx = environments.Context(repo=moved_repo.path, python=sys.executable, installed=installed,
                               data_dir=tmp_path / "data", run_dir=tmp_path / "run")
    env, failures = environments.environment_for(ctx, head)
    assert (env.status, env.compiled, env.healthy) == ("ok", "wheel", True), (env.reason, env.health)
    assert env.written == 2 and not failures  # backend_api.py (moved, and commented) and backend_details.py
    laid = Path(env.package_dir)
    assert "copy_exported_program_for_preprocess" in (laid / "exir/backend/backend_details.py").read_text()
    assert (laid / "exir/backend/backend_details.py").stat().st_nlink >= 2  # a link to the blob store
    assert (laid / "exir/_serialize").is_symlink()  # untouched directories are the wheel's own
    assert env.torch.startswith("2.13.0")


def test_a_comment_only_change_on_the_moved_tree_gives_no_new_failure(moved_repo, env_data):
    head = moved_repo.branch("comment-only", edit=add_comment)
    data, log = triage_cli(moved_repo.path, head, env_data)

    assert data["summary"]["new"] == 0, (data["summary"], [r["failure"]["line"] for r in data["results"]], log[-3000:])
    [probes] = [s for s in data["suites"] if s["suite"] == "probes"]
    assert probes["status"] == "ran" and probes["tests"] and all(t["outcome"] == "passed" for t in probes["tests"])
    head_env, base_env = data["build"]["environment"], data["base_environment"]
    assert head_env["commit"] == head and base_env["commit"] == moved_repo.base
    assert head_env["compiled"] == base_env["compiled"] == "wheel"
    # no failure at head rests on the merge base: its environment is made, its health not needed
    assert base_env["status"] == "ok" and base_env["healthy"] is None


def test_a_real_regression_on_the_moved_tree_is_still_caught_at_its_file(moved_repo, env_data):
    head = moved_repo.branch("first-partitioner", patch=REGRESSIONS / "multi_method_first_partitioner_for_all.patch")
    data, log = triage_cli(moved_repo.path, head, env_data)

    new = [r for r in data["results"] if r["verdict"] == "new"]
    assert new, (data["summary"], log[-3000:])
    assert all(r["base"] == "passed" for r in new)
    assert {r["suspects"][0]["path"] for r in new} == {API}
    assert any(r["failure"]["category"] == "multi_method_lowering" for r in new)
    base_env = data["base_environment"]  # the verdicts rest on it: shown healthy first
    assert base_env["healthy"] is True and "runs a program lowered to XNNPACK" in base_env["health"]
