"""Probes: tiny real models that exercise the two seed failure modes on the real runtime.

Public API (the pipeline, `etriage probe` and `python -m tasks.probes` all use it):

    run_probes(suite="all") -> list[ProbeResult]
    ProbeResult, SUITES, SUITE_CATEGORY

A probe returns a *diagnosis*: on failure its text holds one line
`ProbeFailure: [<category>] <diagnosis>` followed by the evidence; when the environment
cannot run it (backend not registered, package absent) it is skipped with a line
`ProbeEnvironment: <reason>`; an unexpected exception is an error carrying its traceback.
torch and executorch are imported only when a probe runs.
"""
from __future__ import annotations

from tasks.probes.records import SUITE_CATEGORY, SUITES, ProbeResult

__all__ = ["ProbeResult", "SUITES", "SUITE_CATEGORY", "run_probes", "probe_names"]


def run_probes(suite: str = "all", names: list[str] | None = None) -> list[ProbeResult]:
    from tasks.probes.runner import run_probes as _impl  # deferred: the runner imports torch and executorch

    return _impl(suite, names)


def probe_names(suite: str = "all") -> list[tuple[str, str]]:
    from tasks.probes.runner import registry  # deferred: the runner imports torch and executorch

    return [(p.suite, p.name) for p in registry(suite)]
