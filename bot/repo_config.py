"""Per-repository configuration: `.github/etriage.yml` on the target repository's default branch.

The loader takes text; the caller fetches it with ref=None (the default branch), never from the
pull request's branch, so a PR cannot change how the bot treats it. One optional section per
feature; a section that is absent is off, a present one (even empty: `commands:`) is on with
defaults for what it leaves out. With no file at all, triage, commands, labels and ci_logs are
on with defaults and devices are off (device runs need a pool and a deliberate opt-in).

```yaml
triage:                     # triage pull requests
  suites: [multi_method, mutable_buffer]
  targets: [host, qnn-sim]
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
suites:                     # added to the built-in suites
  my_suite: {description: "...", tests: ["path/test_x.py::T"]}
targets:                    # added to the built-in targets
  android-sm8750: {kind: device, soc: SM8750}
```
Unknown keys, wrong types and dangling names are errors that carry the YAML line number.
"""
from __future__ import annotations

import difflib
import re
import threading
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping

import yaml

from triage_rules import catalogue
from triage_rules.records import CATEGORIES

PATH = ".github/etriage.yml"
NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?$")  # a GitHub user or app login
TARGET_KINDS = ("emulator", "device")
BACKENDS = catalogue.backends()  # what `triage.paths` may name
BUDGET_RANGE = (10, 1800)  # seconds: a selected-tests budget must fit one suite run's timeout


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


@dataclass(frozen=True)
class TriageConfig:
    suites: tuple[str, ...] = ("multi_method", "mutable_buffer")
    targets: tuple[str, ...] = ("host", "qnn-sim")
    paths: Mapping[str, str] = field(default_factory=dict)  # glob -> backend
    trusted: tuple[str, ...] = ()  # logins whose changes run without a maintainer's ok-to-test
    budget_seconds: int | None = None  # selected tests' time budget; None: the tables' default

    def trusts(self, login: str) -> bool:
        return login.lower() in {name.lower() for name in self.trusted}


@dataclass(frozen=True)
class CommandsConfig:
    pass


@dataclass(frozen=True)
class CiLogsConfig:
    workflows: tuple[str, ...] = ()  # empty: every workflow
    max_bytes: int = 50 * 1024 * 1024


@dataclass(frozen=True)
class DevicesConfig:
    targets: tuple[str, ...] = ()  # empty: every device-kind target


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

    @classmethod
    def defaults(cls) -> "RepoConfig":
        """The configuration of a repository without .github/etriage.yml."""
        return cls(triage=TriageConfig(), commands=CommandsConfig(),
                   labels=MappingProxyType(DEFAULT_LABELS), ci_logs=CiLogsConfig())

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
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        what = ", ".join(filter(None, [getattr(error, "context", None), getattr(error, "problem", None)]))
        raise RepoConfigError([f"{where}not valid YAML: {what or error}"]) from None
    if root is None:
        return RepoConfig()  # an empty file turns every feature off
    checker = _Checker()
    checker.check(_SCHEMA, root, "")
    if checker.errors:
        raise RepoConfigError(checker.errors)
    config = _build(yaml.safe_load(text))
    errors = [f"line {checker.lines.get(where, 1)}: {where}: {problem}" for where, problem in _dangling(config)]
    if errors:
        raise RepoConfigError(errors)
    return config


# --- schema: each rule checks one YAML node and reports problems with the node's line ---------

@dataclass(frozen=True)
class Scalar:
    tag: str  # "str" | "int" | "bool"
    choices: tuple[str, ...] = ()
    pattern: re.Pattern | None = None


@dataclass(frozen=True)
class ListOf:
    item: object


@dataclass(frozen=True)
class MapOf:
    key: Scalar
    value: object
    nullable: bool = False


@dataclass(frozen=True)
class Section:
    fields: Mapping[str, object]
    required: tuple[str, ...] = ()
    nullable: bool = False


STR, INT = Scalar("str"), Scalar("int")
NAME_RULE = Scalar("str", pattern=NAME)
_SCHEMA = Section({
    "triage": Section({"suites": ListOf(NAME_RULE), "targets": ListOf(NAME_RULE),
                       "paths": MapOf(STR, STR),
                       "trusted": ListOf(Scalar("str", pattern=LOGIN)), "budget_seconds": INT},
                      nullable=True),
    "commands": Section({}, nullable=True),
    "labels": MapOf(Scalar("str", choices=CATEGORIES), STR, nullable=True),
    "ci_logs": Section({"workflows": ListOf(STR), "max_bytes": INT}, nullable=True),
    "devices": Section({"targets": ListOf(NAME_RULE)}, nullable=True),
    "suites": MapOf(NAME_RULE, Section({"description": STR, "tests": ListOf(STR)}, nullable=True)),
    "targets": MapOf(NAME_RULE, Section({"kind": Scalar("str", choices=TARGET_KINDS), "soc": STR},
                                        required=("kind",))),
})
_TYPE_NAMES = {"str": "a string", "int": "an integer", "bool": "true or false"}


class _Checker:
    def __init__(self):
        self.errors: list[str] = []
        self.lines: dict[str, int] = {}  # where -> line, for errors found after the walk

    def error(self, node: yaml.Node, where: str, problem: str) -> None:
        self.errors.append(f"line {node.start_mark.line + 1}: {where or 'top level'}: {problem}")

    def check(self, rule, node: yaml.Node, where: str) -> None:
        self.lines[where] = node.start_mark.line + 1
        if getattr(rule, "nullable", False) and _is_null(node):
            return
        if isinstance(rule, Scalar):
            self.check_scalar(rule, node, where)
        elif isinstance(rule, ListOf):
            if not isinstance(node, yaml.SequenceNode) or node.tag != "tag:yaml.org,2002:seq":
                return self.error(node, where, "must be a list")
            for index, item in enumerate(node.value):
                self.check(rule.item, item, f"{where}[{index}]")
        elif not isinstance(node, yaml.MappingNode) or node.tag != "tag:yaml.org,2002:map":
            self.error(node, where, "must be a mapping (key: value)")
        else:
            self.check_mapping(rule, node, where)

    def check_scalar(self, rule: Scalar, node: yaml.Node, where: str) -> None:
        if not isinstance(node, yaml.ScalarNode) or node.tag != f"tag:yaml.org,2002:{rule.tag}":
            return self.error(node, where, f"must be {_TYPE_NAMES[rule.tag]}")
        if rule.choices and node.value not in rule.choices:
            hint = _did_you_mean(node.value, rule.choices)
            return self.error(node, where, f"{node.value!r} is not one of {', '.join(rule.choices)}{hint}")
        if rule.pattern and not rule.pattern.match(node.value):
            what = "a GitHub login" if rule.pattern is LOGIN else "a name (lowercase letters, digits, _ . -)"
            self.error(node, where, f"{node.value!r} is not {what}")

    def check_mapping(self, rule, node: yaml.MappingNode, where: str) -> None:
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            child = f"{where}.{key}" if where else str(key)
            if key is None or key_node.tag != "tag:yaml.org,2002:str":
                self.error(key_node, where, f"key {key_node.value!r} must be a string")
                continue
            if key in seen:
                self.error(key_node, child, "duplicate key")
                continue
            seen.add(key)
            if isinstance(rule, MapOf):
                self.check_scalar(rule.key, key_node, child)
                self.check(rule.value, value_node, child)
            elif key not in rule.fields:
                known = ", ".join(rule.fields) or "none"
                hint = _did_you_mean(key, rule.fields)
                self.error(key_node, where, f"unknown key {key!r}{hint} (known: {known})")
            else:
                self.check(rule.fields[key], value_node, child)
        for missing in getattr(rule, "required", ()):
            if missing not in seen:
                self.error(node, where, f"missing required key {missing!r}")


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _did_you_mean(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


# --- building the typed config from data the schema accepted -------------------------------------

def _build(data: dict) -> RepoConfig:
    suites = dict(DEFAULT_SUITES)
    for name, spec in (data.get("suites") or {}).items():
        spec = spec or {}
        suites[name] = Suite(name, spec.get("description", ""), tuple(spec.get("tests", ())))
    targets = dict(DEFAULT_TARGETS)
    for name, spec in (data.get("targets") or {}).items():
        targets[name] = Target(name, spec["kind"], spec.get("soc"))

    def section(key, make):
        return make(data[key] or {}) if key in data else None

    return RepoConfig(
        suites=MappingProxyType(suites),
        targets=MappingProxyType(targets),
        triage=section("triage", lambda s: TriageConfig(
            tuple(s.get("suites", TriageConfig.suites)), tuple(s.get("targets", TriageConfig.targets)),
            MappingProxyType(dict(s.get("paths", {}))), tuple(s.get("trusted", ())),
            s.get("budget_seconds"))),
        commands=section("commands", lambda s: CommandsConfig()),
        labels=section("labels", lambda s: MappingProxyType({**DEFAULT_LABELS, **s})),
        ci_logs=section("ci_logs", lambda s: CiLogsConfig(
            tuple(s.get("workflows", ())), s.get("max_bytes", CiLogsConfig.max_bytes))),
        devices=section("devices", lambda s: DevicesConfig(tuple(s.get("targets", ())))),
    )


def _dangling(config: RepoConfig):
    """Names that refer to suites or targets that do not exist: (where, problem)."""
    if config.triage:
        for index, suite in enumerate(config.triage.suites):
            if suite not in config.suites:
                yield f"triage.suites[{index}]", f"unknown suite {suite!r}{_did_you_mean(suite, config.suites)}"
        for index, target in enumerate(config.triage.targets):
            if target not in config.targets:
                yield f"triage.targets[{index}]", f"unknown target {target!r}{_did_you_mean(target, config.targets)}"
    if config.triage:
        for glob, backend in config.triage.paths.items():
            if backend not in BACKENDS:
                yield (f"triage.paths.{glob}", f"unknown backend {backend!r}{_did_you_mean(backend, BACKENDS)} "
                                               f"(known: {', '.join(BACKENDS)})")
    if config.triage and config.triage.budget_seconds is not None and \
            not BUDGET_RANGE[0] <= config.triage.budget_seconds <= BUDGET_RANGE[1]:
        yield "triage.budget_seconds", f"must be between {BUDGET_RANGE[0]} and {BUDGET_RANGE[1]} seconds"
    if config.ci_logs and config.ci_logs.max_bytes <= 0:
        yield "ci_logs.max_bytes", "must be a positive number of bytes"
    if config.devices:
        for index, name in enumerate(config.devices.targets):
            target = config.targets.get(name)
            if target is None or target.kind != "device":
                yield f"devices.targets[{index}]", f"{name!r} is not a device target"


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
