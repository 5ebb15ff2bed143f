"""Per-repository configuration: `.github/etriage.yml` on the target repository's default branch.

The loader takes text; the caller fetches it with ref=None (the default branch), never from the
pull request's branch, so a PR cannot change how the bot treats it. One optional section per
feature; a section that is absent is off, a present one (even empty: `commands:`) is on with
defaults for what it leaves out. With no file at all, triage, commands, labels, ci_logs and
trunk_issues are on with defaults and devices are off (device runs need a pool and a deliberate opt-in).

```yaml
triage:                     # triage pull requests
  suites: [multi_method, mutable_buffer]
  targets: [host, host-native, qnn-htp-sim]
  paths: {"third-party/qnn/**": qualcomm}   # path glob -> backend, before the built-in table
  trusted: [octocat]        # GitHub logins whose PRs' code runs without ok-to-test (besides
                            # everyone with write access); see docs/SANDBOX.md
  budget_seconds: 120       # time for the tests selected per change (default: the tables', 60)
commands: {}                # /etriage slash commands
labels:                     # category -> label name; the allow-list of `/etriage label`
  multi_method_lowering: "triage: multi-method"
ci_logs:                    # pull and classify the logs of failed CI jobs
  workflows: [pull, trunk]  # default: every workflow
  max_bytes: 52428800
devices:                    # runs on real devices (after ok-to-test for outside contributors)
  targets: [android-sm8650]                  # default: every device target
trunk_issues:               # one issue per failure cluster red on trunk (bot/trunk_issues.py)
  after: 3                  # trunk commits red with the cluster before its issue opens (1-100)
  label: "etriage: trunk red"                # the issues' label (how the bot finds its own)
  close_when_green: true    # closed, with a comment, when the cluster's jobs pass on trunk again
suites:                     # added to the built-in suites
  my_suite: {description: "...", tests: ["path/test_x.py::T"]}
targets:                    # added to the built-in targets
  android-sm8750: {kind: device, soc: SM8750}
```
Unknown keys, wrong types and dangling names are errors that carry the YAML line number.
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Annotated, Callable, Literal, Mapping

from pydantic import Field

from triage_rules import catalogue
from triage_rules import yamlmodel as ym
from triage_rules.records import CATEGORIES

PATH = ".github/etriage.yml"
NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?$")  # a GitHub user or app login
TARGET_KINDS = ("emulator", "device")
BACKENDS = catalogue.backends()  # what `triage.paths` may name
BUDGET_RANGE = (10, 1800)  # seconds: a selected-tests budget must fit one suite run's timeout
TRUNK_RED_RANGE = (1, 100)  # red trunk commits of one failure cluster before its issue opens

Name = ym.pattern(NAME.pattern, "a name (lowercase letters, digits, _ . -)")
Login = ym.pattern(LOGIN.pattern, "a GitHub login")
Backend = ym.choice("backend", BACKENDS)
Category = Literal[CATEGORIES]


@dataclass(frozen=True)
class Suite:
    name: str
    description: str = ""
    tests: tuple[str, ...] = ()


@dataclass(frozen=True)
class Target:
    name: str
    kind: str  # "emulator" | "device"
    soc: str | None = None


# The sections: each model is both the file's schema and what callers read.

class TriageConfig(ym.StrictModel):
    suites: tuple[Name, ...] = ("multi_method", "mutable_buffer")
    targets: tuple[Name, ...] = ("host", "host-native", "qnn-htp-sim")
    paths: Mapping[ym.Str, Backend] = Field(default_factory=dict)  # glob -> backend
    trusted: tuple[Login, ...] = ()  # logins whose changes run without a maintainer's ok-to-test
    # selected tests' time budget; None: the tables' default
    budget_seconds: Annotated[ym.Int, Field(ge=BUDGET_RANGE[0], le=BUDGET_RANGE[1],
                                            description="between 10 and 1800 seconds")] | None = None

    def trusts(self, login: str) -> bool:
        return login.lower() in {name.lower() for name in self.trusted}


class CommandsConfig(ym.StrictModel):
    pass


class CiLogsConfig(ym.StrictModel):
    workflows: tuple[ym.Str, ...] = ()  # empty: every workflow
    max_bytes: Annotated[ym.Int, Field(gt=0, description="a positive number of bytes")] = 50 * 1024 * 1024


class DevicesConfig(ym.StrictModel):
    targets: tuple[Name, ...] = ()  # empty: every device-kind target


class TrunkIssuesConfig(ym.StrictModel):
    after: Annotated[ym.Int, Field(ge=TRUNK_RED_RANGE[0], le=TRUNK_RED_RANGE[1],
                                   description="between 1 and 100 red trunk commits")] = 3
    label: Annotated[ym.Str, Field(min_length=1, max_length=50, description="a label of 1 to 50 characters")] \
        = "etriage: trunk red"
    close_when_green: ym.Bool = True


class _SuiteEntry(ym.StrictModel):
    description: ym.Str = ""
    tests: tuple[ym.Str, ...] = ()


class _TargetEntry(ym.StrictModel):
    kind: Literal[TARGET_KINDS]
    soc: ym.Str | None = None


SECTIONS = ("triage", "commands", "labels", "ci_logs", "devices", "trunk_issues")


class _File(ym.StrictModel):
    """`.github/etriage.yml`. A section present but empty (`commands:`) is on with defaults."""

    triage: TriageConfig | None = None
    commands: CommandsConfig | None = None
    labels: dict[Category, ym.Str] | None = None  # category -> label
    ci_logs: CiLogsConfig | None = None
    devices: DevicesConfig | None = None
    trunk_issues: TrunkIssuesConfig | None = None
    suites: dict[Name, _SuiteEntry | None] = {}
    targets: dict[Name, _TargetEntry] = {}


# Defaults from the one catalogue (triage_rules/tables/): the names the planner and the queues use.
DEFAULT_SUITES = {name: Suite(name, description) for name, description in catalogue.suites().items()}
DEFAULT_TARGETS = {name: Target(name, t.kind, t.soc) for name, t in catalogue.targets().items()}
DEFAULT_LABELS = catalogue.labels()


@dataclass(frozen=True)
class RepoConfig:
    suites: Mapping[str, Suite] = field(default_factory=lambda: MappingProxyType(DEFAULT_SUITES))
    targets: Mapping[str, Target] = field(default_factory=lambda: MappingProxyType(DEFAULT_TARGETS))
    triage: TriageConfig | None = None
    commands: CommandsConfig | None = None
    labels: Mapping[str, str] | None = None  # category -> label; None: labels are off
    ci_logs: CiLogsConfig | None = None
    devices: DevicesConfig | None = None
    trunk_issues: TrunkIssuesConfig | None = None  # None: no trunk issues

    @classmethod
    def defaults(cls) -> "RepoConfig":
        """The configuration of a repository without .github/etriage.yml."""
        return cls(triage=TriageConfig(), commands=CommandsConfig(),
                   labels=MappingProxyType(DEFAULT_LABELS), ci_logs=CiLogsConfig(),
                   trunk_issues=TrunkIssuesConfig())

    def allowed_labels(self) -> frozenset[str]:
        return frozenset(self.labels.values()) if self.labels is not None else frozenset()

    def device_targets(self) -> frozenset[str]:
        """Device targets usable here: none unless the devices section is on."""
        if self.devices is None:
            return frozenset()
        devices = {name for name, target in self.targets.items() if target.kind == "device"}
        return frozenset(self.devices.targets or devices) & devices


class RepoConfigError(ValueError):
    def __init__(self, errors: list[str]):
        super().__init__(f"{PATH}: " + "; ".join(errors))
        self.errors = errors


def validate_repo_config(text: str) -> list[str]:
    """Every problem in the file, each "line N: where: what" (empty list: valid)."""
    try:
        load(text)
    except RepoConfigError as error:
        return error.errors
    return []


def load(text: str | None) -> RepoConfig:
    """The parsed config (None: no file, the defaults); raises RepoConfigError listing problems."""
    if text is None:
        return RepoConfig.defaults()
    try:
        located = ym.read(text)
    except ym.YamlSyntaxError as error:
        where = f"line {error.line}: " if error.line else ""
        raise RepoConfigError([f"{where}not valid YAML: {error.message}"]) from None
    if located.data is None:
        return RepoConfig()  # an empty file turns every feature off
    data = located.data
    if isinstance(data, dict):  # `triage:` with nothing after it: the section is on, with defaults
        data = {key: ({} if key in SECTIONS and value is None else value) for key, value in data.items()}
    parsed, problems = ym.validate(_File, located, data)
    if problems:
        found = [(problem.line, _line(problem.line, problem.loc, problem.message)) for problem in problems]
        found += _dangling_beside(located, data, problems)
        raise RepoConfigError([text for _, text in sorted(found, key=lambda item: item[0])])
    config = _build(parsed)
    errors = [_line(located.line(loc), loc, problem) for loc, problem in _dangling(config)]
    if errors:
        raise RepoConfigError(errors)
    return config


def _dangling_beside(located: ym.Located, data, problems) -> list[tuple[int, str]]:
    """The names pointing nowhere in what did validate, so that one pass reports every mistake:
    each wrong value (a whole list, for a wrong item) or unknown key is left out and the rest is
    checked again. When a custom suite or target (what names refer to) was left out, an unknown
    name cannot be told from a misdefined one: nothing more is said."""
    rest = data
    for _ in range(5):  # each round leaves out what the last one found wrong
        dropped = [_drop_path(rest, problem) for problem in problems]
        if not isinstance(rest, dict) or any(not path or path[0] in ("suites", "targets") for path in dropped):
            return []
        for path in sorted(set(dropped), key=len, reverse=True):
            rest = _without(rest, path)
        parsed, problems = ym.validate(_File, replace(located, problems=[]), rest)
        if not problems:
            return [(located.line(loc), _line(located.line(loc), loc, problem))
                    for loc, problem in _dangling(_build(parsed))]
    return []


def _drop_path(data, problem) -> tuple:
    """Where the data must lose something for `problem` to go: the unknown key itself, else the
    wrong value; a list as a whole (dropping one item would renumber the others)."""
    path = problem.loc
    if problem.key is not None and isinstance(_at(data, path), dict) and problem.key in _at(data, path):
        path = (*path, problem.key)
    while path and isinstance(path[-1], int):
        path = path[:-1]
    return path


def _at(data, path: tuple):
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _without(data, path: tuple):
    if not path or not isinstance(data, dict):
        return data
    head, *tail = path
    if head not in data:
        return data
    if not tail:
        return {k: v for k, v in data.items() if k != head}
    return {**data, head: _without(data[head], tuple(tail))}


def _line(line: int, loc: tuple, message: str) -> str:
    return f"line {line}: {ym.where(loc) or 'top level'}: {message}"


def _build(file: _File) -> RepoConfig:
    suites = dict(DEFAULT_SUITES)
    for name, entry in file.suites.items():
        entry = entry or _SuiteEntry()
        suites[name] = Suite(name, entry.description, entry.tests)
    targets = dict(DEFAULT_TARGETS)
    targets.update({name: Target(name, entry.kind, entry.soc) for name, entry in file.targets.items()})
    triage = file.triage
    if triage is not None:  # read-only, like every other mapping of the config
        triage = triage.model_copy(update={"paths": MappingProxyType(dict(triage.paths))})
    return RepoConfig(
        suites=MappingProxyType(suites),
        targets=MappingProxyType(targets),
        triage=triage,
        commands=file.commands,
        labels=MappingProxyType({**DEFAULT_LABELS, **file.labels}) if file.labels is not None else None,
        ci_logs=file.ci_logs,
        devices=file.devices,
        trunk_issues=file.trunk_issues,
    )


def _dangling(config: RepoConfig):
    """Names that refer to suites or targets that do not exist: (loc, problem)."""
    if config.triage:
        for index, suite in enumerate(config.triage.suites):
            if suite not in config.suites:
                yield ("triage", "suites", index), f"unknown suite {suite!r}{ym.did_you_mean(suite, config.suites)}"
        for index, target in enumerate(config.triage.targets):
            if target not in config.targets:
                yield (("triage", "targets", index),
                       f"unknown target {target!r}{ym.did_you_mean(target, config.targets)}")
    if config.devices:
        for index, name in enumerate(config.devices.targets):
            target = config.targets.get(name)
            if target is None or target.kind != "device":
                yield ("devices", "targets", index), f"{name!r} is not a device target"


# --- cache ----------------------------------------------------------------------------------------

class RepoConfigCache:
    """Parsed configs per repository, kept for `ttl_seconds`, or for as long as the `version`
    (the file's blob sha) stays the same when the caller knows it. Invalid files are cached too:
    their RepoConfigError is raised again without refetching."""

    def __init__(self, ttl_seconds: float = 300.0, clock: Callable[[], float] = time.monotonic):
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self._entries: dict[str, tuple[float, str | None, RepoConfig | RepoConfigError]] = {}
        self._lock = threading.Lock()

    def get(self, repo: str, fetch_fn: Callable[[], str | None], *, version: str | None = None) -> RepoConfig:
        with self._lock:
            entry = self._entries.get(repo)
        now = self.clock()
        if entry is not None:
            expires, cached_version, result = entry
            fresh = cached_version == version if version is not None else now < expires
            if fresh:
                return _unwrap(result)
        try:
            result: RepoConfig | RepoConfigError = load(fetch_fn())
        except RepoConfigError as error:
            result = error
        with self._lock:
            self._entries[repo] = (now + self.ttl_seconds, version, result)
        return _unwrap(result)

    def invalidate(self, repo: str | None = None) -> None:
        """Forget one repository (a push to its default branch) or all of them."""
        with self._lock:
            if repo is None:
                self._entries.clear()
            else:
                self._entries.pop(repo, None)


def _unwrap(result: RepoConfig | RepoConfigError) -> RepoConfig:
    if isinstance(result, RepoConfigError):
        raise result
    return result
