"""The environment of one commit: one door, `environment_for(context, commit)`.

What runs for a commit is that commit, whole (docs/ENVIRONMENTS.md):
- its **entire Python tree** of the package (layout.py), laid over
- **its compiled parts** (compiled.py): the installed wheel's when its native sources equal the
  wheel's, a registry wheel of the exact release it is, or built from its own sources;
- with **the torch it pins** (torchpin.py): the installed one when it matches, else the pin from
  the registry, else an environment that names the pin and runs nothing;
- and a **health check** (health.py): the package imports and a small lowered program runs.

The pipeline's rebuild stage (tasks/pipeline/build.py) calls this for the merge base and for the
head; the Celery `build` queue calls it for a pushed branch tip so a PR opened on it starts warm
(tasks/jobs.py `warm_environment`). Everything is cached in <data>/environments (store.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from tasks.environments import compiled, health, layout, store, torchpin
from tasks.pipeline import gitio, native
from tasks.pipeline.sandbox import Sandbox
from tasks.pipeline.tables import Recipe, load_tables
from tasks.records import CommitEnvironment
from triage_rules import catalogue

__all__ = ["Context", "environment_for", "choose_compiled", "not_the_package", "recipe_of", "CommitEnvironment"]


@dataclass(frozen=True)
class Context:
    """Where environments are made and with what. Passed in, never global."""

    repo: Path
    python: str
    installed: Path  # the installed executorch package: the wheel
    data_dir: Path  # <data>/environments is the store; native builds use <data>/native
    run_dir: Path  # logs and uncached builds of this run
    sandbox: Sandbox = field(default_factory=Sandbox)
    jobs: int = 2
    build_timeout: float = 3600
    use_cache: bool = True
    fetch: bool = True  # may fetch a registry wheel or a pinned torch
    shared_store: Path | None = None  # built parts published between machines (ETRIAGE_ENV_SHARED_STORE)
    tool_env: tuple[tuple[str, str], ...] = ()
    # what builds compiled parts: the default tables' `pybind` unless given (None: nothing does)
    recipe: Recipe | None = field(default_factory=lambda: recipe_of(load_tables()))

    @property
    def store(self) -> Path:
        return Path(self.data_dir) / "environments"


def table():
    return catalogue.read_table("environments.yaml")


def recipe_of(tables) -> Recipe | None:
    """The tables' recipe that builds a commit's compiled parts (environments.yaml names it);
    None when a worker's tables have none: the installed wheel's compiled parts then serve."""
    recipe = tables.recipes.get(table().recipe)
    return recipe if recipe is not None and recipe.kind == "environment" else None


def not_the_package(ctx: Context) -> compiled.Choice:
    """A repository whose tree does not hold the executorch package (its docs, a downstream
    project): the installed package serves, with the commit's package files laid over it."""
    return compiled.Choice("wheel", "", compiled.installed_wheel(ctx.installed).release, whole=False,
                           reason="the repository does not hold the executorch package: the installed one "
                                  "serves, with the commit's files of it laid over")


def choose_compiled(ctx: Context, commit: str) -> compiled.Choice:
    """Which compiled parts the commit needs, without making anything (cheap: tree hashes)."""
    recipe = ctx.recipe
    if not layout.has_package(layout.package_files(ctx.repo, commit, table())):
        return not_the_package(ctx)
    if recipe is None:
        return compiled.Choice("wheel", "", compiled.installed_wheel(ctx.installed).release,
                               reason="these tables build no compiled parts (no `kind: environment` recipe): "
                                      "the installed wheel's serve, unchecked")
    return compiled.choose(ctx.repo, commit, compiled.installed_wheel(ctx.installed), recipe, registry_ok=ctx.fetch)


def environment_for(ctx: Context, commit: str, *, choice: compiled.Choice | None = None, classify=None,
                    progress=lambda message: None, check_health: bool = True) -> tuple[CommitEnvironment, list]:
    """The commit's environment, made or found; and the engine's failures of a build of its
    compiled parts that failed (the change's own compile error, when it is the head's).
    `choice`: the compiled parts decided by the caller (the pipeline builds both sides when one
    of them must be built, so both run on compiled parts made the same way)."""
    steps: dict[str, float] = {}
    env = CommitEnvironment(commit=commit, status="ok", python=ctx.python)
    t = time.monotonic()
    try:
        spec = table()
        files = layout.package_files(ctx.repo, commit, spec)
        choice = choice or choose_compiled(ctx, commit)
    except (gitio.GitError, OSError) as error:
        return _failed(env, f"could not read the commit's tree: {error}", steps), []
    env.compiled, env.compiled_reason, env.native_key = choice.source, choice.reason, choice.native_key
    env.release = choice.release
    steps["choose"] = round(time.monotonic() - t, 2)
    progress(f"environment {commit[:12]}: {choice.reason}")

    t = time.monotonic()
    parts, failures = _compiled_parts(ctx, commit, choice, spec, classify, progress)
    steps["compiled"] = round(time.monotonic() - t, 2)
    if not parts.ok:
        env.steps = steps
        return _failed(env, parts.reason, steps), failures
    env.compiled_dir = str(parts.package_dir)

    pin, pinned_in = torchpin.read_pin(ctx.repo, commit, spec.torch_pins)
    site_packages = Path(ctx.installed).parent
    t = time.monotonic()
    torch = torchpin.choose(pin, pinned_in, torchpin.installed_torch(site_packages), ctx.store,
                            Path(ctx.run_dir) / "logs", fetch=ctx.fetch)
    steps["torch"] = round(time.monotonic() - t, 2)
    env.torch_pin, env.torch = torch.pin, torch.version
    if torch.reason:
        return _failed(env, torch.reason, steps), []

    t = time.monotonic()
    try:
        index = layout.package_index(parts.package_dir, spec, ctx.store / "index")
        version_py = layout.version_file(ctx.repo, commit, files, compiled.declared_release(ctx.repo, commit))
        laid = layout.lay(ctx.repo, commit, files, parts.package_dir, index, spec,
                          ctx.store if ctx.use_cache else Path(ctx.run_dir) / "environments",
                          version_py if choice.whole else "", whole=choice.whole)
    except (gitio.GitError, OSError, ValueError) as error:  # ValueError: treepaths.UnsafePath
        return _failed(env, f"could not lay the commit's tree: {error}", steps), []
    steps["lay"] = round(time.monotonic() - t, 2)
    env.root, env.package_dir, env.tree_key = str(laid.root), str(laid.package_dir), laid.key
    env.written, env.removed = laid.written, laid.removed
    env.pythonpath = [torch.directory] if torch.directory else []
    env.readable = [str(p) for p in parts.readable] + env.pythonpath
    progress(f"environment {commit[:12]}: tree {'reused' if laid.reused else 'laid'} "
             f"({laid.written} file(s) from the commit over {choice.source} compiled parts, "
             f"{laid.removed} module(s) absent), torch {torch.version}")

    if check_health and choice.source == "wheel" and not (laid.written or laid.removed or version_py) \
            and not env.pythonpath:
        # byte for byte the worker's own installation: there is nothing made to check
        env.health = "the installed package itself (no file of it differs): not checked again"
    elif check_health:
        t = time.monotonic()
        verdict = health.check(laid.root, laid.package_dir, env.pythonpath, [Path(p) for p in env.readable],
                               python=ctx.python, sandbox=ctx.sandbox, work_dir=Path(ctx.run_dir) / "health",
                               expected_torch=torch.pin or torch.version)
        steps["health"] = round(time.monotonic() - t, 2)
        env.healthy, env.health = verdict.healthy, verdict.detail
        progress(f"environment {commit[:12]}: {'healthy' if verdict.healthy else 'NOT healthy'}: {verdict.detail}")
    env.steps = steps
    if ctx.use_cache:
        store.prune(ctx.store, int(spec.disk_cap_gib * (1 << 30)), keep={laid.key, choice.native_key})
    return env, []


def _compiled_parts(ctx: Context, commit: str, choice: compiled.Choice, spec, classify, progress):
    if choice.source == "wheel":
        return compiled.Parts(True, Path(ctx.installed)), []
    if choice.source == "registry":
        return compiled.registry_parts(ctx.store, choice.release, Path(ctx.run_dir) / "logs"), []
    if ctx.shared_store and ctx.use_cache:
        adopted = store.adopt(Path(ctx.shared_store), choice.native_key, ctx.store)
        if adopted:
            progress(f"environment {commit[:12]}: compiled parts from the shared store")
            return compiled.Parts(True, adopted / "executorch", (adopted,)), []
    build_spec = native.BuildSpec(ctx.repo, ctx.data_dir, ctx.run_dir, ctx.python, ctx.sandbox, ctx.jobs,
                                  ctx.build_timeout, ctx.use_cache, ctx.tool_env,
                                  shared_ccache=Path(ctx.shared_store) / "ccache" if ctx.shared_store else None)
    parts = compiled.built_parts(build_spec, ctx.recipe, commit, ctx.store, spec,
                                 classify or (lambda text, **kw: []), progress)
    if parts.ok and ctx.shared_store and ctx.use_cache:
        store.publish(Path(parts.readable[0]), Path(ctx.shared_store))
    return parts, list(parts.failures or [])


def _failed(env: CommitEnvironment, reason: str, steps: dict[str, float]) -> CommitEnvironment:
    env.status, env.reason, env.healthy, env.steps = "failed", reason, False, steps
    return env
