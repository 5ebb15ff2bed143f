"""Load and validate the declarative tables in triage_rules/tables/*.yaml.

Unknown keys are rejected with the file name, so a typo never silently turns a rule off.
`load_tables(dir)` takes another directory for tests and for workers with their own recipes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

import yaml

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "triage_rules" / "tables"


class TableError(ValueError):
    """A table file is missing, malformed or has unknown keys."""


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

    def wanted_for(self, paths: list[str]) -> bool:
        return not self.when_paths or any(fnmatchcase(p, g) for p in paths for g in self.when_paths)


@dataclass(frozen=True)
class Selection:
    budget_seconds: float = 60
    max_files: int = 4
    max_import_depth: int = 3
    seconds_per_file: float = 6
    seconds_per_test: float = 1.5
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


def _read(path: Path, top_keys: set[str]) -> dict:
    if not path.is_file():
        raise TableError(f"{path}: table file missing")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise TableError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise TableError(f"{path}: expected a mapping at the top level")
    _check_keys(path, "top level", data, top_keys)
    return data


def _check_keys(path: Path, where: str, data: dict, allowed: set[str], required=()) -> None:
    if not isinstance(data, dict):
        raise TableError(f"{path}: {where}: expected a mapping")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise TableError(f"{path}: {where}: unknown key(s) {', '.join(unknown)}")
    missing = [k for k in required if k not in data]
    if missing:
        raise TableError(f"{path}: {where}: missing key(s) {', '.join(missing)}")


def _tuple(value) -> tuple:
    return tuple(value or ())


def _fields_of(cls) -> set[str]:
    return set(cls.__dataclass_fields__) - {"name"}


def load_tables(directory: Path | str | None = None) -> Tables:
    root = Path(directory) if directory else DEFAULT_DIR
    areas_file, suites_file = root / "areas.yaml", root / "suites.yaml"
    recipes_file, targets_file = root / "recipes.yaml", root / "targets.yaml"

    raw = _read(areas_file, {"backends", "areas", "category_paths"})
    backends_all = _tuple(raw.get("backends"))
    areas = []
    for i, entry in enumerate(raw.get("areas") or []):
        _check_keys(areas_file, f"areas[{i}]", entry, {"name", "patterns", "backends", "docs"},
                    required=("name", "patterns"))
        backends = entry.get("backends", ())
        if not isinstance(backends, str):
            backends = _tuple(backends)
        elif backends not in ("all", "from_path"):
            raise TableError(f"{areas_file}: areas[{i}]: backends must be a list, 'all' or 'from_path'")
        areas.append(Area(entry["name"], _tuple(entry["patterns"]), backends, bool(entry.get("docs"))))
    category_paths = {k: _tuple(v) for k, v in (raw.get("category_paths") or {}).items()}

    raw = _read(suites_file, {"suites", "selection"})
    suites = {}
    for name, entry in (raw.get("suites") or {}).items():
        _check_keys(suites_file, f"suites.{name}", entry, _fields_of(Suite), required=("kind", "backends"))
        if entry["kind"] not in ("pytest", "probes", "qnn", "selected"):
            raise TableError(f"{suites_file}: suites.{name}: unknown kind {entry['kind']!r}")
        suites[name] = Suite(name=name, **{k: (_tuple(v) if isinstance(v, list) else v)
                                            for k, v in entry.items()})
    selection_raw = raw.get("selection") or {}
    _check_keys(suites_file, "selection", selection_raw, set(Selection.__dataclass_fields__))
    selection = Selection(**{k: (_tuple(v) if isinstance(v, list) else v)
                             for k, v in selection_raw.items()})

    raw = _read(recipes_file, {"recipes"})
    recipes = {}
    for name, entry in (raw.get("recipes") or {}).items():
        _check_keys(recipes_file, f"recipes.{name}", entry, _fields_of(Recipe), required=("kind", "inputs"))
        if entry["kind"] not in ("overlay", "cmake"):
            raise TableError(f"{recipes_file}: recipes.{name}: unknown kind {entry['kind']!r}")
        values = dict(entry)
        values["inputs"] = _tuple(values["inputs"])
        values["backends"] = _tuple(values.get("backends"))
        values["commands"] = tuple(tuple(str(a) for a in c) for c in values.get("commands") or ())
        recipes[name] = Recipe(name=name, **values)

    raw = _read(targets_file, {"targets", "devices"})  # devices: the catalogue's (triage_rules/catalogue.py)
    targets = {}
    for name, entry in (raw.get("targets") or {}).items():
        _check_keys(targets_file, f"targets.{name}", entry, _fields_of(TargetSpec),
                    required=("kind", "backends", "suite_kinds"))
        targets[name] = TargetSpec(name=name, **{k: (_tuple(v) if isinstance(v, list) else v)
                                                 for k, v in entry.items()})

    return Tables(backends_all, tuple(areas), category_paths, suites, selection, recipes, targets,
                  source=str(root))
