"""Stage 2, rebuild: the overlay for Python changes, the CMake recipes for native ones.

Native builds (tasks/pipeline/native.py, docs/NATIVE.md) are incremental: one source checkout
per repository moved to the commit, a configured build folder per recipe and toolchain, a
shared compiler cache; their artifacts are cached under
<data_dir>/build-cache/<recipe>-<toolchain>-<key>, where the key hashes the recipe and the blob
ids of every file the recipe depends on.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from tasks.pipeline import native, overlay
from tasks.pipeline.sandbox import Sandbox, scrubbed_env
from tasks.pipeline.tables import Tables
from tasks.records import BuildResult, ChangedFile


@dataclass(frozen=True)
class Workspace:
    """Where one triage run may write, and what it runs with. Passed in, never global."""

    repo: Path
    python: str
    installed: Path  # the installed executorch package directory
    run_dir: Path  # this run only; removed afterwards
    data_dir: Path  # shared between runs: caches
    use_cache: bool = True
    jobs: int = 2
    build_timeout: float = 3600
    tool_env: tuple[tuple[str, str], ...] = ()  # e.g. QNN_SDK_ROOT; see sandbox.PASS_THROUGH
    sandbox: Sandbox = field(default_factory=Sandbox)  # every command of the change runs in it


def build_commit(ws: Workspace, tables: Tables, commit: str, changes: list[ChangedFile],
                 recipes: list[str], classify, progress=lambda msg: None,
                 toolchains: tuple[str, ...] = ("host",)) -> BuildResult:
    """The overlay, then each cmake recipe with each toolchain (a device target with the change's
    rebuilt runner asks for its machine's, e.g. aarch64-linux-gnu); build_dirs keys are the
    recipe for the host and `<recipe>@<toolchain>` for a cross build."""
    start = time.monotonic()
    overlay_recipe = next((r for r in tables.recipes.values() if r.kind == "overlay"), None)
    covers = overlay_recipe.covers if overlay_recipe else (lambda path: False)
    overlay_root = ws.run_dir / f"overlay-{commit[:12]}"
    if overlay_root.exists():
        shutil.rmtree(overlay_root)
    package_dir, written, removed = overlay.build_overlay(
        ws.repo, commit, changes, ws.installed, overlay_root, covers)
    result = BuildResult(status="ok", kind="overlay", commit=commit, overlay_dir=str(overlay_root),
                         package_dir=str(package_dir))
    if written or removed:
        progress(f"overlay for {commit[:12]}: {len(written)} file(s) replaced/added, {len(removed)} removed")
        modules = [m for m in map(overlay.module_name, written) if m][:5]
        env = scrubbed_env(ws.run_dir, sandbox=ws.sandbox, python=ws.python, pythonpath=[str(overlay_root)])
        mismatched, note = overlay.verify_overlay(ws, env, overlay_root, package_dir, modules)
        if mismatched:
            result.status, result.reason = "failed", "; ".join(mismatched)
        elif note:
            result.reason = note

    for name in recipes:
        recipe = tables.recipes[name]
        if recipe.kind != "cmake":
            continue
        result.kind = "overlay+cmake"
        if not recipe.enabled:
            result.reason = "; ".join(filter(None, [result.reason, f"{name}: not built ({recipe.disabled_reason})"]))
            progress(f"build {name}: skipped ({recipe.disabled_reason})")
            continue
        spec = native.BuildSpec(ws.repo, ws.data_dir, ws.run_dir, ws.python, ws.sandbox, ws.jobs,
                                ws.build_timeout, ws.use_cache, ws.tool_env)
        for toolchain in toolchains:
            key = name if toolchain == "host" else f"{name}@{toolchain}"
            progress(f"build {key} at {commit[:12]} ...")
            built, failures = native.build(spec, recipe, commit, classify, toolchain=native.TOOLCHAINS[toolchain],
                                           progress=progress)
            progress(f"build {built.summary()}")
            result.reason = "; ".join(filter(None, [result.reason, built.summary()]))
            if built.status == "not_run":
                continue
            result.build_dirs[key] = built.artifacts_dir
            if built.cached:
                result.cache_hits.append(key)
            if built.status != "ok":
                result.status = "failed"
                result.failures.extend(failures)
                result.log_excerpt = built.log[-4000:]
                break
        if result.status == "failed":
            break
    result.seconds = round(time.monotonic() - start, 2)
    return result
