"""Merge-base outcomes: only what a verdict needs, after the head has run.

A head failure needs its merge-base outcome to be called `new` or `pre_existing`; an
environment failure does not (it is never blamed), and a passing test does not either.
So at the merge base only head's non-environment failures run, unless the cache already
knows them. A suite that crashed at head runs in full at the merge base (is the crash
pre-existing?), and `full_base` runs everything (fills the cache; enables `fixed`).

Cache: <data_dir>/base-results/<key>.json per merge base + recipes + suite definition +
target + installed package, holding every test outcome learned so far and whether the
whole suite ran there (`complete`). Partial runs add to it. Writes are atomic; two runs
writing at once may lose one's additions, never corrupt the file.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from tasks.pipeline.compare import CRASHED, crash_test
from tasks.pipeline.suites import SuiteRun
from tasks.records import BaseRun, SuiteResult, TestResult


@dataclass
class Known:
    """What the cache knows of one suite at the merge base."""
    path: Path | None
    complete: bool = False
    tests: dict[str, TestResult] = field(default_factory=dict)


def cache_key(ws, run: SuiteRun, plan) -> str:
    """The merge base's environment (its laid tree names the compiled parts it lies over, its
    torch the interpreter's packages) is part of the key: a test's outcome is that environment's."""
    env = run.build.environment
    payload = json.dumps({
        "merge_base": plan.merge_base, "recipes": plan.recipes, "suite": repr(run.suite),
        "target": run.target, "environment": [env.tree_key, env.torch, env.pythonpath] if env else str(ws.installed),
    })
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def load(ws, run: SuiteRun, plan) -> Known:
    if not ws.use_cache:
        return Known(None)
    path = ws.data_dir / "base-results" / f"{cache_key(ws, run, plan)}.json"
    try:
        data = json.loads(path.read_text())
        tests = {t["test"]: TestResult.from_dict(t) for t in data["tests"]}
        return Known(path, bool(data["complete"]), tests)
    except FileNotFoundError:
        return Known(path)
    except (ValueError, KeyError, TypeError):  # a cache file from an older layout: start over
        return Known(path)


def save(known: Known) -> None:
    if known.path is None:
        return
    known.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = known.path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"complete": known.complete,
                               "tests": [t.to_dict() for t in known.tests.values()]}))
    os.replace(tmp, known.path)


def needed(failures: dict) -> dict[tuple[str, str], set[str]]:
    """(suite, target) -> head failures whose merge-base outcome decides the verdict."""
    need: dict[tuple[str, str], set[str]] = {}
    for (suite, target, test), found in failures.items():
        if not any(f.environment for f in found):
            need.setdefault((suite, target), set()).add(test)
    return need


def base_outcomes(ws, targets: dict, plan, head_runs: list[SuiteRun], head_results: list[SuiteResult],
                  failures: dict, base_build, *, full_base: bool, progress, record_durations):
    """-> (merge-base SuiteResults, BaseRun per suite, suites with complete results)."""
    need = needed(failures)
    crashed = {(s.suite, s.target) for s in head_results if s.status == "crashed"}
    known, runs, infos = {}, {}, {}
    for head_run in head_runs:
        key = (head_run.suite.name, head_run.target)
        # leave_out=(): a whole merge-base run is cached as whole, so it runs every test
        base_run = replace(head_run, build=base_build, phase="base", node_ids=(), leave_out=(),
                           budget_seconds=None, budget_paths=(),
                           paths=tuple(p for p in head_run.paths if (Path(base_build.package_dir) / p).exists()))
        known[key] = cache = load(ws, base_run, plan)
        wanted = {t for t in need.get(key, ()) if not t.endswith(CRASHED)}
        infos[key] = BaseRun(suite=key[0], target=key[1], source="not_needed", complete=cache.complete,
                             needed=len(wanted) + (key in crashed))
        if cache.complete:
            infos[key].source = "cache"
        elif full_base or key in crashed:
            runs[key] = base_run
        elif wanted - set(cache.tests):
            runs[key] = replace(base_run, node_ids=tuple(sorted(wanted - set(cache.tests))))
        elif wanted:
            infos[key].source = "cache"

    by_target: dict[str, list[SuiteRun]] = {}
    for key, run in runs.items():
        what = f"{len(run.node_ids)} test(s) that failed at head" if run.node_ids else "in full"
        progress(f"{run.suite.name} on {run.target} at merge base {plan.merge_base[:12]}: running {what} ...")
        by_target.setdefault(run.target, []).append(run)
    for target, target_runs in by_target.items():
        for results, seconds, whole in targets[target].run_many(target_runs):
            record_durations(results, seconds, whole)
            for result in results:
                key = (result.suite, result.target)
                info, cache, run = infos[key], known[key], runs[key]
                info.source = "cache+ran" if info.source == "cache" or cache.tests else "ran"
                if result.status != "ran":  # never cache a crash: it may be the worker's, not the code's
                    crashed = crash_test(result)
                    info.ran, cache.tests[crashed.test] = [crashed.test], crashed
                    continue
                info.ran = [t.test for t in result.tests]
                cache.tests.update({t.test: t for t in result.tests})
                # pytest's own suites are whole when run without a test list; `selected`
                # depends on the change's files, so it is never complete
                cache.complete = cache.complete or (not run.node_ids and run.suite.kind != "selected")
                info.complete = cache.complete
                save(replace(cache, tests={k: v for k, v in cache.tests.items() if not k.endswith(CRASHED)}))
                progress(f"{key[0]} on {key[1]} at merge base: {len(result.tests)} test(s) ran")

    results = [SuiteResult(suite=k[0], target=k[1], commit=base_build.commit, status="ran",
                           tests=list(cache.tests.values())) for k, cache in known.items()]
    complete = {k for k, cache in known.items() if cache.complete}
    return results, list(infos.values()), complete
