"""The declarative tables in triage_rules/tables/*.yaml as the pipeline's records.

The files are read and validated by their models in `triage_rules.catalogue` (unknown keys,
wrong types and bad values are errors with file and line, so a typo never silently turns a rule
off); this module turns them into the frozen records the planner, builder and targets use.
`load_tables(dir)` takes another directory for tests and for workers with their own recipes.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path

from triage_rules import catalogue
from triage_rules.catalogue import TableError

__all__ = ["DEFAULT_DIR", "TableError", "Area", "Suite", "Selection", "Recipe", "TargetSpec", "Tables",
           "load_tables"]

DEFAULT_DIR = catalogue.TABLES


@dataclass(frozen=True)
class Area:
    name: str
    patterns: tuple[str, ...]
    backends: str | tuple[str, ...] = ()  # tuple, "all" or "from_path"
    docs: bool = False

    def matches(self, path: str) -> bool:
        return any(fnmatchcase(path, p) for p in self.patterns)


@dataclass(frozen=True)
class Suite:
    name: str
    kind: str  # pytest | probes | qnn | selected
    backends: tuple[str, ...]
    description: str = ""  # what `/etriage help` and the repo config say about it
    paths: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    estimated_seconds: float = 30.0
    # Planned by default only when a changed path matches one of these globs (empty: always).
    when_paths: tuple[str, ...] = ()
    # Command-template suites: arguments that run one test, "{name}" is the test id's last part.
    select_args: tuple[str, ...] = ()
    # Globs under the package of compiled parts the suite cannot run without (QNN's Python
    # adaptors): an environment whose compiled parts lack one does not run it, and says so.
    needs_compiled: tuple[str, ...] = ()

    def wanted_for(self, paths: list[str]) -> bool:
        return not self.when_paths or any(fnmatchcase(p, g) for p in paths for g in self.when_paths)


@dataclass(frozen=True)
class Selection:
    budget_seconds: float = 60
    max_files: int = 4
    max_import_depth: int = 3
    seconds_per_file: float = 6
    seconds_per_test: float = 1.5
    # the selected tests' wall-clock safety net: this many times the budget (which is spent in
    # learned CPU seconds before the run); a run that hits it says so, as a safety net
    wall_limit_factor: float = 4
    focus_words: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    retries: int = 1


@dataclass(frozen=True)
class Recipe:
    name: str
    kind: str  # overlay | cmake
    inputs: tuple[str, ...]
    enabled: bool = True
    disabled_reason: str = ""
    backends: tuple[str, ...] = ()
    commands: tuple[tuple[str, ...], ...] = ()
    paths: tuple[str, ...] = ()  # cmake: changed paths that rebuild it (the planner); empty: `inputs`
    artifacts: tuple[str, ...] = ()  # cmake: files kept from the build folder (tasks/pipeline/native.py)
    requires_env: tuple[str, ...] = ()  # cmake: variables the worker must set, else not run
    for_suites: tuple[str, ...] = ()  # cmake: built only when one of these suites is planned
    writable_sources: tuple[str, ...] = ()  # checkout directories the build writes (flatcc's lib/, bin/)

    def triggered_by(self, path: str) -> bool:
        return any(fnmatchcase(path, p) for p in self.paths or self.inputs)

    def covers(self, path: str) -> bool:
        return any(fnmatchcase(path, p) for p in self.inputs)


@dataclass(frozen=True)
class TargetSpec:
    name: str
    kind: str
    backends: tuple[str, ...]
    suite_kinds: tuple[str, ...]
    description: str = ""
    requires_env: str = ""
    queue: str = "build"  # the Celery queue whose workers run it (bot.queues.target_queue)
    native: bool = False  # runs the change's native build: planned only when a cmake recipe is


class TargetTable(dict):
    """name -> TargetSpec. Its keys are the default targets; a device target (targets.yaml's
    `device_targets`) is there only when asked for by name: `ssh:lab-1` (one device of the
    inventory) or `emulated-arm64` (a device class), resolved to its spec under that name."""

    def __init__(self, targets: dict[str, TargetSpec], device_targets: dict[str, TargetSpec]):
        super().__init__(targets)
        self.device_targets = device_targets

    def _template(self, name: str) -> TargetSpec | None:
        base, sep, device = name.partition(":")
        return self.device_targets.get(name) or (self.device_targets.get(base) if sep and device else None)

    def __contains__(self, name) -> bool:
        return super().__contains__(name) or (isinstance(name, str) and self._template(name) is not None)

    def __missing__(self, name: str) -> TargetSpec:
        template = self._template(name)
        if template is None:
            raise KeyError(name)
        return replace(template, name=name)


@dataclass(frozen=True)
class Tables:
    backends: tuple[str, ...]
    areas: tuple[Area, ...]
    category_paths: dict[str, tuple[str, ...]]
    suites: dict[str, Suite]
    selection: Selection
    recipes: dict[str, Recipe]
    targets: dict[str, TargetSpec]
    source: str = field(default="", compare=False)


def load_tables(directory: Path | str | None = None) -> Tables:
    root = Path(directory) if directory else DEFAULT_DIR
    areas = catalogue.read_table("areas.yaml", root)
    suites = catalogue.read_table("suites.yaml", root)
    recipes = catalogue.read_table("recipes.yaml", root)
    targets = catalogue.read_table("targets.yaml", root)  # its `devices` are the catalogue's
    return Tables(
        backends=areas.backends,
        areas=tuple(Area(**_written(area)) for area in areas.areas),
        category_paths=dict(areas.category_paths),
        suites={name: Suite(name=name, **_written(suite)) for name, suite in suites.suites.items()},
        selection=Selection(**_written(suites.selection)) if suites.selection else Selection(),
        recipes={name: Recipe(name=name, **_written(recipe)) for name, recipe in recipes.recipes.items()},
        targets=TargetTable({name: TargetSpec(name=name, **_written(target)) for name, target in targets.targets.items()},
                            {name: TargetSpec(name=name, **_written(target))
                             for name, target in (targets.device_targets or {}).items()}),
        source=str(root),
    )


def _written(model) -> dict:
    """The fields a table entry sets, validated; the record's own defaults fill in the rest (a
    model field and its record field share the name)."""
    return {name: getattr(model, name) for name in model.model_fields_set}
