"""The failure record: what the engine makes from a log and every later stage reads.

Small, typed and serialisable. `dump`/`load` below are the one serialiser of every record of
etriage (this layer is the lowest, so the pipeline's and the service's records use it too);
`Failure.to_dict()` is `dump` of it: the JSON of `etriage classify --format json`.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields, is_dataclass
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

# The category ids are an interface (labels, dashboards and reports key on them).
CATEGORIES: tuple[str, ...] = (
    "multi_method_lowering",
    "mutable_buffer",
    "qnn_sdk_or_toolchain",
    "qnn_op_validation",
    "device_infra",
    "ci_infra",
    "build_failure",
    "lint",
    "export_failure",
    "numerical_mismatch",
    "runtime_error",
    "import_or_env",
    "other",
)

# A category becomes a label on the PR only at this confidence or above (and not unsure): where
# the grouped cross-validation's reliability table shows a stated confidence right >= 95%.
# With calibration.yaml's steps (0.908, 0.975, ...), the 0.908 step is right 91% of the time:
# at 0.95, 36.5% of the training part's records are labelled at 98.5% (at 0.9: 48.9% at 96.5%).
LABEL_CONFIDENCE = 0.95


@dataclass(frozen=True)
class Frame:
    """One traceback frame (Python) or source location (C/C++ diagnostics)."""

    file: str
    line: int
    function: str = ""


@dataclass
class Failure:
    """One failure found in a log, most informative line first."""

    line: str  # the primary line: the one line that best explains the failure
    line_no: int  # 1-based line number of `line` in the input
    test: str | None = None
    exception: str | None = None
    message: str = ""
    context: list[str] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    fingerprint: str = ""
    category: str = "other"
    rule: str = ""
    title: str = ""
    explanation: str = ""
    suggestion: str = ""
    owners: list[str] = field(default_factory=list)
    # True when the rule says the environment (SDK, runner, device, runtime build), not the
    # change under test, is at fault. The pipeline turns this into the `environment` verdict.
    environment: bool = False
    # True when all the log offers is a CI wrapper's exit line (`Process completed with exit
    # code 1`): the real error is not in this log. The pipeline says so (`not_in_log`), never
    # `new` and never the environment.
    error_not_in_log: bool = False
    # Other lines of the same incident (the extractor's evidence), for the model and readers.
    evidence: list[str] = field(default_factory=list)
    # How the category was decided: a rule's id, or "model" (the learned second opinion), and
    # how sure that is (0..1). `looks_like`: the nearest labelled corpus records, each
    # {"source", "category", "line", "similarity"}: similar failures seen in public history.
    decided_by: str = ""
    confidence: float = 0.0
    looks_like: list[dict] = field(default_factory=list)
    # What decided the category, strongest first, as a reader would check it: the rule and its
    # strength, the structural signals (frames, objects named), the failing test's area, the
    # model's leading categories and its heaviest features. `explain` and `classify` show it.
    decision: list[str] = field(default_factory=list)
    # [category, runner-up] when the two are close or the confidence is low: the report says
    # "X or Y, unsure" and no label is applied; empty when the engine is sure.
    unsure: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dump(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Failure":
        return load(cls, data)

# ---- the one serialiser --------------------------------------------------------------------
# Every record of etriage (this Failure, tasks.records' plan/result/verdict/report records, the
# service's publish payload) is a dataclass whose field types say what it holds. `dump` turns
# one into JSON-ready values and `load` makes it again from them, guided by those types; the
# JSON report, the stored full report, pending publishes and the merge-base cache all use this
# pair and nothing else. `load` skips keys the record no longer has and fills missing ones
# with their defaults, so a report stored by an older version still loads.


def dump(record):
    """A record (or a list/dict/tuple of them) as plain JSON values; lossless with `load`."""
    if is_dataclass(record) and not isinstance(record, type):
        return {f.name: dump(getattr(record, f.name)) for f in fields(record)}
    if isinstance(record, (list, tuple)):
        return [dump(item) for item in record]
    if isinstance(record, dict):
        return {key: dump(value) for key, value in record.items()}
    return record


def load(kind, data):
    """`data` (what `dump` gave, e.g. read back from JSON) as `kind`: a record class or a
    typing form such as `list[Verdict]` or `dict[str, int]`."""
    if data is None:
        return None
    if is_dataclass(kind):
        hints = _hints(kind)
        known = {f.name for f in fields(kind) if f.init}
        return kind(**{name: load(hints[name], value) for name, value in data.items() if name in known})
    origin, args = get_origin(kind), get_args(kind)
    if origin in (UnionType, Union):  # `X | None`: the one non-None member decides
        members = [a for a in args if a is not type(None)]
        return load(members[0], data) if len(members) == 1 else data
    if origin is list:
        return [load(args[0], item) for item in data] if args else list(data)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis or not args:
            return tuple(load(args[0] if args else Any, value) for value in data)
        return tuple(load(item, value) for item, value in zip(args, data))
    if origin is dict:
        value_kind = args[1] if len(args) == 2 else Any
        return {key: load(value_kind, value) for key, value in data.items()}
    return data


@functools.cache
def _hints(kind) -> dict:
    return get_type_hints(kind)
