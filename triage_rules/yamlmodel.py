"""YAML read into pydantic models, with every problem reported at its line.

The one helper behind etriage's YAML readers (rules, tables and catalogue, the repository's
`.github/etriage.yml`): `read(text)` composes the YAML with the safe loader, turns the node
tree into plain data and remembers the line of every mapping key and value and every sequence
item; `validate(model, located)` runs a pydantic model (unknown keys forbidden) over that data
and turns pydantic's `ValidationError` into `Problem`s: the line of the offending key or value,
the path to it (`triage.suites[0]`) and a message a person can act on ("unknown key 'suits'
(did you mean 'suites'?)", "must be a list"). Each reader words the final line its own way.

Only the plain YAML types are built (null, bool, int, float, str, lists, mappings with string
keys). Any other tag (`!!python/object`, `!!set`, a timestamp) becomes an `Unsupported` value
that no model field accepts, so it is reported as the wrong type instead of being constructed.
"""
from __future__ import annotations

import difflib
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Annotated, Any, Union

import yaml
from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, PlainValidator, StrictBool, StrictInt,
                      StrictStr, TypeAdapter, ValidationError)

Loc = tuple  # a path into the data: mapping keys and list indexes

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: same nodes, faster
_BUILT_TAGS = {f"tag:yaml.org,2002:{name}" for name in ("null", "bool", "int", "float", "str")}
_MAX_VALUES = 200_000  # aliases can multiply a small text into an enormous tree: refuse it


class StrictModel(BaseModel):
    """The base of every file model: unknown keys are errors, instances are read-only."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# Field types. YAML's scalars are typed already, so nothing is coerced: `5` is not a string,
# `"5"` is not an integer and `true` is neither.
Str = StrictStr
Int = StrictInt
Bool = StrictBool


def _non_empty(text: str) -> str:
    if not text.strip():
        raise ValueError("must be non-empty text")
    return text.strip()


def _compile(pattern: str) -> re.Pattern[str]:
    if not pattern:
        raise ValueError("must be a regex, not empty")
    try:
        return re.compile(pattern)
    except re.error as error:
        raise ValueError(f"bad regex: {error}") from None


def _text(value: object) -> object:
    """A number where text is wanted (a command argument `-j 4`) is taken as its text."""
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def _number(value: object) -> int | float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise ValueError("must be a number")


Number = Annotated[int | float, PlainValidator(_number)]  # an int stays an int (60, not 60.0)
Text = Annotated[StrictStr, AfterValidator(_non_empty)]  # non-empty, stripped
Regex = Annotated[StrictStr, AfterValidator(_compile)]  # a compiled re.Pattern
Arg = Annotated[StrictStr, BeforeValidator(_text)]


def choice(noun: str, choices):
    """A string that must be one of `choices`: "unknown backend 'qnn' (known: a, b)"."""
    allowed = tuple(choices)

    def check(value: str) -> str:
        if value not in allowed:
            raise ValueError(f"unknown {noun} {value!r}{did_you_mean(value, allowed)} (known: {', '.join(allowed)})")
        return value

    return Annotated[StrictStr, AfterValidator(check)]


def pattern(regex: str, what: str):
    """A string type that must match `regex`; the error says the value is not `what`."""
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.match(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return Annotated[StrictStr, AfterValidator(check)]


@dataclass(frozen=True)
class Unsupported:
    """A YAML value of a type the readers never build; no model field accepts it."""

    tag: str


class YamlSyntaxError(ValueError):
    """The text is not YAML (or not one document); `line` is 1-based, 0 when unknown."""

    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line, self.message = line, message


@dataclass(frozen=True)
class Problem:
    line: int
    loc: Loc  # where the problem is: the mapping for unknown/missing keys, else the value
    message: str  # "must be a list", "unknown key 'x' (did you mean 'y'?) (known: ...)"
    kind: str  # pydantic's error type, or "duplicate_key" / "key_type"
    key: object = None  # the key, for unknown, missing, duplicate and badly named keys

    @property
    def where(self) -> str:
        return where(self.loc)


@dataclass
class Located:
    """Plain data from YAML and where each part of it was written."""

    data: Any
    key_lines: dict[Loc, int] = field(default_factory=dict)  # loc of a mapping entry -> its key's line
    value_lines: dict[Loc, int] = field(default_factory=dict)  # loc -> the line its value starts on
    problems: list[Problem] = field(default_factory=list)  # duplicate keys, keys that are not strings

    def line(self, loc: Loc, *, key: bool = False) -> int:
        """The line of `loc` (of its key when asked and it has one), else of its nearest parent."""
        for end in range(len(loc), -1, -1):
            part = loc[:end]
            if key and part in self.key_lines:
                return self.key_lines[part]
            if part in self.value_lines:
                return self.value_lines[part]
        return 1


def where(loc: Loc) -> str:
    """`('triage', 'suites', 0)` -> "triage.suites[0]"; the top level is ""."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def did_you_mean(word: object, choices) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


# --- reading -----------------------------------------------------------------------------------

def read(text: str) -> Located:
    """Plain data and line numbers of one YAML document; raises YamlSyntaxError."""
    try:
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError:
        _raise_syntax_error(text)
    located = Located(None)
    if root is not None:
        budget = [_MAX_VALUES]
        located.data = _plain(root, (), located, budget)
    return located


def _raise_syntax_error(text: str) -> typing.NoReturn:
    """The pure-Python parser's account of the error: it says what it expected and where."""
    try:
        yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        what = ", ".join(filter(None, [getattr(error, "context", None), getattr(error, "problem", None)]))
        raise YamlSyntaxError(mark.line + 1 if mark else 0, what or str(error)) from None
    raise YamlSyntaxError(0, "the YAML parser refused the text")  # libyaml alone refused it


def _plain(node: yaml.Node, loc: Loc, located: Located, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise YamlSyntaxError(node.start_mark.line + 1, f"more than {_MAX_VALUES} values (aliases?)")
    located.value_lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode) and node.tag == "tag:yaml.org,2002:map":
        mapping: dict[str, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is None or key_node.tag != "tag:yaml.org,2002:str":
                located.problems.append(Problem(line, loc, f"key {key_node.value!r} must be a string", "key_type",
                                                key_node.value))
                continue
            if key in mapping:
                located.problems.append(Problem(line, loc + (key,), f"duplicate key {key!r}", "duplicate_key", key))
                continue
            located.key_lines[loc + (key,)] = line
            mapping[key] = _plain(value_node, loc + (key,), located, budget)
        return mapping
    if isinstance(node, yaml.SequenceNode) and node.tag == "tag:yaml.org,2002:seq":
        return [_plain(item, loc + (index,), located, budget) for index, item in enumerate(node.value)]
    if isinstance(node, yaml.ScalarNode) and node.tag in _BUILT_TAGS:
        return _CONSTRUCTOR.construct_object(node)
    return Unsupported(node.tag)


_CONSTRUCTOR = yaml.constructor.SafeConstructor()


# --- validating --------------------------------------------------------------------------------

def validate(model: Any, located: Located, data: Any = ..., *, context: Any = None):
    """(the validated value or None, problems): `model` is a pydantic model or any type a
    TypeAdapter takes. `data` replaces located.data (a reader may fill in defaults first)."""
    adapter = _adapter(model)
    try:
        value = adapter.validate_python(located.data if data is ... else data, context=context)
    except ValidationError as error:
        return None, located.problems + problems(error, located, model)
    return (value if not located.problems else None), list(located.problems)


def problems(error: ValidationError, located: Located, model: Any) -> list[Problem]:
    """pydantic's errors as Problems, in file order."""
    found = [_problem(detail, located, model) for detail in error.errors(include_url=False)]
    unique = _without_misspelt_missing(list(dict.fromkeys(found)))
    return sorted(unique, key=lambda problem: problem.line)


def _without_misspelt_missing(found: list[Problem]) -> list[Problem]:
    """`titel:` makes `title` missing too: the unknown key (with its did-you-mean) says it all."""
    unknown = {(p.loc, str(p.key)) for p in found if p.kind == "extra_forbidden"}

    def misspelt(problem: Problem) -> bool:
        typos = [key for loc, key in unknown if loc == problem.loc]
        return problem.kind == "missing" and bool(difflib.get_close_matches(str(problem.key), typos, n=1))

    return [problem for problem in found if not misspelt(problem)]


_ADAPTERS: dict[Any, Any] = {}


def _adapter(model: Any) -> TypeAdapter:
    if model not in _ADAPTERS:
        _ADAPTERS[model] = TypeAdapter(model)
    return _ADAPTERS[model]


_TYPE_WORDS = {
    "string_type": "must be a string", "int_type": "must be an integer", "int_parsing": "must be an integer",
    "int_from_float": "must be an integer", "bool_type": "must be true or false",
    "bool_parsing": "must be true or false", "float_type": "must be a number", "float_parsing": "must be a number",
    "list_type": "must be a list", "tuple_type": "must be a list", "set_type": "must be a list",
    "dict_type": "must be a mapping (key: value)", "model_type": "must be a mapping (key: value)",
    "model_attributes_type": "must be a mapping (key: value)", "dataclass_type": "must be a mapping (key: value)",
    "none_required": "must be empty",
}
_BOUNDS = {"greater_than": "more than {gt}", "greater_than_equal": "at least {ge}",
           "less_than": "less than {lt}", "less_than_equal": "at most {le}"}


def _problem(detail: dict, located: Located, model: Any) -> Problem:
    loc, kind, ctx = _data_loc(detail["loc"], located.data), detail["type"], detail.get("ctx") or {}
    is_key = "[key]" in detail["loc"]
    if kind == "extra_forbidden":
        parent, key = loc[:-1], loc[-1]
        known = _known_keys(model, parent)
        hint = did_you_mean(key, known)
        return Problem(located.line(loc, key=True), parent,
                       f"unknown key {key!r}{hint} (known: {', '.join(known) or 'none'})", kind, key)
    if kind == "missing":
        parent, key = loc[:-1], loc[-1]
        return Problem(located.line(parent, key=True), parent, f"missing required key {key!r}", kind, key)
    value = detail.get("input")
    if kind == "literal_error":
        choices = _literal_choices(model, loc, is_key)
        message = f"{value!r} is not one of {', '.join(map(str, choices))}{did_you_mean(value, choices)}"
    elif kind in ("value_error", "assertion_error"):
        message = str(ctx.get("error", detail["msg"]))
    elif kind in _BOUNDS:  # a field's description says what it must be ("between 10 and 1800 seconds")
        message = "must be " + (_description(model, loc) or _BOUNDS[kind].format(**ctx))
    elif kind in ("too_short", "too_long"):
        message = "must not be empty" if kind == "too_short" and ctx.get("min_length") == 1 else detail["msg"]
    elif kind in _TYPE_WORDS:
        message = _TYPE_WORDS[kind]
    else:
        message = detail["msg"]
    return Problem(located.line(loc, key=is_key), loc, message, kind, loc[-1] if is_key and loc else None)


def _data_loc(loc: tuple, data: Any) -> Loc:
    """pydantic's loc without the parts that are not in the data (`[key]`, union members)."""
    path: list = []
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(data, dict):  # a key, there or not (a missing or an unknown one)
            path.append(part)
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int):
            path.append(part)
            data = data[part] if 0 <= part < len(data) else None
        # else: the name of a union's member, or a part below a scalar: not a place in the file
    return tuple(path)


# --- walking the model's types, for "known keys" and "one of" -------------------------------------

def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (Union, types.UnionType):
            members = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(members) != 1:
                return tp
            tp = members[0]
        else:
            return tp


def _type_at(model: Any, loc: Loc, *, key: bool = False) -> Any:
    tp = model
    for index, part in enumerate(loc):
        tp = _unwrap(tp)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        last = index == len(loc) - 1
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            info = tp.model_fields.get(part)
            tp = info.annotation if info is not None else Any
        elif origin in (dict, typing.Mapping) or (origin is not None and getattr(origin, "__name__", "") == "Mapping"):
            tp = args[0] if key and last else args[1]
        elif origin in (list, tuple, set, frozenset):
            tp = args[0] if args else Any
        else:
            return Any
    return _unwrap(tp)


def _description(model: Any, loc: Loc) -> str | None:
    """The description of the field at `loc`, also from a Field() inside `Annotated[...] | None`."""
    parent = _type_at(model, loc[:-1]) if loc else None
    if not (isinstance(parent, type) and issubclass(parent, BaseModel)) or loc[-1] not in parent.model_fields:
        return None
    info = parent.model_fields[loc[-1]]
    if info.description:
        return info.description
    pending = [info.annotation]
    while pending:
        tp = pending.pop()
        if typing.get_origin(tp) is Annotated:
            inner, *metadata = typing.get_args(tp)
            for item in metadata:
                if getattr(item, "description", None):
                    return item.description
            pending.append(inner)
        elif typing.get_origin(tp) in (Union, types.UnionType):
            pending.extend(typing.get_args(tp))
    return None


def _known_keys(model: Any, loc: Loc) -> list[str]:
    tp = _type_at(model, loc)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return list(tp.model_fields)
    return []


def _literal_choices(model: Any, loc: Loc, key: bool) -> tuple:
    tp = _type_at(model, loc, key=key)
    return typing.get_args(tp) if typing.get_origin(tp) is typing.Literal else ()
