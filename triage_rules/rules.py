"""Rules are data: YAML files under triage_rules/rules/, loaded once, validated strictly.

A rule file holds `rules:`, a list of mappings:

    - id: et-backend-not-registered        # unique across all files
      category: runtime_error              # one of CATEGORIES, or "{capture}" from a matcher
      title: ExecuTorch backend not registered in the runtime
      priority: 90                         # higher wins when several rules match
      environment: true                    # the environment, not the change, is at fault
      strength: strong                     # strong (default) | weak (generic) | certain
      crash: false                         # a process crash: never the environment's (decide.py)
      wrapper_only: false                  # a CI wrapper's exit line: the real error is elsewhere
      match:                               # every listed matcher must match (regex search)
        line: 'Backend (?P<backend>\\w+) is not registered'
      explanation: "The runtime has no {backend} backend ..."   # {captures}, {test}, ...
      suggestion: "Rebuild the runtime with ..."
      owners: ["/runtime/backend/", "@someone"]  # paths are looked up in owners.yaml

Matchers: `line` (the primary line or any other line of the failure), `primary` (the
primary line only), `message`, `exception`, `test`, `frame` (any traceback frame's file
path), `job` (the CI job name). Unknown keys, bad regexes, bad categories and duplicate ids
are rejected with file and line.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from triage_rules import yamlmodel as ym
from triage_rules.records import CATEGORIES

RULES_DIR = Path(__file__).with_name("rules")
OWNERS_FILE = Path(__file__).with_name("owners.yaml")

# How much a match says (see triage_rules/decide.py): `strong` (default) a specific rule the
# model rarely overrules; `weak` a generic one (a bare exception, "a test failed") that a
# confident model overrules; `certain` etriage's own probes, never overruled.
STRENGTHS = ("strong", "weak", "certain")
MATCH_KEYS = ("line", "primary", "message", "exception", "test", "frame", "job")
_TEMPLATE_FIELD_RE = re.compile(r"^\{(\w+)\}$")


class RuleError(ValueError):
    """A rule file is invalid; the message names the file and line."""


def _category(value: str) -> str:
    if value not in CATEGORIES and not _TEMPLATE_FIELD_RE.match(value):
        raise ValueError(f"unknown category {value!r}{ym.did_you_mean(value, CATEGORIES)}")
    return value


class _RuleEntry(ym.StrictModel):
    """One rule as written in a rule file."""

    id: ym.pattern(r"[a-z0-9][a-z0-9_.-]*$", "lowercase letters, digits, - _ .")
    category: Annotated[ym.Str, AfterValidator(_category)]  # a category, or "{capture}"
    title: ym.Text
    priority: ym.Int
    match: Annotated[dict[Literal[MATCH_KEYS], ym.Regex], Field(min_length=1)]
    explanation: ym.Text
    suggestion: ym.Text = ""
    owners: tuple[ym.pattern(r"[@/]", "an @handle or a /path/"), ...] = ()
    environment: ym.Bool = False
    strength: Literal[STRENGTHS] = "strong"
    crash: ym.Bool = False
    wrapper_only: ym.Bool = False


class _RuleFile(ym.StrictModel):
    rules: list[_RuleEntry] | None = None


RULE_KEYS = frozenset(_RuleEntry.model_fields)
REQUIRED_KEYS = frozenset(name for name, info in _RuleEntry.model_fields.items() if info.is_required())


@dataclass(frozen=True)
class Rule:
    id: str
    category: str  # a category id, or "{capture}"
    title: str
    priority: int
    matchers: tuple[tuple[str, re.Pattern[str]], ...]
    explanation: str
    suggestion: str = ""
    owners: tuple[str, ...] = ()
    environment: bool = False
    strength: str = "strong"
    # A process crash (signal, abort, sanitizer report, `Fatal Python error`): what the change
    # can cause, so never the environment's; the model may refine its category, never to an
    # environment one. `wrapper_only`: a CI wrapper's exit line (`docker exec ... failed with
    # exit code 1`) is all the log says: the real error is not in it.
    crash: bool = False
    wrapper_only: bool = False
    source: str = ""  # file:line, for messages


@dataclass(frozen=True)
class Subject:
    """What a rule is matched against: one extracted failure."""

    primary: str
    lines: tuple[str, ...]
    message: str = ""
    exception: str = ""
    test: str = ""
    frames: tuple[str, ...] = ()
    job: str = ""


@dataclass
class RuleMatch:
    rule: Rule
    captures: dict[str, str] = field(default_factory=dict)


def parse_rules(text: str, source: str) -> list[Rule]:
    """Parse and validate one rule file's text; `source` names it in errors."""
    try:
        located = ym.read(text)
    except ym.YamlSyntaxError as error:
        where = f"{source}:{error.line}" if error.line else source
        raise RuleError(f"{where}: invalid YAML: {error.message}") from None
    if located.data is None:
        return []
    parsed, problems = ym.validate(_RuleFile, located)
    if problems:
        raise RuleError(_describe(problems, located, source))
    rules = []
    for index, entry in enumerate(parsed.rules or []):
        rule = Rule(id=entry.id, category=entry.category, title=entry.title, priority=entry.priority,
                    matchers=tuple(entry.match.items()), explanation=entry.explanation,
                    suggestion=entry.suggestion, owners=entry.owners, environment=entry.environment,
                    strength=entry.strength, crash=entry.crash, wrapper_only=entry.wrapper_only, source=f"{source}:{located.line(('rules', index))}")
        captures = {name for _, pattern in rule.matchers for name in pattern.groupindex}
        template = _TEMPLATE_FIELD_RE.match(rule.category)
        if template and template.group(1) not in captures:
            line = located.line(("rules", index, "category"))
            raise RuleError(f"{source}:{line}: category {rule.category!r} of {rule.id!r} names no capture group")
        rules.append(rule)
    return rules


def _describe(problems: list[ym.Problem], located: ym.Located, source: str) -> str:
    """The first problem (in file order) as "file:line: what", naming the rule it is in."""
    first = problems[0]
    if first.kind == "missing" and len(first.loc) == 2:  # every key the rule lacks, at once
        missing = sorted(p.key for p in problems if p.kind == "missing" and p.loc == first.loc)
        text = f"rule {_rule_id(located, first.loc)!r} lacks {', '.join(missing)}"
    else:
        text = _message(first, located)
    more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
    return f"{source}:{first.line}: {text}{more}"


def _message(problem: ym.Problem, located: ym.Located) -> str:
    loc, message = problem.loc, problem.message
    if loc[:1] != ("rules",) or len(loc) < 2:
        return f"'rules' {message}" if loc == ("rules",) else f"{problem.where or 'top level'}: {message}"
    rule_id, rest = _rule_id(located, loc), loc[2:]
    if not rest and problem.kind == "extra_forbidden":
        return f"unknown key {problem.key!r} in rule {rule_id!r}{ym.did_you_mean(problem.key, RULE_KEYS)}"
    if problem.kind == "duplicate_key":  # loc ends with the key itself
        rest = rest[:-1]
    if not rest and problem.kind in ("duplicate_key", "key_type"):
        return f"{message} in rule {rule_id!r}"
    if not rest:
        return f"each rule {message}"
    if rest[0] == "match" and len(rest) == 2:
        matcher = rest[1]
        if problem.kind == "literal_error":
            return f"unknown matcher {matcher!r} in rule {rule_id!r}{ym.did_you_mean(matcher, MATCH_KEYS)}"
        if message.startswith("bad regex: "):
            return f"bad regex for {matcher!r} in rule {rule_id!r}: {message.removeprefix('bad regex: ')}"
        return f"matcher {matcher!r} of {rule_id!r} must be a regex string"
    if rest == ("id",) and problem.kind == "value_error":
        return f"rule id {message}"
    if rest == ("category",) and problem.kind == "value_error":
        return f"{message} in rule {rule_id!r}"
    if problem.kind in ("duplicate_key", "key_type"):
        return f"{ym.where(rest)}: {message} in rule {rule_id!r}"
    return f"{ym.where(rest)} of {rule_id!r} {message}"


def _rule_id(located: ym.Located, loc: tuple) -> str:
    entry = located.data["rules"][loc[1]] if len(loc) > 1 else None
    rule_id = entry.get("id", "?") if isinstance(entry, dict) else "?"
    return rule_id if isinstance(rule_id, str) else repr(rule_id)


def load_rules(directory: Path = RULES_DIR) -> list[Rule]:
    """All rules of all *.yaml files in `directory`, highest priority first (file order on ties)."""
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for path in sorted(directory.glob("*.yaml")):
        for rule in parse_rules(path.read_text(encoding="utf-8"), str(path)):
            if rule.id in seen:
                raise RuleError(f"{rule.source}: duplicate rule id {rule.id!r} (first defined at {seen[rule.id]})")
            seen[rule.id] = rule.source
            rules.append(rule)
    order = {id(rule): i for i, rule in enumerate(rules)}
    return sorted(rules, key=lambda r: (-r.priority, order[id(r)]))


def default_rules(directory: Path = RULES_DIR) -> tuple[Rule, ...]:
    """The compiled rule set, loaded once per process and directory: `default_rules()` and
    `default_rules(RULES_DIR)` are one load (an lru_cache keyed on the call's arguments took
    them for two, and `classify` parsed every rule file twice)."""
    return _rules_in(Path(directory))


@functools.lru_cache(maxsize=4)
def _rules_in(directory: Path) -> tuple[Rule, ...]:
    return tuple(load_rules(directory))


@functools.lru_cache(maxsize=4)
def rules_by_id(directory: Path = RULES_DIR) -> dict[str, Rule]:
    return {rule.id: rule for rule in default_rules(directory)}


def match_rules(rules: tuple[Rule, ...] | list[Rule], subject: Subject) -> RuleMatch | None:
    """The highest-priority rule whose matchers all match `subject`, with its captures."""
    for rule in rules:
        captures = _match(rule, subject)
        if captures is not None:
            return RuleMatch(rule, captures)
    return None


def _match(rule: Rule, subject: Subject) -> dict[str, str] | None:
    captures: dict[str, str] = {}
    for key, pattern in rule.matchers:
        found = None
        for text in _texts(subject, key):
            found = pattern.search(text)
            if found:
                break
        if found is None:
            return None
        captures.update({k: v for k, v in found.groupdict().items() if v is not None})
    return captures


def _texts(subject: Subject, key: str) -> tuple[str, ...]:
    if key == "line":
        return (subject.primary, *subject.lines)
    if key == "primary":
        return (subject.primary,)
    if key == "frame":
        return subject.frames
    return (getattr(subject, key) or "",)


class _OwnersFile(ym.StrictModel):
    """owners.yaml: /path/ prefix -> @handles."""

    owners: dict[ym.pattern(r"/", "a /path/"), tuple[ym.pattern(r"@", "an @handle"), ...]] = {}


@functools.lru_cache(maxsize=1)
def owners_table(path: Path = OWNERS_FILE) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(path prefix, owners) pairs, longest prefix first."""
    try:
        located = ym.read(path.read_text(encoding="utf-8"))
    except ym.YamlSyntaxError as error:
        raise RuleError(f"{path}:{error.line}: invalid YAML: {error.message}") from None
    parsed, problems = ym.validate(_OwnersFile, located, located.data or {})
    if problems:
        first = problems[0]
        raise RuleError(f"{path}:{first.line}: {first.where or 'top level'}: {first.message}")
    return tuple(sorted(parsed.owners.items(), key=lambda item: -len(item[0])))


def owners_entry(path: str) -> tuple[str, tuple[str, ...]] | None:
    """The deepest owners.yaml entry (prefix, owners) that `path` falls under (ExecuTorch
    layout: an installed package's or a checkout's path is read from its `executorch/` on)."""
    probe = "/" + path.replace("\\", "/").lstrip("/")
    site = probe.rfind("/site-packages/")
    if site >= 0:
        probe = probe[site + len("/site-packages"):]
    marker = probe.rfind("/executorch/")
    if marker >= 0:
        probe = probe[marker + len("/executorch"):]
    for prefix, owners in owners_table():
        if probe.startswith(prefix) or probe == prefix.rstrip("/"):
            return prefix, owners
    return None


def owners_for_path(path: str) -> list[str]:
    """Owners of the deepest owners.yaml entry that `path` falls under (ExecuTorch layout)."""
    entry = owners_entry(path)
    return list(entry[1]) if entry else []


def owners_of(entries, frames) -> list[str]:
    """@handles and /paths/ of a rule or category, then the owners of the innermost frame that
    has any (that frame says whose code raised); each owner once, in that order."""
    owners: list[str] = []
    for entry in entries:
        owners.extend([entry] if entry.startswith("@") else owners_for_path(entry))
    for frame in reversed(frames):
        found = owners_for_path(frame.file)
        if found:
            owners.extend(found)
            break
    return list(dict.fromkeys(owners))
