"""pytest processes for bench/selection.py: the sample repository and its overlays, baselines
with per-test line coverage (cached), runs against a mutant.

    bench = Bench(options)                 sample repo, tables, import graph, base overlay
    bench.baseline([Group(path), ...])     per test: outcome, seconds, the lines it ran
    bench.pytest(overlay_root, files, only=[node ids], ...) -> the plugin's events

Every process is `python -m pytest` from <overlay>/executorch with bench/selection_pytest.py
and the pipeline's etriage_pytest plugin, run bare (Sandbox(enabled=False): the code is ours,
mutants of the installed package) with torch on one thread (the machine is shared).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from tasks.pipeline import durations, gitio, overlay, select
from tasks.pipeline.sandbox import Sandbox, run_logged, scrubbed_env
from tasks.pipeline.suites import PLUGIN_DIR
from tasks.pipeline.tables import load_tables
from tasks.records import SuiteResult, TestResult
from tasks.sample_repo import build_sample_repo

PLUGIN = Path(__file__).resolve().parent / "selection_pytest.py"
SANDBOX = Sandbox(enabled=False)
SOURCE_DIRS = ("exir", "export", "backends")  # measured for coverage; where modules are drawn from
BASELINE_VERSION = 4  # bump when what a cached baseline holds, or how it is taken, changes
INI = "[pytest]\naddopts =\ntimeout = 300\n"
WARMUP = ["executorch.exir"]  # imported before collection at baseline: start-up, not a file's cost
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# At baseline the rest of a file (a fixed suite's apart) is not run once its first 5 tests all
# failed or its tests ran for 20 s (selection_pytest): an absent backend runtime fails each
# test slowly, and one XNNPACK op file takes minutes (test_linear.py ~27 s a test). Those tests
# are outside the benchmark (for time they count as long as the file's others).
GIVE_UP = {"failures": 5, "seconds": 20}


@dataclass(frozen=True)
class Group:
    """A test file as one suite runs it: a fixed suite's arguments (-m/-k) select its tests."""
    path: str
    args: tuple[str, ...] = ()


@dataclass
class Baseline:
    group: Group
    tests: list[tuple[str, str, float]]  # (node id, outcome, seconds) in run order
    collect_seconds: float
    error: str  # collection error or crash
    lines: dict[str, dict[int, list[int]]]  # source path -> line -> indices of tests that ran it
    import_lines: dict[str, list[int]]  # lines run while importing (collection, warm-up)

    def passed(self) -> set[str]:
        return {t for t, outcome, _ in self.tests if outcome == "passed"}


def progress_line(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Bench:
    """The sample repository, tables, import graph, baselines; runs pytest against overlays.
    `options`: the benchmark's (bench/selection.py), read here for its data_dir."""

    def __init__(self, options, progress=progress_line):
        self.options, self.progress = options, progress
        self.data_dir = Path(options.data_dir).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="selection-bench-", dir=self.data_dir))
        self.installed = overlay.installed_package_dir(sys.executable)
        self.repo = build_sample_repo(self.work / "executorch", self.installed)
        self.tree = gitio.tree_sha(self.repo.path, self.repo.base)
        self.tables = load_tables()
        unbounded = replace(self.tables.selection, budget_seconds=float("inf"), max_files=10**6)
        self.unbounded = replace(self.tables, selection=unbounded)
        self.graph = select.import_graph(self.repo.path, self.repo.base, self.data_dir)
        self.cache = self.data_dir / "selection-bench" / self.tree[:16]
        self.cache.mkdir(parents=True, exist_ok=True)
        (self.work / "plugin").mkdir()
        (self.work / "plugin" / PLUGIN.name).symlink_to(PLUGIN)
        (self.work / "pytest.ini").write_text(INI)
        self.base_overlay = self.work / "overlay-base"
        overlay.build_overlay(self.repo.path, self.repo.base, [], self.installed, self.base_overlay, lambda p: True)
        self.baselines: dict[Group, Baseline] = {}
        self.runs = 0

    def close(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)

    # -- pytest ---------------------------------------------------------------------------

    def pytest(self, overlay_root: Path, files: list[str], *, args=(), only=None, timeouts=None,
               maxfail: int = 0, in_order: bool = False, cover: bool = False, exempt=(),
               timeout: float = 3600) -> dict:
        """One pytest process over `files` from `overlay_root`; the plugin's events, read."""
        self.runs += 1
        run = self.work / f"run-{self.runs}"
        run.mkdir()
        config = {"events": str(run / "events.jsonl"), "only": only, "in_order": in_order,
                  "timeouts": timeouts or {}}
        if cover:
            config["cover"] = {"data_file": str(run / "coverage"),
                               "include": [f"{self.installed}/{d}/*" for d in SOURCE_DIRS],
                               "omit": ["*/test_*.py", "*_test.py", "*/conftest.py"]}
            config["warmup"] = WARMUP
            config["give_up"] = {**GIVE_UP, "exempt": list(exempt)}
        (run / "config.json").write_text(json.dumps(config))
        package = overlay_root / overlay.PACKAGE
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "selection_pytest",
               "-p", "etriage_pytest", "-c", str(self.work / "pytest.ini"), "--rootdir", str(package), "-q",
               "--continue-on-collection-errors", *(["--maxfail", str(maxfail)] if maxfail else []),
               *args, *files]
        env = scrubbed_env(run, sandbox=SANDBOX, pythonpath=[str(overlay_root), str(self.work / "plugin"),
                                                             str(PLUGIN_DIR)],
                           extra={"SELECTION_BENCH_CONFIG": str(run / "config.json"), **ONE_THREAD})
        started = time.time()
        done = run_logged(cmd, cwd=package, env=env, log_path=run / "pytest.log", timeout=timeout, sandbox=SANDBOX)
        events = _read_events(run / "events.jsonl")
        events.update(returncode=done.returncode, wall=done.seconds, started=started, run_dir=run,
                      log_tail=done.tail(3000))
        return events

    # -- baseline -------------------------------------------------------------------------

    def baseline(self, groups: list[Group], fixed: set[Group] = frozenset()) -> dict[Group, Baseline]:
        """The baselines of `groups`, from the cache or run now (files sharing arguments in
        one process, unless their names clash). The `fixed` suites' files run in full."""
        missing = [g for g in groups if g not in self.baselines and not self._load(g)]
        by_args: dict[tuple, list[Group]] = {}
        for group in missing:
            by_args.setdefault(group.args, []).append(group)
        for args, members in by_args.items():
            for batch in batches(members, key=lambda g: g.path):
                self.progress(f"baseline: {len(batch)} file(s){' with ' + ' '.join(args) if args else ''} "
                              f"({', '.join(g.path.rsplit('/', 1)[-1] for g in batch[:4])}"
                              f"{', ...' if len(batch) > 4 else ''})")
                exempt = [g.path for g in batch if g in fixed]
                events = self.pytest(self.base_overlay, [g.path for g in batch], args=args, cover=True, exempt=exempt)
                if events.get("end") is None and len(batch) > 1:  # a crash: one process per file
                    for group in batch:
                        one = self.pytest(self.base_overlay, [group.path], args=args, cover=True, exempt=exempt)
                        self._store_baseline([group], one)
                        shutil.rmtree(one["run_dir"], ignore_errors=True)
                else:
                    self._store_baseline(batch, events)
                shutil.rmtree(events["run_dir"], ignore_errors=True)
        return {g: self.baselines[g] for g in groups}

    def _cache_file(self, group: Group) -> Path:
        key = hashlib.sha1(json.dumps([group.path, group.args]).encode()).hexdigest()[:12]
        return self.cache / "baseline" / f"{group.path.replace('/', '.')}.{key}.json.gz"

    def _load(self, group: Group) -> bool:
        path = self._cache_file(group)
        try:
            data = json.loads(gzip.decompress(path.read_bytes()))
        except (FileNotFoundError, ValueError, OSError):
            return False
        if data.get("version") != BASELINE_VERSION:
            return False
        self.baselines[group] = Baseline(
            group, [tuple(t) for t in data["tests"]], data["collect"], data["error"],
            {src: {int(line): idx for line, idx in lines.items()} for src, lines in data["lines"].items()},
            data["import_lines"])
        return True

    def _store_baseline(self, groups: list[Group], events: dict) -> None:
        contexts = _coverage_by_context(events["run_dir"] / "coverage", self.installed)
        if events.get("end") is not None:
            overhead = events["end"] - events["started"] - sum(events["collect"].values()) \
                - sum(s for _, s in events["tests"].values())
            self._record_overhead(max(overhead, 0.0))
        crashed = events.get("end") is None
        warmup = contexts.pop("warmup", {})
        for group in groups:
            prefix = group.path + "::"
            tests = [(t, outcome, s) for t, (outcome, s) in events["tests"].items() if t.startswith(prefix)]
            tests += [(t, "failed", 0.0) for t in events["unfinished"] if t.startswith(prefix)]
            ran = [s for _, outcome, s in tests if outcome in ("passed", "failed")]
            if ran:  # what the tests not run would have taken: as long as those that ran
                tests = [(t, o, round(statistics.mean(ran), 3) if o == "abandoned" else s) for t, o, s in tests]
            index = {t: i for i, (t, _, _) in enumerate(tests)}
            lines: dict[str, dict[int, list[int]]] = {}
            for context, by_source in contexts.items():
                if context in index:
                    for source, numbers in by_source.items():
                        for line in numbers:
                            lines.setdefault(source, {}).setdefault(line, []).append(index[context])
            imported: dict[str, set[int]] = {}
            for by_source in (warmup, contexts.get(f"collect|{group.path}", {})):
                for source, numbers in by_source.items():
                    imported.setdefault(source, set()).update(numbers)
            error = events["collect_errors"].get(group.path, "")
            if crashed:
                error = (error + f"\nthe baseline process crashed (exit {events['returncode']})").strip()
            baseline = Baseline(group, tests, events["collect"].get(group.path, 0.0), error, lines,
                                {s: sorted(n) for s, n in imported.items()})
            self.baselines[group] = baseline
            path = self._cache_file(group)
            path.parent.mkdir(parents=True, exist_ok=True)
            data = {"version": BASELINE_VERSION, "path": group.path, "args": list(group.args),
                    "tests": baseline.tests, "collect": baseline.collect_seconds, "error": error,
                    "lines": baseline.lines, "import_lines": baseline.import_lines}
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(gzip.compress(json.dumps(data).encode()))
            tmp.replace(path)

    def _record_overhead(self, seconds: float) -> None:
        path = self.cache / "process-overhead.json"
        samples = json.loads(path.read_text()) if path.is_file() else []
        path.write_text(json.dumps(samples + [round(seconds, 2)]))

    def process_overhead(self) -> float:
        """Seconds one pytest process costs beyond its files and tests (interpreter, torch,
        executorch.exir, plugins): the median over the baseline processes."""
        path = self.cache / "process-overhead.json"
        samples = json.loads(path.read_text()) if path.is_file() else []
        return statistics.median(samples) if samples else 8.0

    def learned(self, baselines: list[Baseline]) -> dict:
        """What durations.record keeps after a run of these files (a bot that ran them before)."""
        learned_dir = self.work / f"learned-{self.runs}"
        results = [SuiteResult(suite="baseline", target="host", commit=self.repo.base, status="ran",
                               tests=[TestResult(suite="baseline", test=t, target="host", outcome=o, seconds=s)
                                      for t, o, s in b.tests]) for b in baselines if not b.group.args]
        durations.record(learned_dir, results, whole_files=True)
        data = durations.load(learned_dir)
        shutil.rmtree(learned_dir, ignore_errors=True)
        return data


def batches(items: list, key=lambda path: path) -> list[list]:
    """Split test files so that no two with the same name share a process: pytest's default
    import mode imports a test file outside a package by its base name, and the second
    exir/**/test_passes.py of one process fails to collect ("import file mismatch")."""
    found: list[list] = []
    for item in items:
        name = key(item).rsplit("/", 1)[-1]
        batch = next((b for b in found if all(key(other).rsplit("/", 1)[-1] != name for other in b)), None)
        if batch is None:
            found.append(batch := [])
        batch.append(item)
    return found


def _read_events(path: Path) -> dict:
    events = {"tests": {}, "collect": {}, "collect_errors": {}, "unfinished": [], "end": None, "warmup": 0.0}
    started = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash
        if "start" in event:
            started.append(event["start"])
        elif "test" in event:
            events["tests"][event["test"]] = (event["outcome"], event["seconds"])
        elif "collect" in event:
            events["collect"][event["collect"]] = event["seconds"]
            if event["error"]:
                events["collect_errors"][event["collect"]] = event["error"]
        elif "end" in event:
            events["end"] = event["end"]
        elif "warmup" in event:
            events["warmup"] = event["warmup"]
    events["unfinished"] = [t for t in started if t not in events["tests"]]
    return events


def _coverage_by_context(data_file: Path, installed: Path) -> dict[str, dict[str, list[int]]]:
    """context -> source path (relative to the package) -> lines run in it."""
    from coverage import CoverageData  # only the baseline reads coverage

    if not data_file.is_file():
        return {}
    data = CoverageData(str(data_file))
    data.read()
    found: dict[str, dict[str, list[int]]] = {}
    root = str(installed) + "/"
    for source in data.measured_files():
        if not source.startswith(root):
            continue
        rel = source[len(root):]
        for line, contexts in data.contexts_by_lineno(source).items():
            for context in contexts:
                found.setdefault(context, {}).setdefault(rel, []).append(line)
    return found
