"""Mutation benchmark of the test selection's recall (tasks/pipeline/select.py).

    .venv/bin/python bench/selection.py [--mutants 100] [--seed N] [--modules a.py,b.py]
                                        [--data-dir DIR] [--quick] [--json]

Over a seeded choice of modules of exir/, export/ and backends/*/ (drawn in turn from each
area the tables know, the other backends pooled as one more area):
  1. relevant tests of a module: the fixed pytest suites of the plan for a one-file change
     to it, and every file select_tests returns with no budget (symbols: all its defs). A
     module with more than --cap-files such files is skipped, and counted.
  2. baseline (selection_runs.py): those files run once on the unmutated tree with per-test
     line coverage of exir/, export/ and backends/: per test its outcome, seconds and lines.
     Cached per (tree, file, suite arguments) under --data-dir.
  3. mutants (mutants.py) on lines that a relevant test passing at baseline runs, operators
     taken in turn, seeded. Each is a real commit (SampleRepo.branch) planned by plan_change;
     its selection is what the bot computes: the plan's fixed suites, then select_tests with
     the default tables, the baseline's durations as the bot records them (durations.record)
     and the changed symbols (suspects.changed_regions); the run-time budget (etriage_pytest
     skips the selected tests' rest once they used budget_seconds) is applied with the
     baseline's seconds.
  4. kill check, on an overlay of the installed package with the mutated file swapped in
     (overlay.build_overlay), with only the tests whose coverage holds a mutated line.
     Phase 1: those the selection runs, fixed suites first, up to the first failure. Phase 2,
     only when phase 1 kills nothing: every other one, all of them -- or, when they took over
     --cap-check-seconds at baseline, fastest first up to the first failure for that long at
     most (a mutant still undecided then is counted apart; the output bounds recall with it).
     A killer passed at baseline and now fails, errors, crashes or hangs. A mutant phase 1
     kills is killable and killed by the selection; else phase 2 finds whether it is killable.
  5. time: the selection's estimated seconds (one process start-up per suite arguments, its
     files' collection, its tests' baseline seconds) against every relevant test's.
Module and mutant choice are seeded; the selection depends on measured durations, which a
warm --data-dir keeps fixed.
"""
from __future__ import annotations

import argparse
import ast
import itertools
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import mutants as mutation  # noqa: E402
from bench.selection_runs import GIVE_UP, SOURCE_DIRS, Bench, Group, batches, progress_line  # noqa: E402
from tasks.pipeline import overlay, select, suspects  # noqa: E402
from tasks.pipeline.plan import plan_change  # noqa: E402
from tasks.pipeline.tables import Tables  # noqa: E402
from tasks.records import ChangedFile  # noqa: E402

OTHER_BACKENDS = "backends (others)"
QUICK_MODULE = "exir/dialects/edge/dtype/utils.py"  # one function, tests of seconds


@dataclass
class MutantResult:
    module: str
    area: str
    operator: str
    function: str
    line: int
    description: str
    key: str  # Mutant.key
    status: str  # killed | missed | survived | undecided | not_covered | invalid
    killed_by: str = ""  # "fixed" | "selected" (which part of the selection ran the first killer)
    killers: list[str] = field(default_factory=list)
    covering: int = 0  # passing relevant tests that run a mutated line
    covering_seconds: float = 0.0  # ... their seconds at baseline
    # time, as (pytest processes, seconds of collection and tests): the selection's, every relevant test's
    selection_cost: tuple[int, float] = (0, 0.0)
    full_cost: tuple[int, float] = (0, 0.0)
    selected: list[str] = field(default_factory=list)  # what select_tests chose (files or node ids)
    missed_why: list[str] = field(default_factory=list)
    check_seconds: float = 0.0
    # with the coverage map (the baselines' per-test lines stand for the merge base's map)
    map_status: str = ""  # killed | missed ("" when not killable)
    map_selection_cost: tuple[int, float] = (0, 0.0)
    map_selected: list[str] = field(default_factory=list)


@dataclass
class ModuleResult:
    path: str
    area: str
    status: str  # measured | capped | no_tests | no_mutants
    note: str = ""
    relevant_files: int = 0
    candidates: int = 0
    uncovered: int = 0  # mutation points on lines no passing relevant test runs: discarded
    import_only: int = 0  # ... only run while importing: discarded
    mutants: list[MutantResult] = field(default_factory=list)


@dataclass(frozen=True)
class Options:
    data_dir: Path
    seed: int = 20261201
    target: int = 100  # killable mutants
    per_module: int = 10  # killable mutants at most per module
    tries_per_module: int = 20  # mutants checked at most per module
    cap_files: int = 80  # relevant test files of a module (fixed suites apart)
    # Phase 2 over this many baseline seconds runs fastest first up to the first killer, for
    # this long at most: a mutant it cannot decide is `undecided` (neither killable nor not).
    cap_check_seconds: float = 120
    dry_limit: int = 5  # an area whose first 5 modules (capped ones apart) gave no killable mutant is dropped
    max_minutes: float = 55  # no new module after this
    modules: tuple[str, ...] = ()


# -- modules ------------------------------------------------------------------------------

def area_of(path: str) -> str:
    return "/".join(path.split("/")[:2]) if path.startswith("backends/") else path.split("/")[0]


def buckets(tables: Tables, graph: dict) -> dict[str, list[str]]:
    """Candidate modules by area: the source directories the tables' areas name (exir/*,
    backends/transforms/*, backends/<b> for from_path areas), then the other backends pooled.
    Not test code, not __init__.py."""
    named = []
    for area in tables.areas:
        if area.docs or not area.backends:
            continue
        for pattern in area.patterns:
            root = pattern.removesuffix("/*")
            if root == "backends" and area.backends == "from_path":
                named += [f"backends/{b}" for b in tables.backends]
            elif root.split("/")[0] in SOURCE_DIRS and "*" not in root and root != "backends":
                named.append(root)
    found: dict[str, list[str]] = {name: [] for name in dict.fromkeys(named)}
    found[OTHER_BACKENDS] = []
    for path in sorted(graph["paths"].values()):
        if not eligible(path):
            continue
        area = area_of(path)
        if area in found:
            found[area].append(path)
        elif area.startswith("backends/"):
            found[OTHER_BACKENDS].append(path)
    return {name: paths for name, paths in found.items() if paths}


def eligible(path: str) -> bool:
    parts = path.split("/")
    inner = parts[2:-1] if parts[0] == "backends" else parts[1:-1]
    return (parts[0] in SOURCE_DIRS and path.endswith(".py") and len(parts) > (2 if parts[0] == "backends" else 1)
            and not select.is_test_file(path) and parts[-1] not in ("__init__.py", "conftest.py")
            and not {"test", "tests"} & set(inner))


def module_symbols(source: str) -> set[str]:
    """Qualified names of every def and class: a module's change could touch any of them."""
    found = set()

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.add(prefix + child.name)
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def module_order(pools: dict[str, list[str]], seed: int) -> list[str]:
    """Round-robin over the areas, each area's modules in a seeded order."""
    shuffled = []
    for area, paths in pools.items():
        paths = list(paths)
        random.Random(f"{seed}:{area}").shuffle(paths)
        shuffled.append(paths)
    return [p for row in itertools.zip_longest(*shuffled) for p in row if p is not None]


def spread(candidates: list, rng: random.Random) -> list:
    """A seeded order that takes the operators in turn and prefers a function not mutated yet."""
    by_operator: dict[str, list] = {}
    for mutant in candidates:
        by_operator.setdefault(mutant.operator, []).append(mutant)
    for group in by_operator.values():
        rng.shuffle(group)
    operators = sorted(by_operator)
    rng.shuffle(operators)
    order, used = [], set()
    while any(by_operator.values()):
        for operator in operators:
            group = by_operator[operator]
            if not group:
                continue
            pick = next((m for m in group if m.function not in used), group[0])
            group.remove(pick)
            used.add(pick.function)
            order.append(pick)
    return order


# -- one mutant ---------------------------------------------------------------------------

@dataclass
class Change:
    """A commit changing one module, planned and selected for as the bot would."""
    head: str
    fixed: list[tuple[str, Group]]  # (suite, group) of the plan's fixed pytest suites
    relevant: list[str]  # files select_tests returns with no budget
    selected: list  # SelectedTest
    left_out: list
    has_selected_suite: bool


def plan_for(bench: Bench, head: str, learned: dict | None, symbols=None) -> Change:
    plan = plan_change(bench.repo.path, "main", head, bench.tables)
    if symbols is None:
        symbols = {r.symbol: r.path for r in suspects.changed_regions(bench.repo.path, plan.merge_base, plan.head,
                                                                       plan.changed_files)
                   if r.symbol and r.symbol != "<module>"}
    suites = [bench.tables.suites[s] for s in plan.suites]
    fixed = [(s.name, Group(p, tuple(s.args))) for s in suites if s.kind == "pytest" for p in s.paths]
    fixed_paths = {g.path for _, g in fixed}
    every, _ = select.select_tests(bench.graph, plan.changed_files, bench.unbounded, fixed_paths, learned,
                                   symbols=symbols)
    selected, left_out = [], []
    if "selected" in plan.suites:
        selected, left_out = select.select_tests(bench.graph, plan.changed_files, bench.tables, fixed_paths,
                                                 learned, symbols=symbols)
    return Change(head, fixed, list(dict.fromkeys(s.path.split("::", 1)[0] for s in every)), selected, left_out,
                  "selected" in plan.suites)


def selection_tests(bench: Bench, change: Change) -> tuple[list[str], list[str], dict[str, str]]:
    """(tests the selection runs in order, tests the run-time budget cuts, test -> part)."""
    order, part = [], {}
    for _, group in change.fixed:
        for test, _, _ in bench.baselines[group].tests:
            order.append(test)
            part[test] = "fixed"
    spent, cut = 0.0, []
    budget = bench.tables.selection.budget_seconds
    for item in change.selected:
        file, _, rest = item.path.partition("::")
        baseline = bench.baselines.get(Group(file))
        for test, _, seconds in baseline.tests if baseline else []:
            if rest and not (test == item.path or test.startswith(item.path + "[")):
                continue
            if test in part:
                continue
            if spent > budget:  # etriage_pytest skips it at setup: over the time budget
                cut.append(test)
                continue
            order.append(test)
            part[test] = "selected"
            spent += seconds
    return order, cut, part


def map_selection(bench: Bench, head: str, groups: list[Group], mutant: mutation.Mutant, learned: dict,
                  change: Change) -> tuple[list[str], list]:
    """(tests the selection runs with the map, in order; its SelectedTests). The map is the
    baselines' per-test lines (the merge base's coverage, as the coverage map records it): the
    tests that run the mutated line are the evidence, ranked and budgeted by select_tests."""
    from tasks.pipeline import coverage_map

    evidence = coverage_map.Evidence()
    for group in groups:
        for test in bench.baselines[group].lines.get(mutant.path, {}).get(mutant.line, []):
            node = bench.baselines[group].tests[test][0]
            evidence.hits[node] = coverage_map.Hit(node, mutant.path, lines=1)
    plan = plan_change(bench.repo.path, "main", head, bench.tables)
    symbols = {r.symbol: r.path for r in suspects.changed_regions(bench.repo.path, plan.merge_base, plan.head,
                                                                   plan.changed_files)
               if r.symbol and r.symbol != "<module>"}
    fixed_paths = {g.path for _, g in change.fixed}
    selected, _ = select.select_tests(bench.graph, plan.changed_files, bench.tables, fixed_paths, learned,
                                      symbols=symbols, evidence=evidence) if change.has_selected_suite else ([], [])
    order = [t for _, g in change.fixed for t, _, _ in bench.baselines[g].tests]
    for item in selected:  # the budget was spent before the run, in learned seconds: nothing is cut
        file, _, rest = item.path.partition("::")
        baseline = bench.baselines.get(Group(file))
        order += [t for t, _, _ in (baseline.tests if baseline else [])
                  if (not rest or t == item.path or t.startswith(item.path + "[")) and t not in order]
    return order, selected


def cost(bench: Bench, groups: list[Group], tests: set[str]) -> tuple[int, float]:
    """(pytest processes: one per distinct argument list, seconds: each file's collection and
    each test's, from the baseline)."""
    used = [g for g in groups if any(t in tests for t, _, _ in bench.baselines[g].tests)]
    return len({g.args for g in used}), round(
        sum(bench.baselines[g].collect_seconds for g in used)
        + sum(s for g in used for t, _, s in bench.baselines[g].tests if t in tests), 2)


def check_mutant(bench: Bench, module: ModuleResult, mutant: mutation.Mutant, source: str,
                 learned: dict) -> MutantResult:
    start = time.monotonic()
    result = MutantResult(module.path, module.area, mutant.operator, mutant.function, mutant.line,
                          mutant.description, mutant.key, status="invalid")
    mutated = mutant.mutated(source)
    if mutated is None:
        return result

    def write(repo: Path) -> None:
        (repo / mutant.path).write_text(mutated)

    head = bench.repo.branch(f"mutant-{bench.runs}-{mutant.line}", edit=write)
    change = plan_for(bench, head, learned)
    selected_files = [s.path.split("::", 1)[0] for s in change.selected]
    groups = [g for _, g in change.fixed] + [Group(p) for p in dict.fromkeys(change.relevant + selected_files)]
    bench.baseline(groups, fixed={g for _, g in change.fixed})  # there already: within its module's set
    covering = covering_tests(bench, groups, mutant)
    result.covering = len(covering)
    order, cut, part = selection_tests(bench, change)
    result.selected = [item.path for item in change.selected]
    relevant_tests = [t for g in groups for t, _, _ in bench.baselines[g].tests]
    result.selection_cost = cost(bench, groups, set(order))
    result.full_cost = cost(bench, groups, set(relevant_tests))
    if not covering:
        result.status = "not_covered"
        return result
    seconds = {t: s for g in groups for t, _, s in bench.baselines[g].tests}
    result.covering_seconds = round(sum(seconds[t] for t in covering), 1)
    map_order, map_selected = map_selection(bench, head, groups, mutant, learned, change)
    result.map_selected = [item.path for item in map_selected]
    result.map_selection_cost = cost(bench, groups, set(map_order))
    root = bench.work / f"overlay-{bench.runs}"
    overlay.build_overlay(bench.repo.path, head, [ChangedFile(mutant.path, "M")], bench.installed, root, lambda p: True)
    try:
        first = [t for t in order if t in covering]
        killers, _ = run_kill(bench, root, first, groups, maxfail=1) if first else ([], True)
        if killers:
            result.status, result.killers = "killed", killers[:1]
            result.killed_by = part[killers[0]]
            result.map_status = _map_kill(bench, root, groups, map_order, covering, killers, first)
            return result
        rest = [t for t in dict.fromkeys(relevant_tests) if t in covering and t not in set(first)]
        if sum(seconds[t] for t in rest) <= bench.options.cap_check_seconds:
            killers, finished = run_kill(bench, root, rest, groups)
        else:  # fastest first, up to the first killer, for cap_check_seconds at most
            rest.sort(key=lambda t: seconds[t])
            killers, finished = run_kill(bench, root, rest, groups, maxfail=1, in_order=True,
                                         limit=bench.options.cap_check_seconds)
        result.status = "missed" if killers else "survived" if finished else "undecided"
        result.killers = killers
        if killers:
            result.missed_why = why_missed(change, killers, cut)
            result.map_status = _map_kill(bench, root, groups, map_order, covering, killers, first + rest)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        result.check_seconds = round(time.monotonic() - start, 1)
    return result


def _map_kill(bench: Bench, root: Path, groups: list[Group], map_order: list[str], covering: set[str],
              killers: list[str], ran: list[str]) -> str:
    """Whether the selection with the map kills a killable mutant: a known killer is in its
    order, or one of its covering tests not run yet fails now."""
    if set(killers) & set(map_order):
        return "killed"
    untried = [t for t in map_order if t in covering and t not in set(ran)]
    found, _ = run_kill(bench, root, untried, groups, maxfail=1) if untried else ([], True)
    return "killed" if found else "missed"


def covering_tests(bench: Bench, groups: list[Group], mutant: mutation.Mutant) -> set[str]:
    """Tests that passed at baseline and ran at least one of the mutant's lines."""
    found = set()
    for group in groups:
        baseline = bench.baselines[group]
        by_line = baseline.lines.get(mutant.path, {})
        for line in mutant.lines:
            for index in by_line.get(line, ()):
                test, outcome, _ = baseline.tests[index]
                if outcome == "passed":
                    found.add(test)
    return found


def run_kill(bench: Bench, root: Path, tests: list[str], groups: list[Group], maxfail: int = 0,
             in_order: bool = False, limit: float | None = None) -> tuple[list[str], bool]:
    """Run `tests` against the mutant: (the killers among them, whether every test ran).
    With `maxfail`, stop at the first process that finds one; with `limit`, after that many
    seconds of tests (the start-up of each process apart)."""
    seconds = {t: s for g in groups for t, _, s in bench.baselines[g].tests}
    files = list(dict.fromkeys(t.split("::", 1)[0] for t in tests))
    killers, started = [], time.monotonic()
    for batch in batches(files):
        mine = [t for t in tests if t.split("::", 1)[0] in batch]
        timeouts = {t: round(max(30.0, 5 * seconds.get(t, 0.0) + 15), 1) for t in mine}
        left = None if limit is None else limit - (time.monotonic() - started)
        if left is not None and left <= 0:
            return killers, False
        wall = min(240 + sum(timeouts.values()), 3600, *([left + bench.process_overhead() + 30] if left else []))
        events = bench.pytest(root, batch, only=mine, timeouts=timeouts, maxfail=maxfail, in_order=in_order,
                              timeout=wall)
        shutil.rmtree(events["run_dir"], ignore_errors=True)
        crashed = events["end"] is None and events["returncode"] is not None
        hung = events["returncode"] is None and limit is None  # our own limit is no hang
        killers += [t for t in mine if events["tests"].get(t, ("",))[0] == "failed"
                    or t.split("::", 1)[0] in events["collect_errors"]
                    or (t in events["unfinished"] and (crashed or hung))]
        if events["returncode"] is None and limit is not None:
            return killers, False
        if killers and maxfail:
            return killers, False
    return killers, True


def why_missed(change: Change, killers: list[str], cut: list[str]) -> list[str]:
    """For each killer file the selection did not run: select.py's left-out reason."""
    reasons = {}
    left = {item.path.split("::", 1)[0]: item for item in change.left_out}
    for killer in killers:
        file = killer.split("::", 1)[0]
        if file in reasons:
            continue
        if not change.has_selected_suite:
            reasons[file] = f"{file}: the plan has no `selected` suite"
        elif killer in cut:
            reasons[file] = f"{file}: cut at run time (over the time budget)"
        elif file in left:
            item = left[file]
            why = getattr(item, "why", "") or "left out"
            reasons[file] = f"{file}: {why}: {item.reason.rsplit(' -- ', 1)[-1]}"
        elif any(s.path.startswith(file + "::") for s in change.selected):
            reasons[file] = f"{file}: only some of its tests selected (by name), not {killer.split('::', 1)[1]}"
        else:
            reasons[file] = f"{file}: not listed (beyond the left-out list)"
    return list(reasons.values())


# -- one module ---------------------------------------------------------------------------

def evaluate_module(bench: Bench, path: str, quota: int, tries: int) -> ModuleResult:
    opts = bench.options
    result = ModuleResult(path, area_of(path), status="measured")
    source = (bench.repo.path / path).read_text()
    probe = bench.repo.branch(f"probe-{path.replace('/', '-')}",
                              edit=lambda repo: (repo / path).write_text(source + "\n# etriage bench probe\n"))
    change = plan_for(bench, probe, None, symbols=dict.fromkeys(module_symbols(source), path))
    groups = [g for _, g in change.fixed] + [Group(p) for p in change.relevant]
    result.relevant_files = len(change.relevant)
    if not groups:
        result.status, result.note = "no_tests", "no relevant test (no fixed suite, nothing selected)"
        return result
    if result.relevant_files > opts.cap_files:
        result.status = "capped"
        result.note = f"{result.relevant_files} relevant test files (cap: {opts.cap_files})"
        return result
    baselines = bench.baseline(groups, fixed={g for _, g in change.fixed})
    passing = [(b, b.passed()) for b in baselines.values()]
    covered = {line for b, ok in passing for line, idx in b.lines.get(path, {}).items()
               if any(b.tests[i][0] in ok for i in idx)}
    at_import = {line for b in baselines.values() for line in b.import_lines.get(path, ())}
    candidates = mutation.candidates(source, path)
    result.candidates = len(candidates)
    usable = []
    for mutant in candidates:
        if covered & set(mutant.lines):
            usable.append(mutant)
        elif at_import & set(mutant.lines):
            result.import_only += 1
        else:
            result.uncovered += 1
    if not usable:
        result.status = "no_mutants"
        result.note = f"no relevant test passing at baseline runs its functions ({len(candidates)} mutation points)"
        return result
    learned = bench.learned(list(baselines.values()))
    for mutant in spread(usable, random.Random(f"{opts.seed}:{path}")):
        killable = sum(m.status in ("killed", "missed") for m in result.mutants)
        checked = sum(m.status in ("killed", "missed", "survived", "undecided") for m in result.mutants)
        if killable >= quota or checked >= tries or len(result.mutants) >= 4 * tries:
            break
        outcome = check_mutant(bench, result, mutant, source, learned)
        result.mutants.append(outcome)
        bench.progress(f"  {outcome.status:11s} {mutant.description[:90]} ({outcome.check_seconds:.0f}s"
                       f"{', ' + outcome.killed_by if outcome.killed_by else ''})")
    counts = {s: sum(m.status == s for m in result.mutants) for s in ("killed", "missed", "survived")}
    result.note = ", ".join(f"{n} {s}" for s, n in counts.items())
    return result


# -- the benchmark ------------------------------------------------------------------------

def run(options: Options, quick: bool = False, progress=progress_line) -> dict:
    start = time.monotonic()
    bench = Bench(options, progress)
    try:
        pools = buckets(bench.tables, bench.graph)
        if options.modules:
            order = list(options.modules)
            unknown = [m for m in order if m not in bench.graph["paths"].values()]
            if unknown:
                raise SystemExit(f"not a module of the tree: {', '.join(unknown)}")
        else:
            order = module_order(pools, options.seed)
        area_pool = {p: a for a, paths in pools.items() for p in paths}
        modules: list[ModuleResult] = []
        productive, barren, dropped = set(), {}, {}
        stopped = ""
        for path in order:
            killable = sum(m.status in ("killed", "missed") for r in modules for m in r.mutants)
            if killable >= options.target:
                break
            if (time.monotonic() - start) / 60 > options.max_minutes:
                stopped = f"stopped taking modules after {options.max_minutes:.0f} minutes"
                break
            pool = area_pool.get(path, area_of(path))
            if pool in dropped:
                continue
            progress(f"module {path} ({killable}/{options.target} killable so far)")
            result = evaluate_module(bench, path, min(options.per_module, options.target - killable),
                                     options.tries_per_module)
            modules.append(result)
            progress(f"  {result.status}{': ' + result.note if result.note else ''}")
            if result.status == "capped":
                continue
            if any(m.status in ("killed", "missed") for m in result.mutants):
                productive.add(pool)
            elif pool not in productive:
                barren[pool] = barren.get(pool, 0) + 1
                if not options.modules and barren[pool] >= options.dry_limit:
                    dropped[pool] = f"none of its first {options.dry_limit} modules gave a killable mutant"
                    progress(f"  area {pool} dropped: {dropped[pool]}")
        return summarise(bench, modules, options, dropped, stopped, time.monotonic() - start, quick)
    finally:
        bench.close()


def summarise(bench: Bench, modules: list[ModuleResult], options: Options, dropped: dict, stopped: str,
              seconds: float, quick: bool) -> dict:
    mutants = [m for r in modules for m in r.mutants]
    killable = [m for m in mutants if m.status in ("killed", "missed")]
    killed = [m for m in killable if m.status == "killed"]
    overhead = bench.process_overhead()

    def seconds_of(c) -> float:
        return c[0] * overhead + c[1]

    areas: dict[str, dict] = {}
    for r in modules:
        entry = areas.setdefault(r.area, dict.fromkeys(("modules", "capped", "killable", "killed", "by_fixed"), 0))
        entry["modules"] += r.status != "capped"
        entry["capped"] += r.status == "capped"
        for m in r.mutants:
            entry["killable"] += m.status in ("killed", "missed")
            entry["killed"] += m.status == "killed"
            entry["by_fixed"] += m.killed_by == "fixed"
    for entry in areas.values():
        entry["recall"] = _ratio(entry["killed"], entry["killable"])
    worst = []
    for r in modules:
        mine = [m for m in r.mutants if m.status in ("killed", "missed")]
        if any(m.status == "missed" for m in mine):
            hits = sum(m.status == "killed" for m in mine)
            worst.append({"module": r.path, "killable": len(mine), "killed": hits, "recall": _ratio(hits, len(mine)),
                          "selected": sorted({t for m in mine for t in m.selected}),
                          "missed": [{"mutant": m.description, "function": m.function, "killers": m.killers[:5],
                                      "why": m.missed_why} for m in mine if m.status == "missed"]})
    worst.sort(key=lambda w: (w["recall"], -w["killable"], w["module"]))
    sel = sum(seconds_of(m.selection_cost) for m in killable)
    full = sum(seconds_of(m.full_cost) for m in killable)
    ratios = [seconds_of(m.selection_cost) / seconds_of(m.full_cost) for m in killable if m.full_cost[0]]
    return {
        "seed": options.seed, "quick": quick, "target": options.target,
        "killable": len(killable), "killed_by_selection": len(killed),
        "killed_by_fixed_suites": sum(m.killed_by == "fixed" for m in killed),
        "recall": _ratio(len(killed), len(killable)),
        # were every undecided mutant killable and missed:
        "recall_lower_bound": _ratio(len(killed), len(killable) + sum(m.status == "undecided" for m in mutants)),
        "recall_beyond_fixed_suites": _ratio(sum(m.killed_by == "selected" for m in killed),
                                             sum(m.killed_by != "fixed" for m in killable)),
        "time_ratio": round(sel / full, 3) if full else None,
        "with_map": {
            "killed": sum(m.map_status == "killed" for m in killable),
            "recall": _ratio(sum(m.map_status == "killed" for m in killable), len(killable)),
            "time_ratio": round(sum(seconds_of(m.map_selection_cost) for m in killable) / full, 3) if full else None,
            "selection_seconds": round(sum(seconds_of(m.map_selection_cost) for m in killable), 1)},
        "selection_seconds": round(sel, 1), "full_seconds": round(full, 1),
        "median_time_ratio": round(statistics.median(ratios), 3) if ratios else None,
        "budget": {"budget_seconds": bench.tables.selection.budget_seconds,
                   "max_files": bench.tables.selection.max_files},
        "process_overhead_seconds": round(overhead, 1),
        "areas": dict(sorted(areas.items())),
        "worst_modules": worst[:8],
        "modules_with_misses": len(worst),
        "mutants": {s: sum(m.status == s for m in mutants)
                    for s in ("killed", "missed", "survived", "undecided", "not_covered", "invalid")},
        "baseline": {"files": len(bench.baselines),
                     "tests": sum(len(b.tests) for b in bench.baselines.values()),
                     "passed": sum(len(b.passed()) for b in bench.baselines.values()),
                     "abandoned": sum(o == "abandoned" for b in bench.baselines.values() for _, o, _ in b.tests),
                     "files_not_collected": sorted(b.group.path for b in bench.baselines.values()
                                                   if b.error and not b.tests)},
        "discarded_uncovered": sum(r.uncovered for r in modules),
        "discarded_import_only": sum(r.import_only for r in modules),
        "modules": {s: [r.path + (f" ({r.note})" if r.note else "") for r in modules if r.status == s]
                    for s in ("measured", "capped", "no_tests", "no_mutants")},
        "modules_without_killable": [r.path for r in modules if r.status == "measured"
                                     and not any(m.status in ("killed", "missed") for m in r.mutants)],
        "caps": {"cap_files": options.cap_files, "cap_check_seconds": options.cap_check_seconds,
                 "baseline_file_seconds": GIVE_UP["seconds"], "per_module": options.per_module,
                 "tries_per_module": options.tries_per_module},
        "areas_dropped": dropped, "stopped": stopped,
        "code": _code_state(),
        "wall_seconds": round(seconds, 1),
        "details": [asdict(m) for m in mutants],
    }


def _ratio(a: int, b: int):
    return round(a / b, 3) if b else None


def _code_state() -> str:
    """Which select.py measured: the commit, and whether the work tree changes it."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "tasks/pipeline",
                                "triage_rules/tables"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + uncommitted changes to tasks/pipeline or the tables" if dirty else "")


def render(summary: dict) -> str:
    lines = [f"selection recall, mutation benchmark (seed {summary['seed']}{', quick' if summary['quick'] else ''}; "
             f"code {summary['code']})"]
    m, caps = summary["mutants"], summary["caps"]
    if summary["recall"] is None:
        lines.append("no killable mutant found")
    else:
        lines.append(f"recall {summary['recall']:.1%}: {summary['killed_by_selection']} of {summary['killable']} "
                     f"killable mutants killed by the default selection "
                     f"({summary['killed_by_fixed_suites']} by a fixed suite)")
        if summary["recall_beyond_fixed_suites"] is not None:
            lines.append(f"  where no fixed suite kills: {summary['recall_beyond_fixed_suites']:.1%}")
        with_map = summary["with_map"]
        lines.append(f"with the coverage map: recall {with_map['recall']:.1%} ({with_map['killed']} of "
                     f"{summary['killable']}), "
                     f"{with_map['time_ratio'] if with_map['time_ratio'] is not None else '-'} of the relevant "
                     f"tests' time (without the map: {summary['time_ratio']})")
        if m["undecided"]:
            lines.append(f"  {summary['recall_lower_bound']:.1%} were the {m['undecided']} undecided mutants all "
                         "killable and missed")
        lines.append(f"time: selection {summary['selection_seconds']:.0f}s vs every relevant test "
                     f"{summary['full_seconds']:.0f}s over the killable mutants: ratio {summary['time_ratio']:.2f} "
                     f"(median per mutant {summary['median_time_ratio']:.2f}); budget "
                     f"{summary['budget']['budget_seconds']:.0f}s, {summary['budget']['max_files']} files; "
                     f"process start-up {summary['process_overhead_seconds']:.1f}s")
    lines.append(f"  {'area':22s} killable  killed  by fixed  recall  modules (capped)")
    for area, e in summary["areas"].items():
        recall = f"{e['recall']:.0%}" if e["recall"] is not None else "-"
        lines.append(f"  {area:22s} {e['killable']:8d} {e['killed']:7d} {e['by_fixed']:9d} {recall:>7s}  "
                     f"{e['modules']:7d} ({e['capped']})")
    lines.append("worst-covered modules:" if summary["worst_modules"] else "worst-covered modules: none missed")
    for w in summary["worst_modules"]:
        lines.append(f"  {w['module']}: {w['killed']}/{w['killable']} ({w['recall']:.0%}); the selection ran: "
                     f"{', '.join(w['selected']) or 'nothing'}")
        for miss in w["missed"]:
            lines.append(f"    missed {miss['mutant']} in {miss['function']}; killers: {', '.join(miss['killers'])}")
            lines += [f"      why: {why}" for why in miss["why"]]
    lines.append(f"mutants checked: {m['killed']} killed, {m['missed']} missed, {m['survived']} survived every "
                 f"covering relevant test, {m['undecided']} undecided (no killer in {caps['cap_check_seconds']:.0f}s "
                 f"of their covering tests, fastest first), {m['not_covered']} not covered by their own relevant "
                 f"set, {m['invalid']} did not compile; discarded before running: {summary['discarded_uncovered']} "
                 f"on lines no relevant test runs, {summary['discarded_import_only']} run only at import")
    mods = {status: len(paths) for status, paths in summary["modules"].items()}
    with_killable = mods["measured"] - len(summary["modules_without_killable"])
    lines.append(f"modules: {mods['measured']} measured ({with_killable} with killable mutants, "
                 f"{with_killable - summary['modules_with_misses']} of them with none missed), "
                 f"{mods['capped']} capped, {mods['no_tests']} without any relevant test, "
                 f"{mods['no_mutants']} without a covered mutation point")
    base = summary["baseline"]
    lines.append(f"baseline: {base['files']} test files, {base['tests']} tests, {base['passed']} passed; "
                 f"{base['abandoned']} not run (their file's first {GIVE_UP['failures']} tests all failed, or its "
                 f"tests had run for {caps['baseline_file_seconds']}s); {len(base['files_not_collected'])} files "
                 "did not collect")
    lines.append(f"caps: a module's relevant test files <= {caps['cap_files']}; <= {caps['per_module']} killable and "
                 f"<= {caps['tries_per_module']} checked mutants per module")
    for area, why in summary["areas_dropped"].items():
        lines.append(f"area dropped: {area} ({why})")
    if summary["stopped"]:
        lines.append(summary["stopped"])
    lines.append(f"wall time {summary['wall_seconds'] / 60:.1f} min")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=Options.target, help="target number of killable mutants")
    parser.add_argument("--seed", type=int, default=Options.seed)
    parser.add_argument("--modules", default="", help="comma-separated module paths (default: a seeded choice)")
    parser.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "etriage-bench-selection",
                        help="baselines and import graphs are cached here")
    parser.add_argument("--quick", action="store_true", help=f"3 killable mutants of {QUICK_MODULE}")
    parser.add_argument("--per-module", type=int, default=Options.per_module)
    parser.add_argument("--cap-files", type=int, default=Options.cap_files)
    parser.add_argument("--cap-check-seconds", type=float, default=Options.cap_check_seconds)
    parser.add_argument("--max-minutes", type=float, default=Options.max_minutes)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    options = Options(data_dir=args.data_dir, seed=args.seed, target=args.mutants, per_module=args.per_module,
                      cap_files=args.cap_files, cap_check_seconds=args.cap_check_seconds,
                      max_minutes=args.max_minutes,
                      modules=tuple(m.strip() for m in args.modules.split(",") if m.strip()))
    if args.quick:
        options = replace(options, target=3, per_module=3, tries_per_module=6,
                          modules=options.modules or (QUICK_MODULE,))
    summary = run(options, quick=args.quick)
    print(json.dumps(summary, indent=2) if args.json else render(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
