"""Run probes one by one and turn what each raised into a ProbeResult."""
from __future__ import annotations

import importlib
import time
import traceback
from dataclasses import dataclass
from typing import Callable

from tasks.probes.records import (
    SUITE_CATEGORY,
    GROUPS,
    SUITES,
    ProbeEnvironmentError,
    ProbeFailure,
    ProbeResult,
    environment_line,
    failure_line,
)


@dataclass(frozen=True)
class Probe:
    suite: str
    name: str
    func: Callable[[], dict]
    module: str  # repo-relative source file


# Suites whose probes live in more modules than the suite's own (each lists its own in PROBES),
# in run order. A probe's suite gives its category; its module is the source file it reports.
SUITE_MODULES: dict[str, tuple[str, ...]] = {
    "multi_method": ("multi_method", "multi_method_passes"),
}


def registry(suite: str = "all") -> list[Probe]:
    if suite not in GROUPS and suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r} (choose from: {', '.join(GROUPS)}, {', '.join(SUITES)})")
    probes = []
    for name in GROUPS.get(suite, (suite,)):
        for module_name in SUITE_MODULES.get(name, (name,)):
            module = importlib.import_module(f"tasks.probes.{module_name}")
            path = f"tasks/probes/{module_name}.py"
            probes.extend(Probe(name, probe_name, func, path) for probe_name, func in module.PROBES)
    return probes


def run_one(probe: Probe) -> ProbeResult:
    result = ProbeResult(suite=probe.suite, name=probe.name, outcome="passed", module=probe.module)
    start = time.perf_counter()
    try:
        result.details = probe.func() or {}
        result.diagnosis = "ok"
    except ProbeFailure as failure:
        result.outcome = "failed"
        lines = [failure_line(SUITE_CATEGORY[probe.suite], failure.summary), *failure.details]
        result.diagnosis = "\n".join(lines)
        result.details = failure.data
    except ProbeEnvironmentError as env:
        result.outcome = "skipped"
        result.diagnosis = environment_line(str(env))
    except Exception as exc:  # any other exception is the probe's real error: keep the traceback
        result.outcome = "error"
        result.diagnosis = f"{type(exc).__name__}: {exc}".splitlines()[0] + "\n" + traceback.format_exc()
    result.duration = round(time.perf_counter() - start, 3)
    return result


def run_probes(suite: str = "all", names: list[str] | None = None) -> list[ProbeResult]:
    selected = [p for p in registry(suite) if not names or p.name in names]
    if names and len(selected) != len(set(names)):
        known = {p.name for p in registry(suite)}
        raise ValueError(f"unknown probe(s): {', '.join(sorted(set(names) - known))}")
    return [run_one(p) for p in selected]
