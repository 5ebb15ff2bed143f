"""Test selection over the real ExecuTorch import graph, suspect ranking, and the CLI door."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.pipeline import select, suspects
from tasks.pipeline.tables import load_tables
from tasks.records import ChangedFile
from triage_rules.records import Failure, Frame

ETRIAGE = [sys.executable, "-m", "etriage.cli", "triage"]


def test_selection_follows_imports_and_focus_words_within_budget(et_repo, data_dir):
    graph = select.import_graph(et_repo.path, et_repo.base, data_dir)
    assert Path(data_dir / "import-graph").glob("*.json")
    change = [ChangedFile("exir/passes/insert_write_back_for_buffers_pass.py", "M")]
    tables = load_tables()
    selected, left_out = select.select_tests(graph, change, tables, fixed_paths=set())

    assert 0 < len(selected) <= tables.selection.max_files
    # within the budget, unless the one file that imports the pass is over it alone: it runs anyway
    assert sum(s.estimated_seconds for s in selected) <= tables.selection.budget_seconds or len(selected) == 1
    reasons = {s.path: s.reason for s in selected + left_out}
    # exir/tests/test_passes.py imports the pass directly
    assert "imports executorch.exir.passes.insert_write_back_for_buffers_pass directly" in \
        reasons["exir/tests/test_passes.py"]
    assert all(s.why in ("budget", "files", "needs", "excluded") and " -- " in s.reason for s in left_out)
    assert all(s.module == "exir/passes/insert_write_back_for_buffers_pass.py" for s in selected + left_out)
    # no backend is excluded by path; the QNN backend's tests need an SDK this host lacks
    qnn = [s for s in selected + left_out if s.path.startswith("backends/qualcomm/")]
    assert all(s.why == "needs" and "QNN SDK" in s.reason for s in qnn)


def test_changed_regions_name_the_enclosing_function_and_its_first_changed_line(gitkit, tmp_path):
    repo = gitkit.init_repo(tmp_path / "r")
    src = ("import os\n\nLIMIT = 1\n\n\nclass Lowering:\n    def run(self):\n        a = 1\n"
           "        return a\n\n\ndef helper():\n    return 2\n")
    (repo / "m.py").write_text(src)
    (repo / "notes.txt").write_text("one\ntwo\nthree\n")
    gitkit.commit_all(repo, "base")
    # lines at head: 3 (module level), 9 (in Lowering.run), notes.txt line 2
    (repo / "m.py").write_text(src.replace("LIMIT = 1", "LIMIT = 2").replace("return a", "return -a"))
    (repo / "notes.txt").write_text("one\nTWO\nthree\n")
    head = gitkit.commit_all(repo, "head")
    base = gitkit.git(repo, "rev-parse", "HEAD~1").strip()
    changes = [ChangedFile("m.py", "M"), ChangedFile("notes.txt", "M")]
    regions = suspects.changed_regions(repo, base, head, changes)
    assert sorted((r.path, r.symbol, r.line) for r in regions) == [
        ("m.py", "<module>", 3), ("m.py", "Lowering.run", 9), ("notes.txt", "", 2)]
    ranked = suspects.rank(regions, None, 'File "/x/executorch/m.py", line 9, in run', "other", load_tables())
    assert (ranked[0].symbol, ranked[0].line) == ("Lowering.run", 9)
    assert ranked[0].to_dict()["line"] == 9


REGIONS = [suspects.ChangedRegion("exir/backend/backend_api.py", "_insert_lowered_submodule", 198, 260),
           suspects.ChangedRegion("exir/passes/spec_prop_pass.py", "SpecPropPass.call", 10, 40),
           suspects.ChangedRegion("docs/notes.md", "", 0, 0)]


@pytest.mark.parametrize("text,frames,category,top", [
    # the traceback runs through the changed function
    ('File "/x/site-packages/executorch/exir/backend/backend_api.py", line 230, in _insert_lowered_submodule',
     [], "other", ("exir/backend/backend_api.py", "_insert_lowered_submodule")),
    # engine frames (overlay paths) point into the pass
    ("boom", [Frame("/data/runs/r/overlay-1/executorch/exir/passes/spec_prop_pass.py", 12, "call")],
     "other", ("exir/passes/spec_prop_pass.py", "SpecPropPass.call")),
    # no traceback: the category points at exir/backend
    ("AssertionError: payload mismatch", [], "multi_method_lowering",
     ("exir/backend/backend_api.py", "_insert_lowered_submodule")),
])
def test_suspects_rank_traceback_then_category(text, frames, category, top):
    failure = Failure(line=text, line_no=1, frames=frames, category=category)
    ranked = suspects.rank(REGIONS, failure, text, category, load_tables())
    assert (ranked[0].path, ranked[0].symbol) == top
    assert ranked[0].score > 0 and all(s.path != "docs/notes.md" for s in ranked)


@pytest.mark.parametrize("args,message", [
    (["--repo", "/nonexistent/repo", "--base", "a", "--head", "b"], "no such directory"),
    (["--repo", "{tmp}", "--base", "a", "--head", "b"], "not a git repository"),
    (["--repo", "{repo}", "--base", "main", "--head", "nope"], "unknown revision 'nope'"),
    (["--repo", "{repo}", "--base", "main", "--head", "main", "--suite", "nosuch"], "unknown suite(s): nosuch"),
])
def test_cli_bad_input_is_one_line_and_exit_2(et_repo, tmp_path, args, message):
    args = [a.format(tmp=tmp_path, repo=et_repo.path) for a in args]
    proc = subprocess.run(ETRIAGE + args + ["--data-dir", str(tmp_path / "d")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and message in proc.stderr and "Traceback" not in proc.stderr


def test_cli_docs_only_change_json(et_repo, tmp_path):
    def docs(repo: Path):
        (repo / "docs").mkdir(exist_ok=True)
        (repo / "docs" / "cli.md").write_text("# cli\n")

    head = et_repo.branch("cli-docs", edit=docs)
    out = tmp_path / "report.json"
    proc = subprocess.run(ETRIAGE + ["--repo", str(et_repo.path), "--base", "main", "--head", head,
                                     "--format", "json", "--out", str(out), "--data-dir", str(tmp_path / "d")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert set(report) >= {"base", "head", "merge_base", "plan", "build", "results", "summary"}
    assert report["plan"]["changed_files"][0]["path"] == "docs/cli.md"
    assert report["plan"]["suites"] == [] and report["summary"]["new"] == 0
    assert "etriage triage: plan:" in proc.stderr  # progress on stderr


def test_selection_uses_learned_durations_and_says_what_it_left_out(et_repo, data_dir, tmp_path):
    from tasks.pipeline import durations
    from tasks.records import SuiteResult, TestResult

    graph = select.import_graph(et_repo.path, et_repo.base, data_dir)
    change = [ChangedFile("exir/passes/insert_write_back_for_buffers_pass.py", "M")]
    tables = load_tables()
    first, _ = select.select_tests(graph, change, tables, set(), durations.load(tmp_path))
    heavy = first[0].path
    assert "table estimate" in first[0].reason
    # a run where that file's tests took 500 s: next time it no longer fits the 60 s budget
    slow = SuiteResult("selected", "host", "x", "ran", tests=[
        TestResult("selected", f"{heavy}::test_{i}", "host", "passed", seconds=100.0) for i in range(5)])
    durations.record(tmp_path, [slow], whole_files=True, process_seconds=510.0)
    learned = durations.load(tmp_path)
    assert learned["files"][heavy] == {"seconds": 500.0, "tests": 5} and learned["startup_seconds"] == 10.0
    selected, left_out = select.select_tests(graph, change, tables, set(), learned)
    [heavy_now] = [s for s in selected if s.path == heavy]
    # the learned 500 s are known and said; it is the strongest candidate, so it still runs
    assert heavy_now.estimated_seconds == 506.0 and "learned from earlier runs" in heavy_now.reason
    assert "run anyway" in heavy_now.reason
    # and nothing else fits beside it: each is left out with the reason
    assert len(selected) == 1
    assert left_out and all(s.why for s in left_out)
    assert any(s.why == "budget" and "over the time budget" in s.reason for s in left_out)


@pytest.mark.parametrize("changed, symbols, first", [
    # the test file named after the changed module comes first
    ("exir/lowered_backend_module.py", set(), "exir/backend/test/test_lowered_backend_module.py"),
    # a large file that imports the module runs only its tests named after the change
    ("exir/passes/constant_prop_pass.py", {"constant_prop_pass"}, "exir/tests/test_passes.py::"),
])
def test_relevance_before_cost(et_repo, data_dir, changed, symbols, first):
    graph = select.import_graph(et_repo.path, et_repo.base, data_dir)
    tables = load_tables()
    selected, left_out = select.select_tests(graph, [ChangedFile(changed, "M")], tables, set(), symbols=symbols)
    assert selected and selected[0].path.startswith(first), [s.path for s in selected]
    if first.endswith("::"):
        picked = [s.path for s in selected if s.path.startswith(first)]
        assert picked and all("constant_prop" in p.rsplit("::", 1)[-1] for p in picked)
        assert len(picked) < graph["tests"]["exir/tests/test_passes.py"]
    assert sum(s.estimated_seconds for s in selected) <= tables.selection.budget_seconds


def test_the_first_candidate_runs_even_over_the_budget(et_repo, data_dir):
    graph = select.import_graph(et_repo.path, et_repo.base, data_dir)
    tables = load_tables()
    change = [ChangedFile("exir/passes/insert_write_back_for_buffers_pass.py", "M")]
    learned = {"files": {path: {"seconds": 900.0, "tests": n} for path, n in graph["tests"].items()}, "tests": {}}
    selected, left_out = select.select_tests(graph, change, tables, set(), learned)
    assert selected, "a budget must never leave a change untested"
    assert all(s.why in ("budget", "files", "needs", "excluded") for s in left_out)


def test_node_ids_of_one_file_count_as_one_file_against_max_files(et_repo, data_dir):
    graph = select.import_graph(et_repo.path, et_repo.base, data_dir)
    tables = load_tables()
    change = [ChangedFile("exir/passes/constant_prop_pass.py", "M")]
    selected, _ = select.select_tests(graph, change, tables, set(), symbols={"constant_prop_pass"})
    files = {s.path.split("::", 1)[0] for s in selected}
    assert len(selected) > len(files)  # several node ids of test_passes.py ...
    assert len(files) <= tables.selection.max_files  # ... count once
    assert len(files) > 1 or sum(s.estimated_seconds for s in selected) > tables.selection.budget_seconds / 2


VENDOR_TREE = {
    # importing the package needs the vendor's SDK ...
    "backends/vendor/__init__.py": "import vendor_sdk\n",
    "backends/vendor/ops.py": "import numpy\n",
    # ... so does a test that imports a module inside it (its parent package runs first)
    "backends/vendor/test/test_ops.py": "from executorch.backends.vendor import ops\n\ndef test_a():\n    pass\n",
    # lazy and optional imports are not needs
    "exir/lazy.py": ("try:\n    import vendor_sdk\nexcept ImportError:\n    vendor_sdk = None\n\n"
                     "def f():\n    import other_sdk\n"),
    "exir/tests/test_lazy.py": "from executorch.exir import lazy\n\ndef test_b():\n    pass\n",
    # a conftest above the test counts: pytest imports it first
    "exir/typed/conftest.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import stub_only\nimport qnn_tools\n",
    "exir/typed/test_typed.py": "def test_c():\n    pass\n",
    # the QNN backend without QNN_SDK_ROOT
    "backends/qualcomm/__init__.py": "",
    "backends/qualcomm/tests/test_q.py": "import executorch.backends.qualcomm\n\ndef test_d():\n    pass\n",
    # a sibling helper imported by its bare name is not a missing package
    "exir/tests/test_sibling.py": "import test_lazy\n\ndef test_e():\n    pass\n",
}


@pytest.mark.parametrize("path, needs, with_sdk", [
    ("backends/vendor/test/test_ops.py", ["`vendor_sdk` (not installed)"], ["`vendor_sdk` (not installed)"]),
    ("exir/tests/test_lazy.py", [], []),
    ("exir/typed/test_typed.py", ["`qnn_tools` (not installed)"], ["`qnn_tools` (not installed)"]),
    ("backends/qualcomm/tests/test_q.py", ["the QNN SDK"], []),
    ("exir/tests/test_sibling.py", [], []),
])
def test_a_test_file_needs_what_its_imports_need_not_what_its_path_says(gitkit, tmp_path, path, needs, with_sdk):
    repo = gitkit.init_repo(tmp_path / "r")
    for name, text in VENDOR_TREE.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    head = gitkit.commit_all(repo, "tree")
    graph = select.build_import_graph(repo, head)
    installed = {"numpy", "typing"}.__contains__
    local = select.local_names(graph)
    for host, expected in ((select.Host(qnn_sdk=False, has_module=installed), needs),
                           (select.Host(qnn_sdk=True, has_module=installed), with_sdk)):
        found = select.unmet_needs(graph, path, host, local)
        assert len(found) == len(expected) and all(f.startswith(e) for f, e in zip(found, expected)), found


def test_every_backend_is_decided_per_test(et_repo, data_dir):
    """A change inside a backend without suites of its own plans the selected tests, and each
    of that backend's relevant tests either runs or says what it needs."""
    from tasks.pipeline.plan import plan_change

    def touch_arm(repo: Path):
        target = repo / "backends/arm/_passes/arm_pass_utils.py"
        target.write_text(target.read_text() + "\n# touched\n")

    head = et_repo.branch("arm-pass-utils", edit=touch_arm)
    tables = load_tables()
    plan = plan_change(et_repo.path, "main", head, tables)
    assert plan.suites == ["selected"] and any("arm" in n for n in plan.notes)
    graph = select.import_graph(et_repo.path, head, data_dir)
    selected, left_out = select.select_tests(graph, plan.changed_files, tables, set(),
                                             host=select.Host(has_module=lambda n: n != "tosa_serializer"))
    arm = [s for s in selected + left_out if s.path.startswith("backends/arm/")]
    # only whole-model tests are excluded (too long), never the backend's tests as such
    assert arm and all("/models/" in s.path for s in arm if s.why == "excluded")
    assert any(s.why == "needs" and "`tosa_serializer` (not installed)" in s.reason for s in arm)
    # with the package present the same tests are candidates like any other
    selected2, left_out2 = select.select_tests(graph, plan.changed_files, tables, set(),
                                               host=select.Host(has_module=lambda n: True))
    assert not any(s.why == "needs" for s in selected2 + left_out2 if s.path.startswith("backends/arm/"))
    assert any(s.path.startswith("backends/arm/") for s in selected2)


def test_the_report_lists_what_was_relevant_but_not_run_per_changed_file(et_repo, data_dir):
    from tasks.pipeline.report import _misses
    from tasks.records import Plan

    graph = select.import_graph(et_repo.path, et_repo.base, data_dir)
    change = [ChangedFile("exir/passes/constant_prop_pass.py", "M"), ChangedFile("exir/memory_planning.py", "M")]
    tables = load_tables()
    selected, left_out = select.select_tests(graph, change, tables, set(), symbols={"constant_prop_pass"})
    plan = Plan(base="b", head="h", merge_base="m", changed_files=change, areas=["exir"], backends=[],
                suites=["selected"], targets=["host"], recipes=[], selected=selected, left_out=left_out,
                budget_seconds=tables.selection.budget_seconds)
    text = "\n".join(_misses(plan, "##"))
    assert "## Relevant but not run" in text and "/etriage run selected --all" in text
    for module in {s.module for s in left_out}:
        assert f"- `{module}`: {sum(s.module == module for s in left_out)} test file(s) not run" in text
    assert "over the time budget" in text and "budget 60s" in text
    assert not _misses(Plan(base="b", head="h", merge_base="m", changed_files=change, areas=[], backends=[],
                            suites=[], targets=[], recipes=[]), "##")


def test_a_common_name_elsewhere_in_the_tree_is_only_a_weak_hint(et_repo, data_dir):
    """`backends/xnnpack/partition/xnnpack_partitioner.py` has its own test file beside it;
    `exir/backend/test/test_partitioner.py` shares only the word `partitioner`."""
    graph = select.import_graph(et_repo.path, et_repo.base, data_dir)
    tables = load_tables()
    change = [ChangedFile("backends/xnnpack/partition/xnnpack_partitioner.py", "M"),
              ChangedFile("backends/arm/tosa/partitioner.py", "M")]
    selected, left_out = select.select_tests(graph, change, tables, set())
    order = [s.path.split("::", 1)[0] for s in selected + left_out]
    assert order[0] == "backends/xnnpack/test/test_xnnpack_partitioner.py"
    weak = next(s for s in selected + left_out if s.path == "exir/backend/test/test_partitioner.py")
    assert "named like the changed module partitioner, in another part of the tree" in weak.reason
    assert "named after the changed module partitioner" not in weak.reason


NESTED_IMPORTS = '''\
import executorch.exir.a
class Holder:
    from executorch.exir import b
    def method(self):
        import executorch.exir.c
try:
    from executorch.exir import d
except ImportError:
    from executorch.exir import e
else:
    import executorch.exir.f
finally:
    import executorch.exir.g
with open(__file__):
    if True:
        pass
    else:
        from executorch.exir import h
while False:
    import executorch.exir.i
for _ in ():
    pass
else:
    import executorch.exir.j
match 1:
    case 1:
        import executorch.exir.k
async def waits():
    async with lock():
        import executorch.exir.l
def outer():
    def inner():
        def test_nested():
            import executorch.exir.m
lazy = lambda: __import__("executorch.exir.n")  # an expression: no import statement, not read
'''


def test_the_graph_reads_an_import_in_every_statement_position(gitkit, tmp_path):
    """Imports and `def`s are statements: the graph finds them nested anywhere a statement can
    stand (classes, functions, every branch of `try`, `with`, loops' `else`, `match`), as
    `ast.walk` over the whole tree would, and counts nested test functions as before."""
    repo = gitkit.init_repo(tmp_path / "r")
    (repo / "exir").mkdir()
    for name in "abcdefghijklmn":
        (repo / "exir" / f"{name}.py").write_text("")
    (repo / "exir" / "test_everywhere.py").write_text(NESTED_IMPORTS)
    graph = select.build_import_graph(repo, gitkit.commit_all(repo, "tree"))
    found = graph["imports"]["executorch.exir.test_everywhere"]
    assert found == [f"executorch.exir.{n}" for n in "abcdefghijklm"], found
    assert graph["tests"]["exir/test_everywhere.py"] == 1  # test_nested, however deep
    assert graph["eager"]["executorch.exir.test_everywhere"]["internal"] == [
        "executorch.exir.a", "executorch.exir.b", "executorch.exir.h"]
