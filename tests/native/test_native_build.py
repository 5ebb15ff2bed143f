"""native.build on ExecuTorch's real sources, below the pipeline: a corrupt build folder is
configured again from scratch (and the compiler cache answers every object), and the XNNPACK
recipe (behind --run-slow: its first build costs minutes) rebuilds a change in the XNNPACK
runtime whose runner then runs the XNNPACK-delegated programs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.pipeline import native
from tasks.pipeline.sandbox import Sandbox
from tasks.pipeline.tables import load_tables
from triage_rules import classify_text

pytestmark = pytest.mark.executorch


def test_a_corrupt_build_folder_is_configured_again_from_scratch(source_repo, native_data, tmp_path):
    spec = native.BuildSpec(source_repo.path, native_data, tmp_path / "run", sys.executable, Sandbox(),
                            use_cache=False)
    recipe = load_tables().recipes["portable"]
    first, _ = native.build(spec, recipe, source_repo.base, classify_text)
    assert first.status == "ok", first.log[-3000:]
    folder = native.native_dir(native_data) / native.repo_id(source_repo.path, source_repo.base) / "build" / "portable-host"
    cache = folder / "CMakeCache.txt"
    cache.write_text(cache.read_text() + "\x00this line is not a cache entry\n")

    again, _ = native.build(spec, recipe, source_repo.base, classify_text)
    assert again.status == "ok", again.log[-3000:]
    assert "does not parse" in again.fresh_folder and "configure" in again.steps
    assert "fresh build folder: its CMakeCache.txt does not parse" in again.summary()
    assert again.from_ccache and not again.compiled  # a fresh folder, every object from the compiler cache
    assert (Path(again.artifacts_dir) / "executor_runner").is_file()
    assert json.loads((Path(again.artifacts_dir) / "build.json").read_text())["commit"] == source_repo.base
    # and the folder it left is reused as it is: nothing to configure, nothing to compile
    third, _ = native.build(spec, recipe, source_repo.base, classify_text)
    assert third.fresh_folder == "" and "configure" not in third.steps and not third.compiled


@pytest.mark.slow
def test_an_xnnpack_runtime_change_rebuilds_the_xnnpack_runner(source_repo, native_data):
    rel = "backends/xnnpack/runtime/XNNCompiler.cpp"
    head = source_repo.branch("xnn-touch", {rel: lambda t: t.replace(
        "namespace delegate {\n", "namespace delegate {\n[[maybe_unused]] static int etriage_touch = 1;\n", 1)})
    proc = subprocess.run([sys.executable, "-m", "etriage.cli", "triage", "--repo", str(source_repo.path),
                           "--base", "main", "--head", head, "--suite", "probes", "--target", "host-native",
                           "--data-dir", str(native_data), "--format", "json", "--no-cache"],
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["plan"]["recipes"] == ["xnnpack"] and data["build"]["status"] == "ok", data["build"]
    [suite] = [s for s in data["suites"] if s["target"] == "host-native"]
    tests = {t["test"]: t["outcome"] for t in suite["tests"]}
    assert tests.get("multi_method::two_methods_xnnpack_portable") == "passed", tests
    assert tests.get("mutable_buffer::kv_cache_steps_xnnpack") == "passed", tests
    assert data["summary"]["new"] == 0
