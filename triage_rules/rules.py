"""Rules are data: YAML files under triage_rules/rules/, loaded once, validated strictly.

A rule file holds `rules:`, a list of mappings:

    - id: et-backend-not-registered        # unique across all files
      category: runtime_error              # one of CATEGORIES, or "{capture}" from a matcher
      title: ExecuTorch backend not registered in the runtime
      priority: 90                         # higher wins when several rules match
      environment: true                    # the environment, not the change, is at fault
      strength: strong                     # strong (default) | weak (generic) | certain
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

import yaml

from triage_rules.records import CATEGORIES

RULES_DIR = Path(__file__).with_name("rules")
OWNERS_FILE = Path(__file__).with_name("owners.yaml")

RULE_KEYS = frozenset({"id", "category", "title", "priority", "match", "explanation", "suggestion", "owners",
                       "environment", "strength"})
# How much a match says (see triage_rules/decide.py): `strong` (default) a specific rule the
# model rarely overrules; `weak` a generic one (a bare exception, "a test failed") that a
# confident model overrules; `certain` etriage's own probes, never overruled.
STRENGTHS = ("strong", "weak", "certain")
REQUIRED_KEYS = frozenset({"id", "category", "title", "priority", "match", "explanation"})
MATCH_KEYS = frozenset({"line", "primary", "message", "exception", "test", "frame", "job"})
_TEMPLATE_FIELD_RE = re.compile(r"^\{(\w+)\}$")


class RuleError(ValueError):
    """A rule file is invalid; the message names the file and line."""


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


class _LineLoader(yaml.SafeLoader):
    """A YAML loader that remembers where each mapping and each key sits."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    mapping = yaml.SafeLoader.construct_mapping(loader, node, deep=True)
    keys = [k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode)]
    if len(keys) != len(set(keys)):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise RuleError(f"{loader.name}:{node.start_mark.line + 1}: duplicate key {dup!r}")
    mapping["__line__"] = node.start_mark.line + 1
    mapping["__lines__"] = {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_rules(text: str, source: str) -> list[Rule]:
    """Parse and validate one rule file's text; `source` names it in errors."""
    loader = _LineLoader(text)
    loader.name = source
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise RuleError(f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    finally:
        loader.dispose()
    if data is None:
        return []
    if not isinstance(data, dict) or set(data) - {"rules", "__line__", "__lines__"}:
        raise RuleError(f"{source}:1: a rule file is a mapping with one key, 'rules'")
    entries = data.get("rules") or []
    if not isinstance(entries, list):
        raise RuleError(f"{source}:{data['__lines__'].get('rules', 1)}: 'rules' must be a list")
    return [_parse_rule(entry, source) for entry in entries]


def _parse_rule(entry: object, source: str) -> Rule:
    if not isinstance(entry, dict):
        raise RuleError(f"{source}: each rule must be a mapping")
    line = entry["__line__"]
    lines = entry["__lines__"]
    where = f"{source}:{line}"
    keys = set(entry) - {"__line__", "__lines__"}
    unknown = keys - RULE_KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise RuleError(f"{source}:{lines.get(key, line)}: unknown key {key!r} in rule {entry.get('id', '?')!r}")
    missing = REQUIRED_KEYS - keys
    if missing:
        raise RuleError(f"{where}: rule {entry.get('id', '?')!r} lacks {', '.join(sorted(missing))}")
    rule_id = entry["id"]
    if not isinstance(rule_id, str) or not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", rule_id):
        raise RuleError(f"{source}:{lines['id']}: rule id {rule_id!r} must be lowercase letters, digits, - _ .")
    category = entry["category"]
    if category not in CATEGORIES and not (isinstance(category, str) and _TEMPLATE_FIELD_RE.match(category)):
        raise RuleError(f"{source}:{lines['category']}: unknown category {category!r} in rule {rule_id!r}")
    if not isinstance(entry["priority"], int) or isinstance(entry["priority"], bool):
        raise RuleError(f"{source}:{lines['priority']}: priority of {rule_id!r} must be an integer")
    for text_key in ("title", "explanation", "suggestion"):
        if text_key in entry and not (isinstance(entry[text_key], str) and entry[text_key].strip()):
            raise RuleError(f"{source}:{lines[text_key]}: {text_key} of {rule_id!r} must be non-empty text")
    if "environment" in entry and not isinstance(entry["environment"], bool):
        raise RuleError(f"{source}:{lines['environment']}: environment of {rule_id!r} must be true or false")
    strength = entry.get("strength", "strong")
    if strength not in STRENGTHS:
        raise RuleError(f"{source}:{lines['strength']}: strength of {rule_id!r} must be one of {', '.join(STRENGTHS)}")
    owners = entry.get("owners", [])
    if not isinstance(owners, list) or not all(isinstance(o, str) and o[:1] in "@/" for o in owners):
        raise RuleError(f"{source}:{lines.get('owners', line)}: owners of {rule_id!r} must be a list of @handles or /paths/")
    matchers = _parse_matchers(entry["match"], rule_id, source, lines["match"])
    captures = {name for _, pattern in matchers for name in pattern.groupindex}
    field_match = _TEMPLATE_FIELD_RE.match(category)
    if field_match and field_match.group(1) not in captures:
        raise RuleError(f"{source}:{lines['category']}: category {category!r} of {rule_id!r} names no capture group")
    return Rule(
        id=rule_id,
        category=category,
        title=entry["title"].strip(),
        priority=entry["priority"],
        matchers=matchers,
        explanation=entry["explanation"].strip(),
        suggestion=entry.get("suggestion", "").strip(),
        owners=tuple(owners),
        environment=entry.get("environment", False),
        strength=strength,
        source=where,
    )


def _parse_matchers(match: object, rule_id: str, source: str, line: int) -> tuple[tuple[str, re.Pattern[str]], ...]:
    if not isinstance(match, dict) or not (set(match) - {"__line__", "__lines__"}):
        raise RuleError(f"{source}:{line}: match of {rule_id!r} must map matcher names to regexes")
    lines = match["__lines__"]
    matchers = []
    for key, pattern in match.items():
        if key in ("__line__", "__lines__"):
            continue
        if key not in MATCH_KEYS:
            raise RuleError(f"{source}:{lines.get(key, line)}: unknown matcher {key!r} in rule {rule_id!r}")
        if not isinstance(pattern, str) or not pattern:
            raise RuleError(f"{source}:{lines.get(key, line)}: matcher {key!r} of {rule_id!r} must be a regex string")
        try:
            matchers.append((key, re.compile(pattern)))
        except re.error as exc:
            raise RuleError(f"{source}:{lines.get(key, line)}: bad regex for {key!r} in rule {rule_id!r}: {exc}") from None
    return tuple(matchers)


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


@functools.lru_cache(maxsize=4)
def default_rules(directory: Path = RULES_DIR) -> tuple[Rule, ...]:
    """The compiled rule set, loaded once per process."""
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


@functools.lru_cache(maxsize=1)
def owners_table(path: Path = OWNERS_FILE) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(path prefix, owners) pairs, longest prefix first."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    table = data.get("owners", {})
    if not isinstance(table, dict):
        raise RuleError(f"{path}: 'owners' must map /path/ to a list of @handles")
    return tuple(sorted(((p, tuple(o)) for p, o in table.items()), key=lambda item: -len(item[0])))


def owners_for_path(path: str) -> list[str]:
    """Owners of the deepest owners.yaml entry that `path` falls under (ExecuTorch layout)."""
    probe = "/" + path.replace("\\", "/").lstrip("/")
    site = probe.rfind("/site-packages/")
    if site >= 0:
        probe = probe[site + len("/site-packages"):]
    marker = probe.rfind("/executorch/")
    if marker >= 0:
        probe = probe[marker + len("/executorch"):]
    for prefix, owners in owners_table():
        if probe.startswith(prefix) or probe == prefix.rstrip("/"):
            return list(owners)
    return []


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
