"""The one catalogue of what etriage runs and says, read from triage_rules/tables/*.yaml:
suites (name, description), targets (kind, queue, SoC) and the default label per category.

Each table file has a pydantic model here (`*Yaml`: unknown keys, wrong types and bad values are
errors with file and line), so every reader validates the same way. The repository config
(`bot/repo_config.py`), the publisher's queues (`bot/queues.py`) and `/etriage help` read the
catalogue's functions; the pipeline (`tasks/pipeline/tables.py`) builds its records from
`read_table`. A name means the same thing everywhere.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, PlainValidator

from triage_rules import yamlmodel as ym
from triage_rules.records import CATEGORIES

TABLES = Path(__file__).resolve().parent / "tables"
SUITE_KINDS = ("pytest", "probes", "qnn", "selected", "cxx")
AREA_BACKENDS = ("all", "from_path")  # besides a list: every backend, or backends/<name>/...


class TableError(ValueError):
    """A table file is missing, malformed or has unknown keys; the message names file and line."""


@dataclass(frozen=True)
class TargetEntry:
    name: str
    kind: str  # "emulator" (runs on a worker machine: host, simulators) | "device" (a phone)
    queue: str
    soc: str | None = None
    description: str = ""


# --- the files' models ---------------------------------------------------------------------------

Strings = tuple[ym.Str, ...]
Seconds = Annotated[ym.Number, Field(ge=0, description="a number of seconds, 0 or more")]
Count = Annotated[ym.Int, Field(ge=0, description="a whole number, 0 or more")]


def _area_backends(value: object) -> str | tuple[str, ...]:
    if isinstance(value, str) and value in AREA_BACKENDS:
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise ValueError("must be a list, 'all' or 'from_path'")


class AreaYaml(ym.StrictModel):
    name: ym.Str
    patterns: Strings
    backends: Annotated[str | tuple[str, ...], PlainValidator(_area_backends)] = ()
    docs: ym.Bool = False


class AreasYaml(ym.StrictModel):
    """areas.yaml: path -> area -> backends, and where each category points in a diff."""

    backends: Strings
    areas: tuple[AreaYaml, ...] = ()
    category_paths: dict[Literal[CATEGORIES], Strings] = {}


class SuiteYaml(ym.StrictModel):
    kind: Literal[SUITE_KINDS]
    backends: Strings
    description: ym.Str = ""
    paths: Strings = ()
    args: tuple[ym.Arg, ...] = ()
    command: tuple[ym.Arg, ...] = ()
    tests: Strings = ()
    requires: Strings = ()
    estimated_seconds: Seconds = 30.0
    when_paths: Strings = ()
    select_args: tuple[ym.Arg, ...] = ()
    needs_compiled: Strings = ()  # globs under the package: compiled parts it cannot run without


class SelectionYaml(ym.StrictModel):
    budget_seconds: Annotated[ym.Number, Field(gt=0, description="a positive number of seconds")] = 60
    max_files: Count = 4
    max_import_depth: Count = 3
    seconds_per_file: Seconds = 6
    seconds_per_test: Seconds = 1.5
    wall_limit_factor: Annotated[ym.Number, Field(ge=1, description="a factor of at least 1")] = 4
    focus_words: Strings = ()
    exclude: Strings = ()
    retries: Count = 1


class SuitesYaml(ym.StrictModel):
    """suites.yaml: what runs, and how tests beyond the fixed suites are selected."""

    suites: dict[ym.Str, SuiteYaml]
    selection: SelectionYaml | None = None


class RecipeYaml(ym.StrictModel):
    kind: Literal["overlay", "cmake", "environment"]  # environment: tasks/environments builds it
    inputs: Strings
    enabled: ym.Bool = True
    disabled_reason: ym.Str = ""
    backends: Strings = ()
    commands: tuple[tuple[ym.Arg, ...], ...] = ()  # configure, then build (tasks/pipeline/native.py)
    paths: Strings = ()  # cmake: changed paths that rebuild it; empty: `inputs`
    artifacts: Strings = ()  # cmake: files kept from the build folder
    requires_env: Strings = ()  # cmake: variables the worker must set, else not run
    for_suites: Strings = ()  # cmake: built only when one of these suites is planned (empty: always)
    writable_sources: Strings = ()  # directories of the checkout the build writes into (flatcc's lib/)


class RecipesYaml(ym.StrictModel):
    """recipes.yaml: how a change is built."""

    recipes: dict[ym.Str, RecipeYaml]


class TargetYaml(ym.StrictModel):
    kind: ym.Str  # selects the Target class in tasks/pipeline/targets.py
    backends: Strings
    suite_kinds: tuple[Literal[SUITE_KINDS], ...]
    description: ym.Str = ""
    requires_env: ym.Str = ""
    queue: ym.Str = "build"  # the Celery queue whose workers run it (bot.queues.target_queue)
    native: ym.Bool = False  # runs the change's native build


class DeviceYaml(ym.StrictModel):
    soc: ym.Str
    queue: ym.Str = "device"
    description: ym.Str = ""


class TargetsYaml(ym.StrictModel):
    """targets.yaml: where suites run; `devices` are phones a device worker drives."""

    targets: dict[ym.Str, TargetYaml]
    devices: dict[ym.Str, DeviceYaml] | None = None
    device_targets: dict[ym.Str, TargetYaml] | None = None  # by name only (tasks/pipeline/tables.TargetTable)


LabelsYaml = dict[Literal[CATEGORIES], ym.Str]  # labels.yaml: category -> label


class CopyYaml(ym.StrictModel):
    repo: ym.Str  # a path in the commit's tree (repository layout)
    package: ym.Str  # where the package has it


class PartYaml(ym.StrictModel):
    artifact: ym.Str  # a file name (glob) the build stored
    package: ym.Str  # the directory of the package it goes to


class EnvironmentsYaml(ym.StrictModel):
    """environments.yaml: how a commit's environment is made (tasks/environments/)."""

    source_map: ym.Str  # a tree holding this directory maps package paths through its symlinks
    package_suffixes: Strings  # what of the commit's tree is laid: the package's sources
    copies: tuple[CopyYaml, ...] = ()  # setup.py's copies of repository files into the package
    compiled: Strings  # what of an installed package is compiled (globs, package paths)
    recipe: ym.Str  # recipes.yaml's recipe that builds a commit's compiled parts
    built_parts: tuple[PartYaml, ...]
    torch_pins: Strings  # where a commit pins torch, in order (repository paths)
    disk_cap_gib: float = 40.0  # built environments and laid trees, least recently used go first

MODELS = {"areas.yaml": AreasYaml, "suites.yaml": SuitesYaml, "recipes.yaml": RecipesYaml,
          "targets.yaml": TargetsYaml, "labels.yaml": LabelsYaml, "environments.yaml": EnvironmentsYaml}


def read_table(name: str, directory: Path = TABLES):
    """One table file of `directory`, validated by its model; raises TableError."""
    path = Path(directory) / name
    if not path.is_file():
        raise TableError(f"{path}: table file missing")
    try:
        located = ym.read(path.read_text(encoding="utf-8"))
    except ym.YamlSyntaxError as error:
        raise TableError(f"{path}:{error.line}: not valid YAML: {error.message}") from None
    value, problems = ym.validate(MODELS[name], located, {} if located.data is None else located.data)
    if problems:
        raise TableError("; ".join(f"{path}:{p.line}: {p.where or 'top level'}: {p.message}" for p in problems))
    return value


# --- what the bot reads ----------------------------------------------------------------------------

@functools.cache
def suites() -> dict[str, str]:
    """suite name -> description."""
    return {name: suite.description for name, suite in read_table("suites.yaml").suites.items()}


@functools.cache
def targets() -> dict[str, TargetEntry]:
    data = read_table("targets.yaml")
    found = {name: TargetEntry(name, "emulator", entry.queue, None, entry.description)
             for name, entry in data.targets.items()}
    found.update({name: TargetEntry(name, "device", entry.queue, entry.soc, entry.description)
                  for name, entry in (data.devices or {}).items()})
    return found


@functools.cache
def labels() -> dict[str, str]:
    """category -> the label a new failure of it puts on the PR."""
    return dict(read_table("labels.yaml"))


@functools.cache
def backends() -> tuple[str, ...]:
    return read_table("areas.yaml").backends
