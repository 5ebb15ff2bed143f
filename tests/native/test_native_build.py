"""native.build on ExecuTorch's real sources, below the pipeline: a corrupt build folder is
configured again from scratch (and the compiler cache answers every object); a reused folder is
configured again when a commit adds or removes a kernel. Behind --run-slow
(their first builds cost minutes): the XNNPACK recipe rebuilds a change in the XNNPACK runtime
whose runner then runs the XNNPACK-delegated programs, and the aarch64 cross build's runner
runs the same bundle under qemu."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.pipeline import native, programs
from tasks.pipeline.sandbox import Sandbox, run_logged, scrubbed_env
from tasks.pipeline.tables import load_tables
from tests.native.conftest import trim_portable_kernels
from triage_rules import classify_text

# a cold machine builds ExecuTorch once inside the first test that builds (source_repo.short, conftest.py)
pytestmark = [pytest.mark.executorch, pytest.mark.timeout(2400)]


def test_a_corrupt_build_folder_is_configured_again_from_scratch(source_repo, native_data, tmp_path):
    spec = native.BuildSpec(source_repo.path, native_data, tmp_path / "run", sys.executable, Sandbox(),
                            use_cache=False)
    recipe = load_tables().recipes["portable"]
    first, _ = native.build(spec, recipe, source_repo.short, classify_text)
    assert first.status == "ok", first.log[-3000:]
    folder = native.native_dir(native_data) / native.repo_id(source_repo.path, source_repo.short) / "build" / "portable-host"
    cache = folder / "CMakeCache.txt"
    cache.write_text(cache.read_text() + "\x00this line is not a cache entry\n")

    again, _ = native.build(spec, recipe, source_repo.short, classify_text)
    assert again.status == "ok", again.log[-3000:]
    assert "does not parse" in again.fresh_folder and "configure" in again.steps
    assert "fresh build folder: its CMakeCache.txt does not parse" in again.summary()
    assert again.from_ccache and not again.compiled  # a fresh folder, every object from the compiler cache
    assert (Path(again.artifacts_dir) / "executor_runner").is_file()
    assert json.loads((Path(again.artifacts_dir) / "build.json").read_text())["commit"] == source_repo.short
    # and the folder it left is reused as it is: nothing to configure, nothing to compile
    third, _ = native.build(spec, recipe, source_repo.short, classify_text)
    assert third.fresh_folder == "" and "configure" not in third.steps and not third.compiled


def test_a_commit_that_removes_or_adds_a_kernel_configures_the_reused_folder_again(source_repo, native_data, tmp_path):
    """CMake globs the portable kernels at configure time: without configuring again, ninja
    wants the removed op_relu.cpp ("missing and no known rule to make it"), a failure that is
    not the change's, and would never compile a kernel a change adds."""
    spec = native.BuildSpec(source_repo.path, native_data, tmp_path / "run", sys.executable, Sandbox(),
                            use_cache=False)
    recipe = load_tables().recipes["portable"]
    start, _ = native.build(spec, recipe, source_repo.short, classify_text)
    assert start.status == "ok", start.log[-3000:]
    no_relu = source_repo.branch("no-relu", {}, start=source_repo.short, trim=lambda root: trim_portable_kernels(
        root, frozenset(f.stem[3:] for f in (root / "kernels/portable/cpu").glob("op_*.cpp")) - {"relu"}))

    removed, _ = native.build(spec, recipe, no_relu, classify_text)
    assert removed.status == "ok", removed.log[-3000:]
    assert removed.fresh_folder == "" and "configure" in removed.steps
    assert "kernels/portable/cpu/op_relu.cpp" in removed.reconfigured, removed.reconfigured
    assert "configured again: files added or removed since" in removed.summary()
    back, _ = native.build(spec, recipe, source_repo.short, classify_text)
    assert back.status == "ok", back.log[-3000:]
    assert "configure" in back.steps and "op_relu.cpp" in back.reconfigured
    assert "kernels/portable/cpu/op_relu.cpp" in back.from_ccache + back.compiled  # the added file is built
    same, _ = native.build(spec, recipe, source_repo.short, classify_text)
    assert same.reconfigured == "" and "configure" not in same.steps


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


@pytest.mark.slow
def test_a_cross_built_runner_runs_the_same_bundle_under_qemu(source_repo, native_data, tmp_path):
    """The aarch64 toolchain (a CMake toolchain file for g++-aarch64-linux-gnu) builds the
    portable runner; the same bundle and driver run it through a runner prefix (qemu), as a
    device target does through its transport."""
    missing = [t for t in ("aarch64-linux-gnu-g++", "qemu-aarch64-static") if not shutil.which(t)]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (scripts/system-deps.sh)")
    spec = native.BuildSpec(source_repo.path, native_data, tmp_path / "run", sys.executable, Sandbox(),
                            use_cache=False)
    built, _ = native.build(spec, load_tables().recipes["portable"], source_repo.base, classify_text,
                            toolchain=native.TOOLCHAINS["aarch64-linux-gnu"])
    assert built.status == "ok", built.log[-3000:]
    runner = Path(built.artifacts_dir) / "executor_runner"
    assert runner.read_bytes()[:4] == b"\x7fELF" and runner.read_bytes()[18] == 183  # e_machine: EM_AARCH64

    bundle, out = tmp_path / "bundle", tmp_path / "out"
    programs.export_bundle(bundle, {"portable"})
    out.mkdir()

    def execute(argv, log_path):
        done = run_logged(argv, cwd=out, env=scrubbed_env(out), log_path=log_path, timeout=300,
                          readable=[runner.parent, bundle], writable=[out])
        return done.returncode, done.seconds, done.log_path.read_text(errors="replace")

    runs = programs.run_bundle(bundle, ["qemu-aarch64-static", "-L", "/usr/aarch64-linux-gnu", str(runner)],
                               out, execute)
    outcomes = programs.judge(bundle, out, runs, {"portable"})
    assert outcomes and all(o.outcome == "passed" for o in outcomes), [(o.program.name, o.message) for o in outcomes]
