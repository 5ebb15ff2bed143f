"""The coverage map of the merge base: which test executes which lines (issue 22).

Recorded with coverage.py, one dynamic context per test (the suite run's pytest plugin,
etriage_pytest.py, switches the context to the node id around each test's setup, call and
teardown; lines run while a file is collected or imported belong to no test). Rows are keyed
by the source file's blob id (bot/coverage_tables.py), so a file unchanged from one trunk
commit to the next keeps them, and a pull request's changed file is looked up by its
merge-base blob: the line numbers are exactly that version's.

Filled two ways: every selected-tests run of a triage records its tests' lines at head (the
rows of the files it did not change are the merge base's too, blob for blob); and
`build_map` (the `build` queue's `coverage_map` task, `etriage coverage-map`) measures a trunk
commit test file by test file, cheapest first, resumable: a file already done for that commit
is skipped, and one whose blob and covered sources' blobs are unchanged since a commit where
it was done is carried over without running.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path

from tasks.pipeline import gitio
from tasks.records import ChangedFile


def to_ranges(lines) -> str:
    """[3, 4, 5, 7] -> "3-5,7"."""
    out, start, prev = [], None, None
    for n in sorted(set(lines)):
        if start is None:
            start = prev = n
        elif n == prev + 1:
            prev = n
        else:
            out.append(f"{start}-{prev}" if prev > start else str(start))
            start = prev = n
    if start is not None:
        out.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(out)


def from_ranges(text: str) -> set[int]:
    lines = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        lines.update(range(int(first), int(last or first) + 1))
    return lines


def read_record(path: Path) -> dict:
    """The plugin's record ({"cpu", "lines", "coverage"}), or an empty one."""
    try:
        data = json.loads(Path(path).read_text())
    except (FileNotFoundError, ValueError):
        return {"cpu": {}, "lines": {}, "coverage": "no record written (the run crashed?)"}
    return data if isinstance(data, dict) else {"cpu": {}, "lines": {}, "coverage": "unreadable record"}


def rows(record: dict, tree: dict[str, str], commit: str) -> list[dict]:
    """coverage_lines rows of one record, for the sources whose blob `tree` (ls_tree) knows."""
    out = []
    for test, by_file in record.get("lines", {}).items():
        test_blob = tree.get(test.split("::", 1)[0])
        for path, lines in by_file.items():
            if path in tree and lines:
                out.append(dict(source_path=path, source_blob=tree[path], test=test, lines=to_ranges(lines),
                                test_blob=test_blob, commit=commit))
    return out


def changed_base_lines(repo, merge_base: str, head: str) -> dict[str, set[int]]:
    """merge-base path -> the merge-base lines the change touches: modified and deleted lines,
    and for a pure insertion the lines either side of it."""
    out = gitio.git(repo, "diff", "-U0", "-M", "--no-color", merge_base, head)
    found: dict[str, set[int]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("--- "):
            source = line[4:]
            current = None if source == "/dev/null" else source[2:] if source.startswith("a/") else source
        elif line.startswith("@@") and current is not None:
            old = line.split("-", 1)[1].split(" ", 1)[0]
            start, _, count = old.partition(",")
            first, n = int(start), int(count) if count else 1
            lines = set(range(first, first + n)) if n else {first, first + 1}
            found.setdefault(current, set()).update(l for l in lines if l > 0)
    return found


def _body_statements(source: bytes) -> tuple[list[tuple[int, int]], set[int]]:
    """(spans of the functions, first lines of statements inside function bodies): the lines a
    test can execute (module-level code runs at import, which belongs to no test)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return [], set()
    spans, statements = [], set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            spans.append((node.lineno, node.end_lineno or node.lineno))
            for stmt in node.body:
                statements.update(child.lineno for child in ast.walk(stmt) if isinstance(child, ast.stmt))
    return spans, statements


@dataclass
class Hit:
    test: str
    module: str  # the changed file (head path) it executes
    lines: int = 0  # changed lines it executes
    functions: int = 0  # changed functions it executes some line of (robust to a line the map misses)


@dataclass
class Evidence:
    """What the merge base's map says about a change."""
    hits: dict[str, Hit] = field(default_factory=dict)  # node id -> its hit (the best over files)
    uncovered: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # path -> base ranges
    measured: set[str] = field(default_factory=set)  # changed files the map has rows for
    files_done: int = 0  # test files of the merge base measured (done or carried)
    files_total: int = 0  # ... of those the map's build attempted

    def notes(self) -> list[str]:
        """The comment's line per changed range no test executes."""
        out = []
        scope = (f"in the merge base's coverage map ({self.files_done} test files measured)"
                 if self.files_done else "among the tests that ran at the merge base's version of it")
        for path, spans in sorted(self.uncovered.items()):
            where = ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in spans[:6])
            out.append(f"no test executes `{path}:{where}` {scope}")
        return out


def evidence(store, repo, merge_base: str, head: str, changes: list[ChangedFile]) -> Evidence:
    """Tests whose covered lines (or functions) intersect the change's merge-base lines."""
    found = Evidence()
    if store is None:
        return found
    done = store.coverage_files(merge_base)
    found.files_total = len(done)
    found.files_done = sum(r["status"] in ("done", "carried") for r in done.values())
    tree = gitio.ls_tree(repo, merge_base)
    changed = changed_base_lines(repo, merge_base, head)
    head_path = {c.old_path or c.path: c.path for c in changes}
    for path, lines in changed.items():
        if not path.endswith(".py") or path not in tree:
            continue
        covered_by = store.coverage_of(path, tree[path])
        if not covered_by and not found.files_done:
            continue  # no map of this commit and no run ever measured this version: say nothing
        found.measured.add(path)
        spans, statements = _body_statements(gitio.show(repo, merge_base, path))
        touched = [s for s in spans if any(s[0] <= l <= s[1] for l in lines)]
        innermost = [s for s in touched if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in touched)]
        executed = set()
        for test, text in covered_by.items():
            covered = from_ranges(text)
            executed |= covered
            n_lines = len(lines & covered)
            n_functions = sum(any(a <= l <= b for l in covered) for a, b in innermost)
            if n_lines or n_functions:
                hit = Hit(test, head_path.get(path, path), n_lines, n_functions)
                old = found.hits.get(test)
                if old is None or (old.lines, old.functions) < (hit.lines, hit.functions):
                    found.hits[test] = hit
        missing = sorted((lines & statements) - executed)
        if missing:
            found.uncovered[head_path.get(path, path)] = [
                tuple(map(int, part.split("-"))) if "-" in part else (int(part), int(part))
                for part in to_ranges(missing).split(",")]
    return found
