"""Structural evidence: what a failure is in the program, read from its stack and the objects
its text names (`structure.yaml`), before any word of its message.

    Failure ─▶ frames (file + function) and text (line, message, context, evidence)
            ─▶ the signals found (`to_backend`, `fused_submodule`, `buffer_mutation`, ...)

The model reads every signal as a feature (`s:<id>`, weight learned from the corpus); the
decision adds a signal's `points_to` category as evidence of its own (decide.py).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from triage_rules.records import CATEGORIES, Failure
from triage_rules.testnames import is_test_file, test_names, without_names

STRUCTURE_FILE = Path(__file__).with_name("structure.yaml")
WHERE = ("frames", "text", "any")
MAX_TEXT = 8000


@dataclass(frozen=True)
class Signal:
    id: str
    where: str
    pattern: re.Pattern[str]
    points_to: str | None = None


@functools.lru_cache(maxsize=1)
def signals() -> tuple[Signal, ...]:
    data = yaml.safe_load(STRUCTURE_FILE.read_text(encoding="utf-8"))
    out = []
    for index, entry in enumerate(data.get("signals") or []):
        where = f"{STRUCTURE_FILE.name}: signal {index + 1}"
        unknown = set(entry) - {"id", "where", "pattern", "points_to"}
        if unknown or not {"id", "where", "pattern"} <= set(entry):
            raise ValueError(f"{where}: keys are id, where, pattern, points_to (got {sorted(entry)})")
        if entry["where"] not in WHERE or entry.get("points_to", "other") not in CATEGORIES:
            raise ValueError(f"{where}: where is one of {', '.join(WHERE)}; points_to a category")
        out.append(Signal(entry["id"], entry["where"], re.compile(entry["pattern"]), entry.get("points_to")))
    return tuple(out)


def _read(failure: Failure) -> tuple[str, str]:
    """(frames, text) as the signals read them: never the failing test's own names nor its test
    files' frames (testnames.py: the test's area is weighed apart)."""
    lines = [failure.line, failure.message, *failure.context, *failure.evidence]
    names = test_names(failure.test or "", *lines)
    frames = " ".join(f"{f.file} {f.function}" for f in failure.frames if not is_test_file(f.file))
    return frames, "\n".join(without_names(line, names) for line in lines)[:MAX_TEXT]


def found_in(failure: Failure) -> list[str]:
    """The ids of the signals this failure shows, in the table's order."""
    frames, text = _read(failure)
    found = []
    for signal in signals():
        where = {"frames": frames, "text": text, "any": f"{frames}\n{text}"}[signal.where]
        if signal.pattern.search(where):
            found.append(signal.id)
    return found


def only_on_the_stack(failure: Failure) -> set[str]:
    """The signals this failure shows in its frames alone, none of its text naming them."""
    frames, text = _read(failure)
    return {s.id for s in signals() if s.where != "text" and s.pattern.search(frames)
            and not (s.where == "any" and s.pattern.search(text))}


def expected() -> dict[str, str]:
    """signal id -> the category the table expects it to point to (the learned weight's prior)."""
    return {s.id: s.points_to for s in signals() if s.points_to}


def pointed_to(ids: list[str]) -> dict[str, list[str]]:
    """category -> the signals among `ids` that point to it."""
    by_id = {s.id: s for s in signals()}
    out: dict[str, list[str]] = {}
    for signal_id in ids:
        category = by_id[signal_id].points_to if signal_id in by_id else None
        if category:
            out.setdefault(category, []).append(signal_id)
    return out
