"""Learned test costs: per test file and per test, from the JUnit times of earlier runs.

Stored in <data_dir>/durations.json (written atomically; concurrent runs may lose each
other's latest numbers, never corrupt the file). Selection uses them for its budget;
files never seen get the conservative table estimate (suites.yaml `selection`).

    {"files": {path: {"seconds": s, "tests": n, "cpu": s}}, "tests": {node id: s},
     "cpu": {node id: s},    # CPU seconds (the pytest plugin's process_time around each test)
     "startup_seconds": s}   # one pytest process: interpreter, torch, executorch, plugins

The budget is spent in CPU seconds where they are known: a test's CPU time is the same on a
busy worker as on an idle one (its wall time is not), so the selection does not shrink with
the load. Wall seconds stand in for tests measured before CPU time was.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from tasks.pipeline.tables import Selection
from tasks.records import SuiteResult

FILE = "durations.json"
KEEP = 0.5  # weight of the old number when a new one arrives (runs vary on shared workers)


def load(data_dir: Path) -> dict:
    path = Path(data_dir) / FILE
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {"files": {}, "tests": {}}
    return data if isinstance(data, dict) else {"files": {}, "tests": {}}


def _blend(old: float | None, new: float) -> float:
    return round(new if old is None else KEEP * old + (1 - KEEP) * new, 2)


def record(data_dir: Path, results: list[SuiteResult], *, whole_files: bool,
           process_seconds: float | None = None, n_processes: int = 1) -> None:
    """Fold one run's JUnit times in. `whole_files`: every test of each file ran (not a
    subset such as a retry), so the file's total is meaningful."""
    data = load(data_dir)
    files, tests = data.setdefault("files", {}), data.setdefault("tests", {})
    cpu = data.setdefault("cpu", {})
    per_file: dict[str, list[float]] = {}
    per_file_cpu: dict[str, list[float]] = {}
    for suite in results:
        for test in suite.tests:
            if "::" not in test.test or not test.test.split("::", 1)[0].endswith(".py"):
                continue  # probes, crash pseudo-tests
            tests[test.test] = _blend(tests.get(test.test), test.seconds)
            per_file.setdefault(test.test.split("::", 1)[0], []).append(test.seconds)
            if getattr(test, "cpu_seconds", None) is not None:
                cpu[test.test] = _blend(cpu.get(test.test), test.cpu_seconds)
                per_file_cpu.setdefault(test.test.split("::", 1)[0], []).append(test.cpu_seconds)
    if whole_files:
        for path, times in per_file.items():
            old = files.get(path, {})
            files[path] = {"seconds": _blend(old.get("seconds"), sum(times)), "tests": len(times)}
            if len(per_file_cpu.get(path, ())) == len(times):
                files[path]["cpu"] = _blend(old.get("cpu"), sum(per_file_cpu[path]))
        if process_seconds is not None and per_file:
            startup = max(process_seconds - sum(map(sum, per_file.values())), 0.0) / max(n_processes, 1)
            data["startup_seconds"] = _blend(data.get("startup_seconds"), startup)
    path = Path(data_dir) / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)


def estimate_tests(data: dict, node_ids: list[str], rules: Selection) -> float:
    """Seconds for running these tests of one file: its import/collection cost plus each
    test's learned time (the table's per-test estimate for a test never run)."""
    tests, cpu = data.get("tests", {}), data.get("cpu", {})
    return rules.seconds_per_file + sum(cpu.get(t, tests.get(t, rules.seconds_per_test)) for t in node_ids)


def estimate(data: dict, path: str, n_tests: int, rules: Selection) -> tuple[float, str]:
    """(seconds, how it was estimated) for running one test file inside a shared process:
    its import/collection cost (seconds_per_file) plus its tests."""
    known = data.get("files", {}).get(path)
    if known and "cpu" in known:
        return rules.seconds_per_file + known["cpu"], "learned CPU time"
    if known:
        return rules.seconds_per_file + known["seconds"], "learned from earlier runs"
    return rules.seconds_per_file + rules.seconds_per_test * max(n_tests, 1), "no earlier runs: table estimate"
