"""Stage 2, rebuild: the commit's environment, then the CMake recipes of native changes.

The environment (tasks/environments/: the commit's whole Python tree of the package over that
commit's compiled parts, with its torch; docs/ENVIRONMENTS.md) is what every suite of that commit
runs on, at head and at the merge base alike. The overlay check still asks that the changed
modules resolve into it.

Native builds (tasks/pipeline/native.py, docs/NATIVE.md) are incremental: one source checkout
per repository moved to the commit, a configured build folder per recipe and toolchain, a
shared compiler cache; their artifacts are cached under
<data_dir>/build-cache/<recipe>-<toolchain>-<key>, where the key hashes the recipe and the blob
ids of every file the recipe depends on.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from tasks import environments
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
    fetch: bool = True  # environments may fetch a registry wheel or a pinned torch
    shared_store: Path | None = None  # built compiled parts shared between machines

    def environments(self, tables: Tables | None = None) -> environments.Context:
        """The environments' context; `tables` name the recipe that builds compiled parts."""
        return environments.Context(repo=self.repo, python=self.python, installed=self.installed,
                                    data_dir=self.data_dir, run_dir=self.run_dir, sandbox=self.sandbox,
                                    jobs=self.jobs, build_timeout=self.build_timeout, use_cache=self.use_cache,
                                    fetch=self.fetch, shared_store=self.shared_store, tool_env=self.tool_env,
                                    **({"recipe": environments.recipe_of(tables)} if tables else {}))


def compiled_choices(ws: Workspace, commits: list[str], tables: Tables | None = None, *,
                     python_runtime: bool = True) -> dict[str, environments.compiled.Choice]:
    """The compiled parts each commit needs. When one of them must be built from its sources,
    all are: a build makes fewer extension modules than the wheel has (no QNN, CoreML or LLM
    parts), and a test must not fail at head only because head's compiled parts were made
    another way than the merge base's. The first of `commits` is the merge base: when it does not
    hold the executorch package, the repository is not ExecuTorch, and every side runs on the
    installed package with its commit's files of it laid over.
    `python_runtime` False: no planned target runs a suite in ExecuTorch's Python runtime (each
    runs the change's programs on a runner its cmake recipe rebuilds), so Python only exports
    programs and the installed wheel's compiled parts serve both sides: nothing is built for it."""
    ctx = ws.environments(tables)
    choices = {c: environments.choose_compiled(ctx, c) for c in dict.fromkeys(commits)}
    if not choices[commits[0]].whole:  # the merge base does not hold the package: nor is the repository
        return {c: environments.not_the_package(ctx) for c in choices}
    if not python_runtime and any(c.source == "built" for c in choices.values()):
        wheel = environments.compiled.installed_wheel(ctx.installed)
        return {commit: environments.compiled.Choice(
            "wheel", choice.native_key, wheel.release,
            reason="no planned target runs the Python runtime (the change's programs run on the runner "
                   "rebuilt from its sources): the installed wheel's compiled parts export them")
                for commit, choice in choices.items()}
    if any(c.source == "built" for c in choices.values()):
        for commit, choice in choices.items():
            if choice.source != "built":
                choices[commit] = environments.compiled.Choice(
                    "built", choice.native_key,
                    reason=f"{choice.reason.split(':')[0]}, but the other side's must be built: built from "
                           "this commit's sources too, so both sides' compiled parts are made alike")
    return choices


def build_commit(ws: Workspace, tables: Tables, commit: str, changes: list[ChangedFile],
                 recipes: list[str], classify, progress=lambda msg: None,
                 toolchains: tuple[str, ...] = ("host",), choice=None, check_health: bool = False) -> BuildResult:
    """The commit's environment, then each cmake recipe with each toolchain (a device target
    with the change's rebuilt runner asks for its machine's, e.g. aarch64-linux-gnu);
    build_dirs keys are the recipe for the host and `<recipe>@<toolchain>` for a cross build.
    status `environment`: the commit's environment could not be made (reason says why);
    `failed`: the change's own build failed (its compile error is in `failures`). `check_health`:
    show the environment healthy first (the merge base: tasks/pipeline/run.py); an unhealthy one
    is reported in `environment.healthy`, the caller decides."""
    start = time.monotonic()
    if choice is None:
        choice = compiled_choices(ws, [commit], tables)[commit]
    env, env_failures = environments.environment_for(ws.environments(tables), commit, choice=choice,
                                                     classify=classify, progress=progress,
                                                     check_health=check_health)
    result = BuildResult(status="ok", kind="environment", commit=commit, overlay_dir=env.root or None,
                         package_dir=env.package_dir or None, pythonpath=list(env.pythonpath),
                         readable=list(env.readable), environment=env)
    if env.status != "ok":
        compile_error = [f for f in env_failures if f.category == "build_failure"]
        result.status = "failed" if compile_error else "environment"
        result.failures = compile_error
        result.reason = env.reason
        result.seconds = round(time.monotonic() - start, 2)
        return result
    overlay_recipe = next((r for r in tables.recipes.values() if r.kind == "overlay"), None)
    covers = overlay_recipe.covers if overlay_recipe else (lambda path: False)
    written = sorted({f.path for f in changes if f.status != "D" and covers(f.path)
                      and f.mode not in ("120000", "160000")})  # links are not laid as modules
    modules = [m for m in map(overlay.module_name, written) if m][:5]
    if modules:
        progress(f"environment for {commit[:12]}: {len(written)} changed file(s) of the change in its tree")
        root, package_dir = Path(env.root), Path(env.package_dir)
        env_vars = scrubbed_env(ws.run_dir, sandbox=ws.sandbox, python=ws.python,
                                pythonpath=[str(root), *env.pythonpath])
        mismatched, note = overlay.verify_overlay(ws, env_vars, root, package_dir, modules,
                                                  readable=[Path(p) for p in env.readable])
        if mismatched:
            result.status, result.reason = "failed", "; ".join(mismatched)
        elif note:
            result.reason = note

    for name in recipes:
        recipe = tables.recipes[name]
        if recipe.kind != "cmake":
            continue
        result.kind = "environment+cmake"
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
