"""`triage(...)`: plan -> rebuild -> run suites at base and head -> classify -> compare -> report.

Plain Python with its collaborators passed in (the engine's classifier, a progress
callback); no global state, no os.chdir. The CLI, the Celery task and the tests call this.
Everything a run writes lives in <data_dir>/runs/<run>/ (removed afterwards) except the
shared caches: base results, import graphs, native builds.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tasks.pipeline import compare, select, suspects
from tasks.pipeline.build import Workspace, build_commit
from tasks.pipeline.overlay import installed_package_dir
from tasks.pipeline.plan import plan_change
from tasks.pipeline.suites import SuiteRun, reproduce_command
from tasks.pipeline.tables import Tables, load_tables
from tasks.pipeline.targets import make_target, not_run
from tasks.records import VERDICTS, BuildResult, Report, SuiteResult, Verdict


@dataclass
class TriageOptions:
    repo: Path
    base: str
    head: str
    data_dir: Path
    targets: list[str] | None = None  # default: every configured target
    suites: list[str] | None = None  # default: what the plan picks
    use_cache: bool = True
    tables_dir: Path | None = None
    python: str = sys.executable
    installed: Path | None = None  # the installed executorch package; found via `python` if None
    tool_env: dict[str, str] = field(default_factory=dict)  # QNN_SDK_ROOT etc., read by the caller
    keep_run_dir: bool = False
    suite_timeout: float = 1800


def _quiet(message: str) -> None:
    """The default progress callback: say nothing."""


def triage(options: TriageOptions, *, classify=None, progress=_quiet) -> Report:
    if classify is None:
        from triage_rules import classify_text as classify
    start = time.monotonic()
    tables = load_tables(options.tables_dir)
    repo = Path(options.repo).resolve()
    plan = plan_change(repo, options.base, options.head, tables,
                       targets=options.targets, suites=options.suites)
    progress(f"plan: {len(plan.changed_files)} changed file(s), areas {', '.join(plan.areas) or '-'}, "
             f"backends {', '.join(plan.backends) or '-'}, suites {', '.join(plan.suites) or '-'}")
    if not plan.suites:
        build = BuildResult(status="skipped", kind="none", commit=plan.head, reason="; ".join(plan.notes))
        return _report(plan, build, [], [], start, base_cached=False)

    data_dir = Path(options.data_dir).resolve()
    (data_dir / "runs").mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=data_dir / "runs"))
    ws = Workspace(repo=repo, python=options.python,
                   installed=Path(options.installed or installed_package_dir(options.python)),
                   run_dir=run_dir, data_dir=data_dir, use_cache=options.use_cache,
                   tool_env=tuple(options.tool_env.items()))
    try:
        return _triage_in(ws, tables, plan, options, classify, progress, start)
    finally:
        if not options.keep_run_dir:
            shutil.rmtree(run_dir, ignore_errors=True)


def _triage_in(ws: Workspace, tables: Tables, plan, options, classify, progress, start) -> Report:
    if "selected" in plan.suites:
        progress("selecting tests (import graph of head) ...")
        graph = select.import_graph(ws.repo, plan.head, ws.data_dir, ws.use_cache)
        fixed = {p for s in plan.suites for p in tables.suites[s].paths}
        plan.selected, plan.left_out = select.select_tests(graph, plan.changed_files, tables, fixed)
        progress(f"selected {len(plan.selected)} test file(s): {', '.join(s.path for s in plan.selected) or '-'}")
        if not plan.selected:
            plan.suites.remove("selected")
            plan.notes.append("no further tests selected beyond the fixed suites")

    progress(f"build head {plan.head[:12]} ({', '.join(plan.recipes) or 'overlay'}) ...")
    head_build = build_commit(ws, tables, plan.head, plan.changed_files, plan.recipes, classify, progress)
    if head_build.status == "failed":
        return _build_failed(ws, tables, plan, head_build, classify, progress, start)
    base_build = build_commit(ws, tables, plan.merge_base, [], [], classify, progress)

    targets = {name: make_target(tables.targets[name], options.tool_env) for name in plan.targets}
    base_results, head_results, not_run_results, all_cached = [], [], [], True
    for suite_name in plan.suites:
        suite = tables.suites[suite_name]
        runnable = [t for t in targets.values() if suite.kind in t.spec.suite_kinds
                    and set(suite.backends) & set(t.spec.backends) & set(plan.backends)]
        if not runnable:
            probe = SuiteRun(suite, head_build, "-", ws.run_dir)
            not_run_results.append(not_run(probe, f"no requested target runs {suite.kind} suites "
                                                  f"for {', '.join(suite.backends)}"))
            continue
        paths = tuple(s.path for s in plan.selected) if suite.kind == "selected" else ()
        for target in runnable:
            ok, reason = target.available()
            head_run = SuiteRun(suite, head_build, target.name, ws.run_dir, options.python, paths,
                                timeout=options.suite_timeout)
            if not ok:
                not_run_results.append(not_run(head_run, reason))
                progress(f"{suite.name} on {target.name}: not run ({reason})")
                continue
            base_paths = tuple(p for p in paths if (Path(base_build.package_dir) / p).exists())
            base_result, cached = _base_result(ws, target, SuiteRun(
                suite, base_build, target.name, ws.run_dir, options.python, base_paths,
                timeout=options.suite_timeout), plan, progress)
            all_cached &= cached
            base_results.append(base_result)
            progress(f"{suite.name} on {target.name} at head ...")
            head_result = target.run(head_run)
            progress(f"{suite.name} on {target.name} at head: {_counts(head_result)}")
            head_results.append(head_result)

    base_idx, head_idx = compare.index(base_results), compare.index(head_results)
    failures = compare.classify_failing(head_idx, classify)
    retried = _retry(ws, tables, targets, head_build, compare.retry_candidates(base_idx, head_idx, failures),
                     options, progress)
    verdicts = compare.decide(base_idx, head_idx, failures, retried)
    regions = suspects.changed_regions(ws.repo, plan.merge_base, plan.head, plan.changed_files)
    for verdict in verdicts:
        key = (verdict.suite, verdict.target, verdict.test)
        if verdict.verdict == "new":
            verdict.suspects = suspects.rank(regions, compare.primary(failures.get(key, [])),
                                             head_idx[key].text, verdict.category, tables)
        verdict.reproduce = reproduce_command(tables.suites[verdict.suite], verdict.test)
    return _report(plan, head_build, verdicts, head_results + not_run_results, start, all_cached)


def _base_key(ws: Workspace, run: SuiteRun, plan) -> str:
    version = (ws.installed / "version.py")
    payload = json.dumps({
        "merge_base": plan.merge_base, "recipes": plan.recipes, "suite": repr(run.suite),
        "paths": run.paths, "target": run.target, "installed": str(ws.installed),
        "installed_version": version.read_text() if version.exists() else "",
    })
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def _base_result(ws: Workspace, target, run: SuiteRun, plan, progress) -> tuple[SuiteResult, bool]:
    cache = ws.data_dir / "base-results" / f"{_base_key(ws, run, plan)}.json"
    if ws.use_cache and cache.is_file():
        progress(f"{run.suite.name} on {run.target} at merge base: cached")
        return SuiteResult.from_dict(json.loads(cache.read_text())), True
    progress(f"{run.suite.name} on {run.target} at merge base {plan.merge_base[:12]} ...")
    result = target.run(run)
    progress(f"{run.suite.name} on {run.target} at merge base: {_counts(result)}")
    if result.status == "ran":  # never cache a crash: it may be the worker's, not the code's
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(result.to_dict()))
        os.replace(tmp, cache)
    return result, False


def _retry(ws, tables, targets, head_build, keys, options, progress) -> dict:
    """Re-run only the tests that would be `new`, at the same head, up to `retries` times."""
    retried, pending = {}, list(keys)
    for attempt in range(1, tables.selection.retries + 1):
        groups: dict[tuple[str, str], list[str]] = {}
        for suite, target, test in pending:
            groups.setdefault((suite, target), []).append(test)
        still_failing = []
        for (suite, target), tests in groups.items():
            progress(f"retrying {len(tests)} failed test(s) of {suite} on {target} (attempt {attempt})")
            run = SuiteRun(tables.suites[suite], head_build, target, ws.run_dir, options.python,
                           node_ids=tuple(tests), timeout=options.suite_timeout, attempt=attempt)
            for key, test in compare.index([targets[target].run(run)]).items():
                if key in pending:
                    retried[key] = test
                    if test.outcome != "passed":
                        still_failing.append(key)
        pending = still_failing
        if not pending:
            break
    return retried


def _build_failed(ws, tables, plan, head_build, classify, progress, start) -> Report:
    """A build that fails at head is the change's unless it fails at the merge base too."""
    progress("head build failed; building the merge base to compare ...")
    base_build = build_commit(ws, tables, plan.merge_base, [], plan.recipes, classify, progress)
    found = [_failure_from_dict(f) for f in head_build.failures]
    failure = compare.primary(found)
    if failure and failure.environment:
        verdict = "environment"
    else:
        verdict = "pre_existing" if base_build.status == "failed" else "new"
    regions = suspects.changed_regions(ws.repo, plan.merge_base, plan.head, plan.changed_files)
    text = head_build.log_excerpt
    category = failure.category if failure else "build_failure"
    result = Verdict(suite="build", test=", ".join(plan.recipes), target="build", base=base_build.status,
                     head="failed", verdict=verdict, category=category,
                     rule=failure.rule if failure else "", primary_line=failure.line if failure else head_build.reason,
                     fingerprint=failure.fingerprint if failure else "", title=failure.title if failure else "",
                     explanation=failure.explanation if failure else "", log_excerpt=text[-3000:],
                     suspects=suspects.rank(regions, failure, text, category, tables),
                     reproduce="; ".join(" ".join(c) for r in plan.recipes for c in tables.recipes[r].commands))
    return _report(plan, head_build, [result], [], start, base_cached=False)


def _failure_from_dict(data: dict):
    from triage_rules.records import Failure

    return Failure.from_dict(data)


def _counts(result: SuiteResult) -> str:
    if result.status != "ran":
        return f"{result.status} ({result.reason})"
    outcomes = [t.outcome for t in result.tests]
    return ", ".join(f"{outcomes.count(o)} {o}" for o in ("passed", "failed", "error", "skipped") if outcomes.count(o))


def _report(plan, build, verdicts, suite_results, start, base_cached) -> Report:
    summary = {v: sum(r.verdict == v for r in verdicts) for v in VERDICTS}
    summary["not_run"] = sum(s.status == "not_run" for s in suite_results)
    return Report(base=plan.base, head=plan.head, merge_base=plan.merge_base, plan=plan, build=build,
                  results=verdicts, suites=suite_results, summary=summary,
                  seconds=round(time.monotonic() - start, 1), base_cached=base_cached)
