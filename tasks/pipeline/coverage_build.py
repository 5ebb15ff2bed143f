"""Build the coverage map of one trunk commit, test file by test file, cheapest first, resumable.

    etriage coverage-map --repo DIR --commit SHA [--under exir/emit] [--max-files N]
                         [--batch-seconds 60] [--database-url URL] [--data-dir DIR]

and the `build` queue's `etriage.coverage_map` task (tasks/jobs.py) call `build_map`. Each
test file ends in one coverage_files row for the commit (bot/coverage_tables.py):
  done          it ran with coverage; its tests' lines are in coverage_lines under the blobs
  carried       its blob and the blobs of every source it covered are those of a commit where
                it was done: nothing to run, its rows are already keyed by those blobs
  uncollectable pytest could not collect it (the error is kept); the other files of its batch ran
  needs         it needs what this worker lacks (select.unmet_needs): never run here
A file already with a row for the commit is skipped, so a stopped build resumes where it was.
Files run in batches of about `batch_seconds` of learned cost, in one pytest process each
(one interpreter start per batch), never two files of the same name in one process.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tasks.pipeline import coverage_map, durations, gitio, select
from tasks.pipeline.build import Workspace, build_commit, compiled_choices
from tasks.pipeline.overlay import installed_package_dir
from tasks.pipeline.sandbox import Sandbox
from tasks.pipeline.suites import SuiteRun
from tasks.pipeline.tables import load_tables
from tasks.pipeline.targets import make_target
from triage_rules import classify_text


@dataclass
class MapBuild:
    commit: str
    status: str = "ok"  # ok | environment (the commit's environment could not be made)
    reason: str = ""
    counts: dict[str, int] = field(default_factory=dict)  # coverage_files status -> files, this call
    remaining: int = 0  # test files left for a later call (max_files)
    rows: int = 0  # coverage_lines rows written
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0


def _batches(files: list[str], cost: dict[str, float], seconds: float) -> list[list[str]]:
    out: list[list[str]] = []
    for path in files:
        name = path.rsplit("/", 1)[-1]
        last = out[-1] if out else None
        if last is None or sum(cost[p] for p in last) + cost[path] > seconds \
                or any(p.rsplit("/", 1)[-1] == name for p in last):
            out.append(last := [])
        last.append(path)
    return out


def build_map(repo: Path, commit: str, store, data_dir: Path, *, under: tuple[str, ...] = (),
              max_files: int | None = None, batch_seconds: float = 60, python: str = sys.executable,
              sandbox: Sandbox | None = None, progress=lambda message: None, timeout: float = 1800,
              node_ids: tuple[str, ...] = ()) -> MapBuild:
    """`node_ids`: measure only these tests, as a triage's run does (their rows are written, no
    file is marked done: the file's other tests were not measured)."""
    repo, data_dir = Path(repo).resolve(), Path(data_dir).resolve()
    commit = gitio.resolve(repo, commit)
    result = MapBuild(commit)
    tables = load_tables()
    graph = select.import_graph(repo, commit, data_dir)
    tree = gitio.ls_tree(repo, commit)
    done = store.coverage_files(commit)
    files = sorted(p for p in graph["tests"] if not under or any(p.startswith(u.rstrip("/") + "/") for u in under))
    todo, local, host = [], select.local_names(graph), select.Host()

    def mark(path: str, status: str, **values) -> None:
        store.record_coverage_file(commit, path, test_blob=tree.get(path), status=status, **values)
        result.counts[status] = result.counts.get(status, 0) + 1

    for path in files if not node_ids else ():
        if path in done:
            continue
        carried = next((r for r in store.measured_file(path, tree.get(path, ""))
                        if all(tree.get(src) == blob for src, blob in (r["sources"] or {}).items())), None)
        if carried:
            mark(path, "carried", tests=carried["tests"], cpu_seconds=carried["cpu_seconds"],
                 wall_seconds=0.0, sources=carried["sources"], error="")
            continue
        needs = select.unmet_needs(graph, path, host, local)
        if needs:
            mark(path, "needs", tests=0, error="needs " + ", ".join(needs))
            continue
        todo.append(path)
    learned = durations.load(data_dir)
    cost = {p: durations.estimate(learned, p, graph["tests"].get(p, 1), tables.selection)[0] for p in todo}
    todo.sort(key=lambda p: (cost[p], p))  # cheapest first: most of the map soonest
    if max_files is not None:
        result.remaining = max(len(todo) - max_files, 0)
        todo = todo[:max_files]
    if not todo and not node_ids:
        return result

    (data_dir / "runs").mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="coverage-", dir=data_dir / "runs"))
    sandbox = sandbox or Sandbox()
    try:
        ws = Workspace(repo=repo, python=python, installed=installed_package_dir(python, sandbox, run_dir),
                       run_dir=run_dir, data_dir=data_dir, sandbox=sandbox)
        choice = compiled_choices(ws, [commit], tables)[commit]
        build = build_commit(ws, tables, commit, [], [], classify_text, progress, ("host",), choice=choice)
        if build.status != "ok":
            result.status, result.reason = "environment", build.reason
            return result
        target = make_target(tables.targets["host"], {})
        if node_ids:
            run = SuiteRun(tables.suites["selected"], build, "host", run_dir, python, node_ids=tuple(node_ids),
                           timeout=timeout, coverage=True, phase="coverage", sandbox=sandbox)
            suite_result = target.run(run)
            rows = coverage_map.rows(coverage_map.read_record(Path(suite_result.record_path))
                                     if suite_result.record_path else {}, tree, commit)
            store.record_coverage(rows)
            durations.record(data_dir, [suite_result], whole_files=False)
            result.rows, result.counts = len(rows), {t.outcome: 0 for t in suite_result.tests}
            for test in suite_result.tests:
                result.counts[test.outcome] += 1
            return result
        for n, batch in enumerate(_batches(todo, cost, batch_seconds)):
            progress(f"coverage map {commit[:12]}: batch {n + 1}, {len(batch)} file(s) from {batch[0]}")
            run = SuiteRun(tables.suites["selected"], build, "host", run_dir, python, tuple(batch),
                           timeout=timeout, coverage=True, attempt=n, phase="coverage", sandbox=sandbox)
            started = time.monotonic()
            suite_result = target.run(run)
            wall = time.monotonic() - started
            record = coverage_map.read_record(Path(suite_result.record_path)) if suite_result.record_path else {}
            rows = coverage_map.rows(record, tree, commit)
            store.record_coverage(rows)
            result.rows += len(rows)
            durations.record(data_dir, [suite_result], whole_files=True, process_seconds=wall)
            for path in batch:
                tests = [t for t in suite_result.tests if t.test.split("::", 1)[0] == path]
                cpu = round(sum(t.cpu_seconds or 0.0 for t in tests), 2)
                result.cpu_seconds += cpu
                sources = {row["source_path"]: row["source_blob"] for row in rows
                           if row["test"].split("::", 1)[0] == path}
                errors = [t for t in tests if "::" not in t.test and t.outcome == "error"]
                if errors or not tests:
                    why = errors[0].text[-2000:] if errors else (suite_result.reason or "no test of it ran")
                    mark(path, "uncollectable", tests=0, cpu_seconds=cpu, wall_seconds=0.0, sources={}, error=why)
                else:
                    mark(path, "done", tests=len(tests), cpu_seconds=cpu,
                         wall_seconds=round(sum(t.seconds for t in tests), 2), sources=sources, error="")
            result.wall_seconds += wall
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    result.cpu_seconds = round(result.cpu_seconds, 1)
    result.wall_seconds = round(result.wall_seconds, 1)
    return result


def add_arguments(parser) -> None:
    parser.add_argument("--repo", required=True, type=Path, help="ExecuTorch checkout (git)")
    parser.add_argument("--commit", required=True, help="the trunk commit to measure")
    parser.add_argument("--under", action="append", default=[], metavar="DIR",
                        help="only test files under this directory (repeatable)")
    parser.add_argument("--max-files", type=int, metavar="N", help="stop after N test files (resume later)")
    parser.add_argument("--batch-seconds", type=float, default=60, help="learned cost per pytest process")
    parser.add_argument("--data-dir", type=Path, default=Path.home() / ".cache" / "etriage")
    parser.add_argument("--database-url", help="the store (default: SQLite in --data-dir)")
    parser.add_argument("--no-sandbox", action="store_true", help="development only: run tests bare")
    parser.add_argument("--quiet", action="store_true")


def run(args) -> int:
    from bot.store import Store, default_database_url  # deferred: the store's stack is this command's only

    store = Store(args.database_url or default_database_url(args.data_dir))
    say = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr))
    try:
        built = build_map(args.repo, args.commit, store, args.data_dir, under=tuple(args.under),
                          max_files=args.max_files, batch_seconds=args.batch_seconds,
                          sandbox=Sandbox(enabled=not args.no_sandbox), progress=say)
    except gitio.GitError as error:
        print(f"etriage coverage-map: {error}", file=sys.stderr)
        return 2
    size = store.coverage_size()
    print(f"coverage map of {built.commit[:12]}: {built.status}{' (' + built.reason + ')' if built.reason else ''}; "
          + ", ".join(f"{n} {s}" for s, n in sorted(built.counts.items())) + f"; {built.remaining} left; "
          f"{built.rows} rows written ({built.cpu_seconds:.0f} CPU s, {built.wall_seconds:.0f} s); "
          f"map: {size['rows']} rows, {size['tests']} tests, {size['line_chars']} characters of ranges")
    return 0 if built.status == "ok" else 1
