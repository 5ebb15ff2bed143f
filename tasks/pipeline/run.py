"""`triage(...)`: plan -> rebuild -> run suites at head -> classify -> the merge base's outcomes
for head's failures (base.py) -> retry -> compare -> report.

Plain Python with its collaborators passed in (the engine's classifier, a progress
callback); no global state, no os.chdir. The CLI, the Celery task and the tests call this.
Everything a run writes lives in <data_dir>/runs/<run>/ (removed afterwards) except the
shared caches: merge-base outcomes, learned durations, import graphs, native builds.
"""
from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from tasks import environments
from tasks.environments import torchpin
from tasks.pipeline import base, compare, coverage_map, durations, gitio, select, suspects, treepaths, unrunnable
from tasks.pipeline.build import Workspace, build_commit, compiled_choices
from tasks.pipeline.gitio import GitError
from tasks.pipeline.overlay import installed_package_dir
from tasks.pipeline.plan import plan_change, refusal
from tasks.pipeline.pytest_plugin.etriage_pytest import BUDGET_REASON
from tasks.pipeline.sandbox import Sandbox
from tasks.pipeline.suites import SuiteRun, reproduce_command
from tasks.pipeline.tables import Tables, load_tables
from tasks.pipeline.targets import make_target, not_run
from tasks.records import VERDICTS, BuildResult, Report, SelectedTest, SuiteResult, Verdict
from triage_rules import classify_text
from triage_rules.records import Failure


log = logging.getLogger(__name__)


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
    full_base: bool = False  # run every suite in full at the merge base (fills the cache, gives `fixed`)
    sandbox: Sandbox = field(default_factory=Sandbox)  # Sandbox(enabled=False): --no-sandbox, never the service
    budget_seconds: float | None = None  # selected tests' time budget (`.github/etriage.yml`); None: the table's
    select_all: bool = False  # run every relevant test that can run here (`/etriage run selected --all`)
    path_backends: dict[str, str] = field(default_factory=dict)  # the repository's `triage.paths`
    targets_named: bool = True  # False: `targets` are an automatic run's defaults (plan_change)
    fetch: bool = True  # commit environments may fetch a registry wheel or a pinned torch
    shared_store: Path | None = None  # built compiled parts shared between build machines
    coverage_store: object = None  # bot.store.Store holding the coverage map; None: <data_dir>/etriage.db
    coverage: bool = True  # record the selected tests' lines at head; select from the merge base's map


NO_SANDBOX = "no sandbox"  # the reason's first words, in the report and on the check run


def _quiet(message: str) -> None:
    """The default progress callback: say nothing."""


def triage(options: TriageOptions, *, classify=classify_text, progress=_quiet) -> Report:
    start = time.monotonic()
    tables = _with_budget(load_tables(options.tables_dir), options)
    repo = Path(options.repo).resolve()
    plan = plan_change(repo, options.base, options.head, tables,
                       targets=options.targets, suites=options.suites, path_backends=options.path_backends,
                       targets_named=options.targets_named)
    if plan.refused:
        progress(plan.refused)
        return _refused(plan, plan.refused, start)
    progress(f"plan: {len(plan.changed_files)} changed file(s), areas {', '.join(plan.areas) or '-'}, "
             f"backends {', '.join(plan.backends) or '-'}, suites {', '.join(plan.suites) or '-'}")
    if not plan.suites:
        build = BuildResult(status="skipped", kind="none", commit=plan.head, reason="; ".join(plan.notes))
        return _report(plan, build, [], [], start, base_cached=False)
    problem = options.sandbox.problem()
    if problem:  # never run a change's code bare: every planned suite is reported not run
        progress(f"not run: no sandbox ({problem})")
        return _no_sandbox(plan, tables, problem, start)

    data_dir = Path(options.data_dir).resolve()
    (data_dir / "runs").mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=data_dir / "runs"))
    ws = Workspace(repo=repo, python=options.python,
                   installed=Path(options.installed or installed_package_dir(options.python, options.sandbox, run_dir)),
                   run_dir=run_dir, data_dir=data_dir, use_cache=options.use_cache,
                   tool_env=tuple(options.tool_env.items()), sandbox=options.sandbox, fetch=options.fetch,
                   shared_store=options.shared_store)
    try:
        return _triage_in(ws, tables, plan, options, classify, progress, start)
    except treepaths.UnsafePath as unsafe:  # a path of either tree, met while laying or exporting it
        progress(refusal(unsafe))
        return _refused(plan, refusal(unsafe), start)
    finally:
        if not options.keep_run_dir:
            shutil.rmtree(run_dir, ignore_errors=True)


def _triage_in(ws: Workspace, tables: Tables, plan, options, classify, progress, start) -> Report:
    targets = {name: make_target(tables.targets[name], options.tool_env) for name in plan.targets}
    toolchains = _toolchains(plan, tables, targets)
    try:
        choices = compiled_choices(ws, [plan.merge_base, plan.head], tables,
                                   python_runtime=any(t.python_runtime for t in targets.values()))
    except (GitError, OSError) as error:
        build = BuildResult(status="environment", kind="environment", commit=plan.head,
                            reason=f"could not read the commits' native sources: {error}")
        return _environment_failed(plan, build, "head", start)
    # what earlier runs in this environment showed this worker cannot run (unrunnable.py)
    head_choice = choices[plan.head]
    torch_pin, _ = torchpin.read_pin(ws.repo, plan.head, environments.table().torch_pins)
    lessons_key = unrunnable.identity(head_choice.source, head_choice.release, head_choice.native_key,
                                      torch_pin, unrunnable.packages_of(Path(ws.installed).parent))
    cannot_run = unrunnable.load(ws.data_dir, lessons_key) if ws.use_cache else {}
    if "selected" in plan.suites:
        progress("selecting tests (import graph of head) ...")
        graph = select.import_graph(ws.repo, plan.head, ws.data_dir, ws.use_cache)
        fixed = {p for s in plan.suites for p in tables.suites[s].paths}
        symbols = {r.symbol: r.path for r in suspects.changed_regions(ws.repo, plan.merge_base, plan.head,
                                                                       plan.changed_files)
                   if r.symbol and r.symbol != "<module>"}
        evidence = coverage_map.evidence(_coverage_store(options, ws), ws.repo, plan.merge_base, plan.head,
                                         plan.changed_files)
        plan.selected, plan.left_out = select.select_tests(
            graph, plan.changed_files, tables, fixed, durations.load(ws.data_dir) if ws.use_cache else None,
            symbols=symbols, evidence=evidence,
            host=_host(options, cannot_run))
        plan.notes += evidence.notes()
        plan.budget_seconds = tables.selection.budget_seconds
        progress(f"selected {len(plan.selected)} test(s): {', '.join(s.path for s in plan.selected) or '-'}")
        if not plan.selected:
            plan.suites.remove("selected")
            plan.notes.append("no further tests selected beyond the fixed suites"
                              + (f" ({len(plan.left_out)} relevant test file(s) cannot run here, see below)"
                                 if plan.left_out else ""))
        if not plan.suites:
            build = BuildResult(status="skipped", kind="none", commit=plan.head,
                                reason="nothing to run: no suite covers this change and no test selected for it "
                                       "can run here")
            return _report(plan, build, [], [], start, base_cached=False)

    progress(f"build head {plan.head[:12]} (environment{', ' if plan.recipes else ''}{', '.join(plan.recipes)}) ...")
    head_build = build_commit(ws, tables, plan.head, plan.changed_files, plan.recipes, classify, progress,
                              toolchains, choice=choices[plan.head])
    if head_build.status != "ok" and head_build.kind == "environment":  # head's environment: is the base's any better?
        progress("head's environment could not be made; making the merge base's to compare ...")
        base_env = build_commit(ws, tables, plan.merge_base, [], [], classify, progress, toolchains,
                                choice=choices[plan.merge_base])
        if base_env.status != "ok":
            return _environment_failed(plan, base_env, "merge base", start)
        if head_build.status == "environment":
            return _environment_failed(plan, head_build, "head", start)
    if head_build.status == "failed":
        return _build_failed(ws, tables, plan, head_build, classify, progress, start, toolchains,
                             choices[plan.merge_base])

    def record_durations(results, seconds, whole):
        if ws.use_cache:
            durations.record(ws.data_dir, results, whole_files=whole, process_seconds=seconds)

    # 1. head, every planned suite (pytest suites sharing a process)
    head_runs, not_run_results = _head_runs(ws, tables, plan, targets, head_build, options, progress, cannot_run)
    head_results = []
    for target in targets.values():
        runs = [r for r in head_runs if r.target == target.name]
        if runs:
            progress(f"{', '.join(r.suite.name for r in runs)} on {target.name} at head ...")
        for results, seconds, whole in target.run_many(runs):
            record_durations(results, seconds, whole)
            for result in results:
                progress(f"{result.suite} on {target.name} at head: {_counts(result)}")
            head_results += results
    _record_coverage(options, ws, plan.head, head_results, progress)
    head_idx = compare.index(head_results)
    failures = compare.classify_failing(head_idx, classify)
    _note_budget_skips(plan, head_results)

    # 2. merge base, on its own environment (shown healthy first): only head's failures that
    # need it (or the cache answers)
    # its health matters only when a verdict will rest on its outcomes (a head failure to compare,
    # a crashed suite, --full-base); then it is checked once per merge base and cached
    needs_base = options.full_base or bool(base.needed(failures)) or any(r.status == "crashed" for r in head_results)
    progress(f"build merge base {plan.merge_base[:12]} (environment) ...")
    base_build = build_commit(ws, tables, plan.merge_base, [], plan.recipes, classify, progress,  # native: cached per key
                              toolchains, choice=choices[plan.merge_base], check_health=needs_base)
    broken = base_broken(base_build)
    if broken:
        progress(broken)
        plan.notes.append(f"{broken}. No failure of this run is called new or pre-existing: they are "
                          "reported as environment failures.")
        base_results, base_runs, complete = [], [], set()
    else:
        base_results, base_runs, complete = base.base_outcomes(
            ws, targets, plan, head_runs, head_results, failures, base_build,
            full_base=options.full_base, progress=progress, record_durations=record_durations)
    base_idx = compare.index(base_results)

    # 3. retry what would be new; verdicts; suspects
    # tests that fail at both sides, read at the merge base too: the same root is pre-existing,
    # another one is not (the change's error at head, a backend the runtime lacks at the base)
    base_failures = compare.classify_failing({k: t for k, t in base_idx.items() if k in failures}, classify)
    candidates = [] if broken else compare.retry_candidates(base_idx, head_idx, failures, base_failures)
    retried = _retry(ws, tables, targets, head_build, candidates, options, progress)
    # 3b. without the change (LUCI's "retry without patch"): a test still failing at head that
    # passed at the merge base runs there again; failing there too, it is not the change's
    again = _retry(ws, tables, targets, base_build,
                   [k for k in candidates if retried.get(k) is not None and retried[k].outcome != "passed"
                    and k in base_idx and base_idx[k].outcome == "passed"],
                   options, progress, side="the merge base", settled=lambda t: t.outcome in compare.FAILED)
    intermittent = {k: t for k, t in again.items() if t.outcome in compare.FAILED}
    if intermittent:
        base_idx.update(intermittent)
        base_failures.update(compare.classify_failing(intermittent, classify))
        plan.notes.append(f"{len(intermittent)} test(s) that passed at the merge base failed there when run again "
                          f"(intermittent at the merge base, judged by that failure): "
                          + ", ".join(k[2] for k in list(intermittent)[:5]))
    verdicts = compare.decide(base_idx, head_idx, failures, retried, complete, base_broken=broken,
                              base_failures=base_failures)
    if ws.use_cache and not broken:  # a broken merge base makes every verdict environment: nothing to learn
        pytest_suites = frozenset(s for s in plan.suites if tables.suites[s].kind in ("pytest", "selected"))
        learnt = unrunnable.learn(ws.data_dir, lessons_key, head_results, verdicts, plan.merge_base,
                                  pytest_suites=pytest_suites)
        if learnt:
            progress(f"learnt: {len(learnt)} test(s) cannot run on these compiled parts "
                     f"({', '.join(sorted(learnt))}); later runs leave them out")
    regions = suspects.changed_regions(ws.repo, plan.merge_base, plan.head, plan.changed_files)
    for verdict in verdicts:
        key = (verdict.suite, verdict.target, verdict.test)
        if verdict.verdict == "new":
            verdict.suspects = suspects.rank(regions, verdict.failure, head_idx[key].text,
                                             verdict.category, tables)
        verdict.reproduce = reproduce_command(tables.suites[verdict.suite], verdict.test)
    partial = [f"{b.suite} on {b.target}" for b in base_runs if not b.complete]
    if partial:
        plan.notes.append("`fixed` is only computed for suites with full merge-base results; at the merge "
                          f"base only head's failures ran for: {', '.join(partial)}")
    cached = any("cache" in b.source for b in base_runs) and not any(b.ran for b in base_runs)
    report = _report(plan, head_build, verdicts, head_results + not_run_results, start, cached)
    report.base_runs = base_runs
    report.base_environment = base_build.environment
    return report


def base_broken(base_build: BuildResult) -> str:
    """Why the merge base cannot give outcomes ("" when it can): its environment could not be
    made, or was made and is not healthy. A failure is then never `new` and never
    `pre_existing`."""
    env = base_build.environment
    if base_build.status in ("environment", "failed"):
        return f"could not build the merge base {base_build.commit[:12]}: {base_build.reason}"
    if env is not None and env.healthy is False:
        return f"could not build the merge base {base_build.commit[:12]}: its environment is not healthy ({env.health})"
    return ""


def _nothing_ran(plan, build: BuildResult, start, reason: str, *, rule: str, title: str, explanation: str,
                 test: str, target: str) -> Report:
    """Nothing of the change ran: one environment verdict (neutral) says why, every planned
    suite run is `not_run` with that reason, and a note says so."""
    failure = Failure(line=reason, line_no=0, category="import_or_env", environment=True, rule=rule,
                      title=title, explanation=explanation)
    verdict = Verdict(suite="environment", test=test, target=target, base="-", head="not_run",
                      verdict="environment", failure=failure)
    results = [SuiteResult(suite=name, target=t, commit=plan.head, status="not_run", reason=reason)
               for name in plan.suites for t in plan.targets]
    if not any(reason in note for note in plan.notes):
        plan.notes.append(f"Nothing of this change was run: {reason}.")
    return _report(plan, build, [verdict], results, start, base_cached=False)


def _environment_failed(plan, build: BuildResult, side: str, start) -> Report:
    """The head's environment could not be made: nothing of the change ran, and the one verdict
    says why, naming the environment (never the change)."""
    reason = (f"could not build the merge base {build.commit[:12]}: {build.reason}" if side == "merge base"
              else f"could not make the head's environment: {build.reason}")
    return _nothing_ran(plan, build, start, reason, rule="environment",
                        title="The commit's environment could not be made",
                        explanation="Each side runs on its own commit's Python tree, compiled parts and torch; "
                                    "this one could not be made on this worker.",
                        test=f"{side} {build.commit[:12]}", target="build")


def _refused(plan, reason: str, start) -> Report:
    """A tree with a path that cannot be a file name (`..`, absolute, `.git`, a control
    character): nothing of it is written or run, and the one verdict says why. It is the
    `environment` verdict (neutral, nothing ran), never a test's failure; the report gives it
    its own headline and section (tasks/pipeline/report.py)."""
    plan.refused = reason
    build = BuildResult(status="skipped", kind="none", commit=plan.head, reason=reason)
    return _nothing_ran(plan, build, start, reason, rule="refused",
                        title="The change was refused: its tree holds a path that cannot be a file name",
                        explanation="Paths from a change are data: etriage writes none that has an empty, `.`, "
                                    "`..` or `.git` component, a leading `/`, or a control character in it.",
                        test=f"head {plan.head[:12]}", target="plan")


def _toolchains(plan, tables: Tables, targets: dict) -> tuple[str, ...]:
    """host, plus what device targets running the change's rebuilt runner need (aarch64 for an
    emulated arm64 device). Such a target needs a runner even without a native change: the
    portable recipe is then planned (its build is the compiler cache's)."""
    extra = sorted({t for target in targets.values() for t in getattr(target, "toolchains", list)()} - {"host"})
    needs_runner = [n for n, target in targets.items() if getattr(target, "toolchains", list)()]
    if needs_runner and "portable" in tables.recipes and not any(
            tables.recipes[r].kind == "cmake" for r in plan.recipes):
        plan.recipes.append("portable")
        plan.notes.append(f"no native change: the portable runner is built for {', '.join(needs_runner)} "
                          "(its devices run the change's rebuilt executor_runner)")
    return ("host", *extra)


def _with_budget(tables: Tables, options: TriageOptions) -> Tables:
    """The tables with the repository's budget, or with none for `select_all` (bounded by the
    suite timeout, the only limit left)."""
    budget = options.suite_timeout * 0.8 if options.select_all else options.budget_seconds
    if budget is None:
        return tables
    selection = replace(tables.selection, budget_seconds=float(budget),
                        max_files=10**6 if options.select_all else tables.selection.max_files)
    return replace(tables, selection=selection)


def _coverage_store(options: TriageOptions, ws: Workspace):
    """The store of the coverage map, or None when the map is off (or caches are)."""
    if not options.coverage or not ws.use_cache:
        return None
    if options.coverage_store is None:
        from sqlalchemy.exc import SQLAlchemyError  # deferred: SQLAlchemy and Alembic load here

        from bot.store import Store, default_database_url  # deferred: as above, only when the map is on

        try:
            options.coverage_store = Store(default_database_url(ws.data_dir))
        except SQLAlchemyError as error:  # an unreadable database costs the map, never the triage
            log.warning("coverage map off for this run: %s", str(error).splitlines()[0][:200])
            options.coverage = False
            return None
    return options.coverage_store


def _record_coverage(options: TriageOptions, ws: Workspace, commit: str, results, progress) -> None:
    """The lines each test of the selected run executed, keyed by head's blobs: the rows of the
    files the change left alone are the merge base's too."""
    store = _coverage_store(options, ws)
    records = {r.record_path for r in results if r.record_path and r.suite == "selected"}
    if store is None or not records:
        return
    tree = gitio.ls_tree(ws.repo, commit)
    rows = [row for path in sorted(records) for row in coverage_map.rows(coverage_map.read_record(Path(path)),
                                                                          tree, commit)]
    store.record_coverage(rows)
    progress(f"coverage map: {len(rows)} (file, test) row(s) recorded from the selected tests at head")


def _host(options: TriageOptions, cannot_run: dict[str, str]) -> select.Host:
    """What the suites' interpreter offers. Another interpreter than this one is not asked
    (that would run it once more per triage): its tests find out at collection. `cannot_run`:
    the tests (node ids or files) earlier runs on the same compiled parts could not run (unrunnable.py)."""
    qnn_sdk = bool(options.tool_env.get("QNN_SDK_ROOT"))
    if Path(options.python).absolute() == Path(sys.executable).absolute():
        return select.Host(qnn_sdk=qnn_sdk, cannot_run=cannot_run)
    return select.Host(qnn_sdk=qnn_sdk, has_module=lambda name: True, cannot_run=cannot_run)


def _head_runs(ws, tables, plan, targets, head_build, options, progress, cannot_run=None):
    """The head's SuiteRuns for every planned suite and target, and the not-run results.
    `cannot_run`: what this worker learnt it cannot run (unrunnable.py); a fixed pytest suite
    leaves those of its tests out, saying so in the plan's notes."""
    runs, not_run_results = [], []
    touched = tuple(p for f in plan.changed_files for p in filter(None, (f.path, f.old_path)))
    for suite_name in plan.suites:
        suite = tables.suites[suite_name]
        runnable = [t for t in targets.values() if suite.kind in t.spec.suite_kinds
                    and (suite.kind == "selected"  # decided per test, whatever the backend
                         or set(suite.backends) & set(t.spec.backends) & set(plan.backends))]
        if not runnable:
            probe = SuiteRun(suite, head_build, "-", ws.run_dir, sandbox=ws.sandbox)
            not_run_results.append(not_run(probe, f"no requested target runs {suite.kind} suites "
                                                  f"for {', '.join(suite.backends)}"))
            continue
        lacking = lacking_compiled(suite, head_build)
        if lacking:
            for target in runnable:
                not_run_results.append(not_run(SuiteRun(suite, head_build, target.name, ws.run_dir,
                                                        sandbox=ws.sandbox), lacking))
            progress(f"{suite.name}: not run ({lacking})")
            continue
        selected = suite.kind == "selected"
        paths = tuple(s.path for s in plan.selected) if selected else ()
        if suite.kind == "cxx":  # the C++ tests of the directories the change touched
            paths = touched
        safety = tables.selection.budget_seconds * tables.selection.wall_limit_factor
        left = unrunnable.leave_out(cannot_run or {}, suite.paths, set(touched)) if suite.kind == "pytest" else {}
        if left:
            first = min(left)
            plan.notes.append(f"{suite.name}: {len(left)} test(s) not run on this worker, which learnt it cannot "
                              f"run them (`{first}`{' and others' if len(left) > 1 else ''}: {left[first]})")
        for target in runnable:
            run = SuiteRun(suite, head_build, target.name, ws.run_dir, options.python, paths,
                           timeout=options.suite_timeout,
                           budget_seconds=safety if selected else None,
                           budget_paths=tuple(dict.fromkeys(p.split("::", 1)[0] for p in paths)),
                           order=paths if selected else (), coverage=selected and options.coverage,
                           sandbox=ws.sandbox, leave_out=tuple(sorted(left)))
            ok, reason = target.available()
            if not ok:
                not_run_results.append(not_run(run, reason))
                progress(f"{suite.name} on {target.name}: not run ({reason})")
            else:
                runs.append(run)
    return runs, not_run_results


def lacking_compiled(suite, build) -> str:
    """Why `suite` cannot run on this environment's compiled parts, or "": one of its
    `needs_compiled` globs names no file in the package (compiled parts built from a commit's
    sources have no QNN adaptors: they need the QNN SDK's headers)."""
    if not suite.needs_compiled or not build.package_dir or not Path(build.package_dir).is_dir():
        return ""
    package = Path(build.package_dir)
    missing = [g for g in suite.needs_compiled if not any(package.glob(g))]
    if not missing:
        return ""
    env = build.environment
    source = {"built": "built from the commit's sources", "wheel": "the installed wheel's",
              "registry": "a registry wheel's"}.get(env.compiled if env else "", "")
    return (f"the environment's compiled parts{f' ({source})' if source else ''} have no "
            f"{', '.join(missing)}")


def _note_budget_skips(plan, head_results) -> None:
    """Selected tests the wall-clock safety net skipped are reported as left out, as such."""
    skipped: dict[str, int] = {}
    for result in head_results:
        for test in result.tests:
            if test.outcome == "skipped" and BUDGET_REASON in test.message:
                path = test.test.split("::", 1)[0]
                skipped[path] = skipped.get(path, 0) + 1
    origin = {s.path.split("::", 1)[0]: s.module for s in plan.selected}
    for path, count in skipped.items():
        plan.left_out.append(SelectedTest(path=path, reason=f"left out at run time: {count} test(s) skipped "
                                                            "at the wall-clock safety limit (the worker was "
                                                            "far slower than the learned CPU costs)",
                                          module=origin.get(path, ""), why="run_budget"))


def _retry(ws, tables, targets, build, keys, options, progress, *, side: str = "head",
           settled=lambda t: t.outcome == "passed") -> dict:
    """Re-run `keys` on `build`, up to `retries` times, each until it is `settled`: the tests that
    would be `new`, at head, until they pass; at the merge base, until they fail."""
    retried, pending = {}, list(keys)
    for attempt in range(1, tables.selection.retries + 1):
        groups: dict[tuple[str, str], list[str]] = {}
        for suite, target, test in pending:
            groups.setdefault((suite, target), []).append(test)
        runs: dict[str, list[SuiteRun]] = {}
        for (suite, target), tests in groups.items():
            progress(f"retrying {len(tests)} failed test(s) of {suite} on {target} at {side} (attempt {attempt})")
            runs.setdefault(target, []).append(SuiteRun(
                tables.suites[suite], build, target, ws.run_dir, options.python,
                node_ids=tuple(tests), timeout=options.suite_timeout, attempt=attempt, phase="retry",
                sandbox=ws.sandbox))
        unsettled = []
        for target, target_runs in runs.items():
            for results, _, _ in targets[target].run_many(target_runs):
                for key, test in compare.index(results).items():
                    if key in pending:
                        retried[key] = test
                        if not settled(test):
                            unsettled.append(key)
        pending = unsettled
        if not pending:
            break
    return retried


def _build_failed(ws, tables, plan, head_build, classify, progress, start, toolchains=("host",),
                  choice=None) -> Report:
    """A build that fails at head is the change's unless it fails at the merge base too (or the
    merge base's environment cannot be made: then it is nobody's verdict but the environment's)."""
    progress("head build failed; building the merge base to compare ...")
    base_build = build_commit(ws, tables, plan.merge_base, [], plan.recipes, classify, progress, toolchains,
                              choice=choice)
    failure = compare.primary(head_build.failures) or Failure(  # e.g. an overlay that did not verify
        line=head_build.reason, line_no=0, category="build_failure")
    verdict = compare.judge([failure], failed_at_base=base_build.status == "failed",
                            environment=base_build.status == "environment")
    if base_build.status == "environment":
        plan.notes.append(f"could not build the merge base {plan.merge_base[:12]}: {base_build.reason}")
    regions = suspects.changed_regions(ws.repo, plan.merge_base, plan.head, plan.changed_files)
    text = head_build.log_excerpt
    result = Verdict(suite="build", test=", ".join(plan.recipes), target="build", base=base_build.status,
                     head="failed", verdict=verdict, failure=failure, log_excerpt=text[-3000:],
                     suspects=suspects.rank(regions, failure, text, failure.category, tables),
                     reproduce="; ".join(" ".join(c) for r in plan.recipes for c in tables.recipes[r].commands))
    return _report(plan, head_build, [result], [], start, base_cached=False)


def _no_sandbox(plan, tables, problem: str, start) -> Report:
    reason = f"{NO_SANDBOX}: {problem}"
    build = BuildResult(status="skipped", kind="none", commit=plan.head, reason=reason)
    results = [SuiteResult(suite=name, target=target, commit=plan.head, status="not_run", reason=reason)
               for name in plan.suites for target in plan.targets]
    plan.notes.append(f"Nothing of this change was run: {reason}. etriage never runs a change's code "
                      "outside its sandbox.")
    return _report(plan, build, [], results, start, base_cached=False)


def _counts(result: SuiteResult) -> str:
    if result.status != "ran":
        return f"{result.status} ({result.reason})"
    outcomes = [t.outcome for t in result.tests]
    return ", ".join(f"{outcomes.count(o)} {o}" for o in ("passed", "failed", "error", "skipped") if outcomes.count(o))


def _report(plan, build, verdicts, suite_results, start, base_cached) -> Report:
    summary = {v: n for v, n in compare.tally(verdicts).items() if v in VERDICTS}
    summary["not_run"] = sum(s.status == "not_run" for s in suite_results)
    return Report(base=plan.base, head=plan.head, merge_base=plan.merge_base, plan=plan, build=build,
                  results=verdicts, suites=suite_results, summary=summary,
                  seconds=round(time.monotonic() - start, 1), base_cached=base_cached)
