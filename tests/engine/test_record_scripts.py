"""The scripts that make the corpus's generated records (scripts/mutant_records.py,
scripts/reversed_fix_records.py), on a small package and a small git history of their own:
a mutant swapped into a running process, its test failing in a forked pytest, the printed
traceback turned into a record the corpus loader accepts; which commits count as fixes of
which area, undoing one on the installed file, and (--later) applying a fix the release lacks,
its tests standing over the installed ones only for the run, its new helpers defined."""
from __future__ import annotations

import dataclasses
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.engine.record_scripts import load_script
from triage_rules.corpus import load_corpus



mutants = load_script("mutant_records")
reversed_fixes = load_script("reversed_fix_records")

LOWERING = textwrap.dedent('''\
    def partition(nodes):
        tagged = {}
        for index, node in enumerate(nodes):
            if node.startswith("add"):
                tagged[node] = f"tag{index}"
        return tagged


    def delegate_count(nodes):
        return len(set(partition(nodes).values()))
''')
TEST = textwrap.dedent('''\
    from etr_lowering_pkg.lowering import delegate_count, partition


    def test_partition_tags_adds():
        assert partition(["add_1", "mul_2", "add_3"]) == {"add_1": "tag0", "add_3": "tag2"}


    def test_delegates_counted():
        assert delegate_count(["add_1", "add_2"]) == 2


    def test_unrelated():
        assert 1 + 1 == 2
''')


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A package laid out as the installed ExecuTorch is (module and tests under its top),
    imported in this process as the parent of the forked runs imports ExecuTorch."""
    top = tmp_path_factory.mktemp("site") / "etr_lowering_pkg"
    (top / "test").mkdir(parents=True)
    (top / "__init__.py").write_text("")
    (top / "lowering.py").write_text(LOWERING)
    (top / "test" / "test_lowering.py").write_text(TEST)
    sys.path.insert(0, str(top.parent))
    import etr_lowering_pkg.lowering  # noqa: F401
    yield top
    sys.path.remove(str(top.parent))
    for name in [n for n in sys.modules if n.startswith("etr_lowering_pkg")]:
        del sys.modules[name]


def _run_tests(installed: Path, scratch: Path, mutated: str | None):
    """The package's tests in a forked child, the lowering module swapped for `mutated`."""
    filename = str(installed / "lowering.py")

    def work():
        swapped = mutants.patch_module(filename, LOWERING, mutated) if mutated else 0
        log = scratch / "run.log"
        found = mutants.in_child_pytest(mutants.pytest_args(scratch, installed) + ["test/test_lowering.py"],
                                        installed, log, [])
        sections = mutants.sections_of(log)
        for failure in found.failed:
            at = next((i for i, (head, _) in enumerate(sections) if head == failure["head"]), None)
            failure["section"] = sections.pop(at)[1] if at is not None else []
        return {"swapped": swapped, "failed": found.failed}
    return mutants.run_forked(work, timeout=120)


def test_a_mutant_swapped_into_the_process_fails_its_test_and_becomes_a_valid_record(installed, tmp_path):
    clean = _run_tests(installed, tmp_path, None)
    assert clean == {"swapped": 0, "failed": []}
    mutated = LOWERING.replace('if node.startswith("add")', 'if not node.startswith("add")')
    result = _run_tests(installed, tmp_path, mutated)
    # both functions of the module take the mutated module's code (one of them changed), and
    # `from ... import partition` in the test module sees the mutant: the swap is in place
    assert result["swapped"] == 2
    failed = {f["nodeid"].rsplit("::", 1)[-1]: f for f in result["failed"]}
    assert set(failed) == {"test_partition_tags_adds", "test_delegates_counted"}
    text, line = mutants.excerpt_of(failed["test_partition_tags_adds"], installed)
    assert line.startswith("E   AssertionError: assert {'mul_2': 'tag1'}")
    lines = text.splitlines()
    assert lines[0].startswith("_") and "test_partition_tags_adds" in lines[0]  # pytest's header
    assert "test/test_lowering.py:5: in test_partition_tags_adds" in lines  # repository-relative
    assert str(installed) not in text and str(tmp_path) not in text
    # the record, as the script writes it, passes the corpus loader's checks
    mutant = next(m for m in mutants.candidates(LOWERING, "etr_lowering_pkg/lowering.py")
                  if m.operator == "negate_condition")
    area = mutants.AREAS["multi_method_lowering"]
    record = mutants.record(area, mutants.Module("exir/backend/utils.py"), mutant,
                            "test/test_lowering.py::test_partition_tags_adds", (text, line), "1.4.1")
    out = tmp_path / "records.jsonl"
    mutants.write_records([record, record], out)
    [loaded] = load_corpus(out)
    assert loaded.category == "multi_method_lowering" and loaded.failure_line == line
    assert "negate_condition" in loaded.note and "test_partition_tags_adds" in loaded.note


def test_compiling_takes_the_first_mutants_whose_module_compiles_up_to_the_limit():
    found = mutants.candidates(LOWERING, "etr_lowering_pkg/lowering.py")
    broken = dataclasses.replace(found[0], edits=((1, 0, 1, 3, "def def"),))  # a syntax error
    taken = list(mutants.compiling([broken, *found], LOWERING, 2))
    assert [m for m, _ in taken] == found[:2]
    assert all(mutated == m.apply(LOWERING) != LOWERING for m, mutated in taken)
    assert list(mutants.compiling(found, LOWERING, 0)) == []


def test_a_child_that_hangs_is_killed_and_reported_as_nothing():
    handler = signal.getsignal(signal.SIGALRM)
    started = time.monotonic()
    assert mutants.run_forked(lambda: time.sleep(60), timeout=1) is None
    assert mutants.run_forked(lambda: 1 / 0) is None  # a crash in the child: no result either
    assert mutants.run_forked(lambda: {"ok": 1}) == {"ok": 1}
    assert time.monotonic() - started < 20
    assert signal.getsignal(signal.SIGALRM) == handler  # the caller's alarm handler is back


INSTALLED = Path("/root/.venv/lib/python3.11/site-packages/executorch")


@pytest.mark.parametrize("failure", [
    {"when": "setup", "section": ["_ test_x _", "E   AssertionError"]},  # not the test's call
    {"when": "call", "section": []},
    {"when": "call", "section": ["_ test_x _", "    assert x", "E   ModuleNotFoundError: No module named 'y'"]},
    {"when": "call", "section": ["_ test_x _", "    print(x)", "    all good"]},  # no exception line
    {"when": "call", "section": ["_ test_x _", "/work/secret/mine.txt:3: in f", "E   ValueError: bad"]},
], ids=["setup", "empty", "import-error", "no-exception", "machine-path"])
def test_what_makes_no_record(failure):
    assert mutants.excerpt_of(failure, INSTALLED) is None


def test_a_long_traceback_keeps_its_tail_from_a_frame_line():
    frames = [line for i in range(30) for line in (f"exir/backend/utils.py:{i + 10}: in f{i}", f"    f{i + 1}()")]
    section = ["_____ test_long _____", *frames, "E   RuntimeError: boom", ""]
    text, line = mutants.excerpt_of({"when": "call", "section": section}, INSTALLED)
    lines = text.splitlines()
    assert line == "E   RuntimeError: boom" and lines[-1] == line
    assert len(lines) <= mutants.MAX_LINES and lines[0].startswith("exir/backend/utils.py:")


def test_machine_paths_become_the_ci_paths():
    site = "/opt/conda/lib/python3.11/site-packages"
    assert mutants.general(f"{INSTALLED}/exir/backend/utils.py:3: in f", INSTALLED) == "exir/backend/utils.py:3: in f"
    assert mutants.general(f"{INSTALLED.parent}/torch/fx/graph.py:9: in g", INSTALLED) == f"{site}/torch/fx/graph.py:9: in g"
    assert mutants.general("../torch/export/x.py:1: in h", INSTALLED) == f"{site}/torch/export/x.py:1: in h"
    assert mutants.general("/root/.pyenv/versions/3.11.9/lib/python3.11/ast.py:5: in p", INSTALLED) == (
        "/opt/conda/lib/python3.11/ast.py:5: in p")


def test_tests_are_picked_in_turn_from_the_most_specific_file_first():
    ids = {f"b.py::t{i}" for i in range(10)} | {f"a.py::t{i}" for i in range(10)} | {"c.py::t0"}
    picked = mutants.pick_tests(ids, ["a.py", "b.py"])
    assert len(picked) == mutants.MAX_TESTS
    assert picked[:3] == ["a.py::t0", "b.py::t0", "c.py::t0"]


# -- reversed upstream fixes ---------------------------------------------------------------
@pytest.mark.parametrize("path, subject, area", [
    ("exir/backend/backend_api.py", "Fix routing of partitioners", "multi_method_lowering"),
    ("exir/lowered_backend_module.py", "anything", "multi_method_lowering"),
    ("exir/passes/insert_write_back_for_buffers_pass.py", "Fix crash", "mutable_buffer"),
    ("exir/memory_planning.py", "Fix mutable buffer spec", "mutable_buffer"),  # generic: by its subject
    ("exir/emit/_emitter.py", "Fix delegate emission", "multi_method_lowering"),
    ("exir/emit/_emitter.py", "Fix wrong dtype", None),  # generic, and the subject names no area
    ("devtools/etrecord/_etrecord.py", "Fix mutable buffer", None),  # not on the lowering path
    ("exir/passes/notes.md", "Fix buffer", None),
])
def test_a_fix_belongs_to_the_area_of_what_it_changed(path, subject, area):
    assert reversed_fixes.area_of(path, subject) == area


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """A repository with a buggy module, its fix and other commits; the installed package
    carries the fixed module (plus a later, unrelated edit) and the fix's test."""
    repo = tmp_path_factory.mktemp("upstream")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    module = repo / "exir" / "backend" / "utils.py"
    test = repo / "exir" / "backend" / "test" / "test_utils.py"
    module.parent.mkdir(parents=True)
    test.parent.mkdir(parents=True)

    def commit(subject: str, files: dict[Path, str]) -> str:
        for path, text in files.items():
            path.write_text(text)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", subject)
        return _git(repo, "rev-parse", "HEAD").strip()

    buggy = "def tag(nodes):\n    out = []\n    for n in nodes:\n        out.append(n)\n    return out[1:]\n"
    fixed = buggy.replace("return out[1:]", "return out")
    start = commit("Initial", {module: buggy, test: "def test_old():\n    pass\n"})
    fix = commit("Fix wrong tags dropped by the partitioner (#12345)",
                 {module: fixed, test: "def test_old():\n    pass\n\n\ndef test_tags_kept():\n    pass\n"})
    commit("Fix typo in partitioner docstring", {module: fixed + "\n# partitioner\n"})
    commit("Revert \"Fix wrong tags\"", {module: fixed + "\n# partitioner\n\n"})
    commit("Add a new feature to to_backend", {module: fixed + "\n# partitioner\n\n# feature\n"})
    installed = tmp_path_factory.mktemp("installed")
    (installed / "exir" / "backend" / "test").mkdir(parents=True)
    (installed / "exir" / "backend" / "utils.py").write_text("# a later edit above\n" + fixed)
    (installed / "exir" / "backend" / "test" / "test_utils.py").write_text(test.read_text())
    return repo, installed, start, fix


def test_only_fixes_of_one_area_with_a_test_in_the_wheel_are_taken(history):
    repo, installed, start, fix = history
    [found] = reversed_fixes.fixes(repo, start, "HEAD", installed)  # not the typo, the revert, the feature
    assert (found.sha, found.category) == (fix, "multi_method_lowering")
    assert found.sources == ("exir/backend/utils.py",) and found.tests == ("exir/backend/test/test_utils.py",)
    assert found.names == ("test_tags_kept",)  # the test the fix added
    assert reversed_fixes.source_of(found) == "https://github.com/pytorch/executorch/pull/12345"


def test_undoing_a_fix_on_the_installed_file_brings_the_bug_back(history, tmp_path):
    repo, shared, start, _ = history
    [found] = reversed_fixes.fixes(repo, start, "HEAD", shared)
    installed = tmp_path / "installed"
    shutil.copytree(shared, installed)
    undone = reversed_fixes.undone(repo, found, installed, tmp_path / "scratch")
    assert undone == {"exir/backend/utils.py": (installed / "exir" / "backend" / "utils.py").read_text()
                      .replace("return out\n", "return out[1:]\n")}
    # a fix whose lines were rewritten since no longer applies: nothing to undo
    (installed / "exir" / "backend" / "utils.py").write_text("def tag(nodes):\n    return list(nodes)\n")
    assert reversed_fixes.undone(repo, found, installed, tmp_path / "scratch2") == {}


def test_a_fix_quoted_by_the_evaluation_split_makes_no_record(history):
    repo, installed, start, _ = history
    [found] = reversed_fixes.fixes(repo, start, "HEAD", installed)
    assert reversed_fixes.in_evaluation_split(found, '{"source": "https://github.com/pytorch/executorch/pull/12345"}')
    assert reversed_fixes.in_evaluation_split(found, f'"note": "cherry-pick of {found.sha[:10]}"')
    assert reversed_fixes.in_evaluation_split(found, "(#12345)")
    assert not reversed_fixes.in_evaluation_split(found, "pull/123456 and #1234")


def test_a_later_fix_applied_on_the_installed_file_and_its_tests_put_back_afterwards(history, tmp_path):
    """--later: the release lacks the fix. Applied, it gives the fixed module; its tests as the
    fix commit has them stand over the installed ones for the run only, even when it fails."""
    repo, _, start, _ = history
    installed = tmp_path / "installed"
    (installed / "exir" / "backend" / "test").mkdir(parents=True)
    buggy = _git(repo, "show", f"{start}:exir/backend/utils.py")
    (installed / "exir" / "backend" / "utils.py").write_text(buggy)
    old_test = _git(repo, "show", f"{start}:exir/backend/test/test_utils.py")
    (installed / "exir" / "backend" / "test" / "test_utils.py").write_text(old_test)
    [found] = reversed_fixes.fixes(repo, start, "HEAD", installed)
    assert reversed_fixes.applied(repo, found, installed, tmp_path / "scratch") == {
        "exir/backend/utils.py": buggy.replace("return out[1:]", "return out")}
    test_file = installed / "exir" / "backend" / "test" / "test_utils.py"
    with pytest.raises(RuntimeError, match="the run failed"):
        with reversed_fixes.tests_of(repo, found, installed):
            assert "def test_tags_kept" in test_file.read_text()  # the fix's test, for the run
            raise RuntimeError("the run failed")
    assert test_file.read_text() == old_test


def test_a_later_fixs_new_helpers_are_defined_for_the_functions_that_call_them():
    module = type(sys)("fake_module")
    exec("def tag(nodes):\n    return list(nodes)[1:]\n", vars(module))
    later = ("import os\n\n\ndef _keep(nodes):\n    return list(nodes)\n\n\n"
             "def tag(nodes):\n    return _keep(nodes)\n\n\nclass Tagger:\n    pass\n")
    assert reversed_fixes.define_missing(module, "fake_module.py", later) == 2  # _keep and Tagger, not tag
    assert module._keep([1, 2]) == [1, 2] and isinstance(module.Tagger(), module.Tagger)
    assert module.tag([1, 2]) == [2]  # the existing function is swapped by patch_module, not here
    assert "os" not in vars(module)  # top-level statements other than definitions are not run
