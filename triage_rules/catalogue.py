"""The one catalogue of what etriage runs and says, read from triage_rules/tables/*.yaml:
suites (name, description), targets (kind, queue, SoC) and the default label per category.

The repository config (`bot/repo_config.py`), the publisher's queues (`bot/queues.py`) and
`/etriage help` read it here; the pipeline reads the same files with full validation
(`tasks/pipeline/tables.py`). A name means the same thing everywhere.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

TABLES = Path(__file__).resolve().parent / "tables"


@dataclass(frozen=True)
class TargetEntry:
    name: str
    kind: str  # "emulator" (runs on a worker machine: host, simulators) | "device" (a phone)
    queue: str
    soc: str | None = None
    description: str = ""


def _load(name: str) -> dict:
    return yaml.safe_load((TABLES / name).read_text()) or {}


@functools.cache
def suites() -> dict[str, str]:
    """suite name -> description."""
    return {name: entry.get("description", "") for name, entry in _load("suites.yaml")["suites"].items()}


@functools.cache
def targets() -> dict[str, TargetEntry]:
    data = _load("targets.yaml")
    found = {name: TargetEntry(name, "emulator", entry.get("queue", "build"), None, entry.get("description", ""))
             for name, entry in data["targets"].items()}
    found.update({name: TargetEntry(name, "device", entry.get("queue", "device"), entry.get("soc"),
                                    entry.get("description", ""))
                  for name, entry in (data.get("devices") or {}).items()})
    return found


@functools.cache
def labels() -> dict[str, str]:
    """category -> the label a new failure of it puts on the PR."""
    return dict(_load("labels.yaml"))


@functools.cache
def backends() -> tuple[str, ...]:
    return tuple(_load("areas.yaml")["backends"])
