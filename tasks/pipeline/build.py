"""Stage 2, rebuild: the overlay for Python changes, the configured CMake recipe for native ones.

Native builds are cached under <data_dir>/build-cache/<recipe>-<key>, where the key hashes
the recipe's commands and the blob ids of every file the recipe depends on. A build runs
in the run's own directory and is moved into the cache with one atomic rename while holding
the cache's lock file, so concurrent triage runs never share a half-written build.
"""
from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import shutil
import tarfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tasks.pipeline import gitio, native, overlay
from tasks.pipeline.sandbox import Sandbox, run_logged, scrubbed_env
from tasks.pipeline.tables import Recipe, Tables
from tasks.records import BuildResult, ChangedFile
from triage_rules.records import Failure


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


@contextmanager
def cache_lock(data_dir: Path):
    lock_path = data_dir / "build-cache" / ".lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def recipe_key(ws: Workspace, recipe: Recipe, commit: str) -> str:
    blobs = gitio.ls_tree(ws.repo, commit)
    inputs = sorted((p, sha) for p, sha in blobs.items() if recipe.covers(p))
    payload = json.dumps({"recipe": recipe.name, "commands": recipe.commands, "inputs": inputs})
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def export_tree(ws: Workspace, commit: str, dest: Path) -> Path:
    """The commit's files (git archive), for recipes that build from source."""
    if dest.exists():
        return dest
    dest.mkdir(parents=True)
    data = gitio.git(ws.repo, "archive", "--format=tar", commit, binary=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def run_cmake_recipe(ws: Workspace, recipe: Recipe, commit: str, classify) -> tuple[str, str, list[Failure], str, bool]:
    """Build one native recipe: (status, build_dir, failures, log_excerpt, cache_hit)."""
    key = recipe_key(ws, recipe, commit)
    cached = ws.data_dir / "build-cache" / f"{recipe.name}-{key}"
    if ws.use_cache and cached.is_dir():
        return "ok", str(cached), [], "", True
    src = export_tree(ws, commit, ws.run_dir / f"src-{commit[:12]}")
    build_dir = ws.run_dir / f"build-{recipe.name}"
    build_dir.mkdir(parents=True, exist_ok=True)
    env = scrubbed_env(ws.run_dir, sandbox=ws.sandbox, python=ws.python, pass_through=dict(ws.tool_env))
    values = {"src": str(src), "build": str(build_dir), "jobs": str(ws.jobs)}
    log_path = ws.run_dir / "logs" / f"build-{recipe.name}.log"
    for step, command in enumerate(recipe.commands):
        cmd = [arg.format(**values) for arg in command]
        done = run_logged(cmd, cwd=src, env=env, log_path=log_path.with_suffix(f".{step}.log"),
                          timeout=ws.build_timeout, sandbox=ws.sandbox, python=ws.python,
                          readable=[src], writable=[build_dir])
        if done.returncode != 0:
            text = done.log_path.read_text(errors="replace")
            failures = classify(text, job_name=f"build {recipe.name}", failed=True)
            return "failed", str(build_dir), failures, done.tail(4000), False
    if ws.use_cache:
        with cache_lock(ws.data_dir):
            if not cached.exists():
                os.rename(build_dir, cached)  # same file system: atomic
                build_dir = cached
    return "ok", str(build_dir), [], "", False


def build_commit(ws: Workspace, tables: Tables, commit: str, changes: list[ChangedFile],
                 recipes: list[str], classify, progress=lambda msg: None) -> BuildResult:
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
        progress(f"build {name} at {commit[:12]} ...")
        spec = native.BuildSpec(ws.repo, ws.data_dir, ws.run_dir, ws.python, ws.sandbox, ws.jobs,
                                ws.build_timeout, ws.use_cache, ws.tool_env)
        built, failures = native.build(spec, recipe, commit, classify, progress=progress)
        progress(f"build {built.summary()}")
        result.reason = "; ".join(filter(None, [result.reason, built.summary()]))
        if built.status == "not_run":
            continue
        result.build_dirs[name] = built.artifacts_dir
        if built.cached:
            result.cache_hits.append(name)
        if built.status != "ok":
            result.status = "failed"
            result.failures.extend(failures)
            result.log_excerpt = built.log[-4000:]
            break
    result.seconds = round(time.monotonic() - start, 2)
    return result
