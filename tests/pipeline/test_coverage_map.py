"""The coverage map (issue 22): recorded per test by the suite plugin, stored per file blob,
selected from; the CPU budget; an uncollectable directory beside the catching test."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bot.store import Store
from tasks.pipeline import coverage_map, durations, select
from tasks.pipeline.sandbox import Sandbox
from tasks.pipeline.suites import PLUGIN_DIR, SuiteRun
from tasks.pipeline.tables import Suite, load_tables
from tasks.pipeline.targets import make_target
from tasks.records import BuildResult, ChangedFile

PACKAGE = "fakepkg"  # not `executorch`: the installed one is imported by pytest plugins at start
OPS = '''def add(a, b):
    if a < 0:
        return 0
    return a + b


def spin(n):
    total = 0
    for i in range(n):
        total += i
    return total
'''
TESTS = '''from fakepkg.core import ops


def test_add():
    assert ops.add(1, 2) == 3


def test_negative():
    assert ops.add(-1, 2) == 0


def test_spin_small():
    assert ops.spin(200_000) > 0


def test_spin_big():
    assert ops.spin(1_500_000) > 0
'''


@pytest.mark.parametrize("lines, text", [
    ([], ""), ([3], "3"), ([3, 4, 5, 7], "3-5,7"), ([9, 1, 2, 2], "1-2,9"), ([10, 12, 13, 14, 20], "10,12-14,20")])
def test_line_ranges_round_trip(lines, text):
    assert coverage_map.to_ranges(lines) == text
    assert coverage_map.from_ranges(text) == set(lines)


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / PACKAGE / "core").mkdir(parents=True)
    (root / PACKAGE / "__init__.py").write_text("")
    (root / PACKAGE / "core" / "__init__.py").write_text("")
    (root / PACKAGE / "core" / "ops.py").write_text(OPS)
    (root / "tests").mkdir()
    (root / "tests" / "test_ops.py").write_text(TESTS)
    (root / "pytest.ini").write_text("[pytest]\naddopts =\n")
    return root


def _pytest(root: Path, config: dict, *files: str) -> dict:
    (root / "cfg.json").write_text(json.dumps({"record": str(root / "record.json"), "package": PACKAGE, **config}))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "etriage_pytest",
                           "-c", str(root / "pytest.ini"), "--rootdir", str(root), "-v", *files],
                          cwd=root, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{root}:{PLUGIN_DIR}",
                               "ETRIAGE_PYTEST_CONFIG": str(root / "cfg.json")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = coverage_map.read_record(root / "record.json")
    record["order"] = [line.split(" ", 1)[0] for line in proc.stdout.splitlines() if " PASSED" in line]
    return record


def test_the_plugin_records_each_tests_lines_and_cpu_and_runs_them_by_rank(tmp_path):
    root = _tree(tmp_path)
    ranked = ["tests/test_ops.py::test_negative", "tests/test_ops.py::test_spin_small"]
    record = _pytest(root, {"coverage": True, "order": ranked}, "tests/test_ops.py")
    assert record["coverage"] == ""
    # ranked tests first, in rank order; the rest in file order
    assert record["order"] == ranked + ["tests/test_ops.py::test_add", "tests/test_ops.py::test_spin_big"]
    lines = record["lines"]
    assert lines["tests/test_ops.py::test_add"] == {"core/ops.py": [2, 4]}
    assert lines["tests/test_ops.py::test_negative"] == {"core/ops.py": [2, 3]}
    assert lines["tests/test_ops.py::test_spin_big"] == {"core/ops.py": [8, 9, 10, 11]}
    assert record["cpu"]["tests/test_ops.py::test_spin_big"] > record["cpu"]["tests/test_ops.py::test_add"]


def test_rows_are_keyed_by_blob_and_an_unchanged_file_keeps_them(tmp_path, gitkit):
    """Looked up by the merge base's blob: the same file at another commit finds the same rows."""
    root = _tree(tmp_path)
    record = _pytest(root, {"coverage": True}, "tests/test_ops.py")
    repo = gitkit.init_repo(tmp_path / "repo")
    (repo / "core").mkdir()
    (repo / "core" / "ops.py").write_text(OPS)
    first = gitkit.commit_all(repo, "one")
    (repo / "README").write_text("x\n")
    second = gitkit.commit_all(repo, "two: another file only")
    store = Store(f"sqlite:///{tmp_path / 'map.db'}")
    from tasks.pipeline import gitio

    store.record_coverage(coverage_map.rows(record, gitio.ls_tree(repo, first), first))
    blob = gitio.ls_tree(repo, second)["core/ops.py"]
    assert store.coverage_of("core/ops.py", blob)["tests/test_ops.py::test_negative"] == "2-3"
    # a change to line 3 (the negative branch): only test_negative executes it
    (repo / "core" / "ops.py").write_text(OPS.replace("return 0", "return -1"))
    head = gitkit.commit_all(repo, "head")
    found = coverage_map.evidence(store, repo, second, head, [ChangedFile("core/ops.py", "M")])
    assert {t: h.lines for t, h in found.hits.items()} == {"tests/test_ops.py::test_negative": 1,
                                                           "tests/test_ops.py::test_add": 0}
    assert found.hits["tests/test_ops.py::test_add"].functions == 1  # same function, not the line
    assert found.uncovered == {}
    # a change inside a function no test runs: said so, with its lines
    (repo / "core" / "ops.py").write_text(OPS + "\n\ndef unused(x):\n    y = x + 1\n    return y\n")
    head2 = gitkit.commit_all(repo, "add unused")
    (repo / "core" / "ops.py").write_text(OPS + "\n\ndef unused(x):\n    y = x + 2\n    return y * 2\n")
    head3 = gitkit.commit_all(repo, "change unused")
    store.record_coverage(coverage_map.rows(record, gitio.ls_tree(repo, head2), head2))
    found = coverage_map.evidence(store, repo, head2, head3, [ChangedFile("core/ops.py", "M")])
    assert found.hits == {} and found.uncovered == {"core/ops.py": [(15, 16)]}
    assert found.notes() == ["no test executes `core/ops.py:15-16` among the tests that ran at the "
                             "merge base's version of it"]
