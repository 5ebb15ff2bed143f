"""Tests this worker cannot run, learnt from its own runs (tasks/pipeline/unrunnable.py): what
makes a lesson, how long it holds and for which compiled parts, and selection leaving such tests
out; end to end, real tests of the installed ExecuTorch that need a backend or a compiled module
the wheel lacks run once, then are left out."""
from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from tasks import records
from tasks.pipeline import select, unrunnable
from tasks.pipeline.run import TriageOptions, triage
from tasks.pipeline.tables import DEFAULT_DIR, load_tables
from tasks.records import ChangedFile, SuiteResult, Verdict
from triage_rules.records import Failure

RPC = "exir/backend/test/demos/rpc/test_rpc.py"
ATEN = "exir/backend/test/demos/test_delegate_aten_mode.py"
PASSES = "exir/tests/test_passes.py"
WHEEL = unrunnable.identity("wheel", "1.4.1", "ab" * 32)
NOT_REGISTERED = Failure(line="RuntimeError: Failed to execute method forward, error: 0x20", line_no=1,
                         environment=True, title="Backend ExecutorBackend is not registered in the runtime")


def _result(outcomes: dict[str, str], suite: str = "selected") -> SuiteResult:
    return SuiteResult(suite=suite, target="host", commit="h" * 40, status="ran",
                       tests=[records.TestResult(suite=suite, test=t, target="host", outcome=o) for t, o in outcomes.items()])


def _verdict(test: str, verdict: str, failure: Failure | None = NOT_REGISTERED, suite: str = "selected") -> Verdict:
    return Verdict(suite=suite, test=test, target="host", base="failed", head="failed", verdict=verdict,
                   failure=failure)


def test_a_test_judged_environment_and_a_file_that_cannot_be_collected_are_lessons():
    head = [_result({f"{RPC}::T::test_a": "failed", f"{RPC}::T::test_b": "passed", ATEN: "error",
                     f"{PASSES}::T::test_c": "failed", "selected (suite crashed)": "error"})]
    verdicts = [_verdict(f"{RPC}::T::test_a", "environment"),
                _verdict(ATEN, "pre_existing", Failure(line="ModuleNotFoundError: No module named "
                                                            "'executorch.extension.pybindings.aten_lib'", line_no=1)),
                _verdict(f"{PASSES}::T::test_c", "pre_existing"),  # trunk's bug: it may be fixed any day
                _verdict("selected (suite crashed)", "environment")]  # the suite's, not a test's
    learnt, passed = unrunnable.lessons(head, verdicts)
    assert learnt == {
        f"{RPC}::T::test_a": "failed for the environment: Backend ExecutorBackend is not registered in the runtime: "
                             "RuntimeError: Failed to execute method forward, error: 0x20",
        ATEN: "could not be collected at either side: ModuleNotFoundError: No module named "
              "'executorch.extension.pybindings.aten_lib'"}
    assert passed == {f"{RPC}::T::test_b"}


@pytest.mark.parametrize("verdict", ["new", "flaky", "not_in_log"])
def test_what_the_change_may_cause_teaches_nothing(verdict):
    head = [_result({f"{RPC}::T::test_a": "failed"})]
    assert unrunnable.lessons(head, [_verdict(f"{RPC}::T::test_a", verdict)]) == ({}, set())


def test_a_fixed_pytest_suite_teaches_its_tests_never_a_whole_file():
    head = [_result({f"{RPC}::T::test_a": "failed", f"{RPC}::T::test_b": "passed", ATEN: "error"}, suite="mm")]
    verdicts = [_verdict(f"{RPC}::T::test_a", "environment", suite="mm"),
                _verdict(ATEN, "pre_existing", suite="mm"), _verdict(ATEN, "environment", suite="mm")]
    assert unrunnable.lessons(head, verdicts)[0] == {}  # not named a pytest suite (a probe suite, say)
    learnt, passed = unrunnable.lessons(head, verdicts, frozenset({"mm"}))
    assert set(learnt) == {f"{RPC}::T::test_a"} and passed == {f"{RPC}::T::test_b"}


def test_a_fixed_suite_leaves_out_the_learnt_tests_of_its_files_unless_the_change_edits_them():
    cannot_run = {f"{RPC}::T::test_a": "why a", f"{PASSES}::T::test_c": "why c", ATEN: "why file",
                  "exir/backend/test/demos/rpc/test_rpc_other.py::T::test_d": "why d"}
    assert unrunnable.leave_out(cannot_run, (RPC,), set()) == {f"{RPC}::T::test_a": "why a"}
    assert set(unrunnable.leave_out(cannot_run, ("exir/backend/test/demos/",), set())) == {
        f"{RPC}::T::test_a", "exir/backend/test/demos/rpc/test_rpc_other.py::T::test_d"}  # never a whole file
    assert unrunnable.leave_out(cannot_run, ("exir/backend/test/demos/rpc/",), {RPC}) == {
        "exir/backend/test/demos/rpc/test_rpc_other.py::T::test_d": "why d"}
    assert unrunnable.leave_out(cannot_run, ("exir/backend/test/demos/rp",), set()) == {}  # a folder, not a prefix


def test_a_lesson_holds_for_its_compiled_parts_for_a_week_and_a_pass_forgets_it(tmp_path):
    head = [_result({f"{RPC}::T::test_a": "failed"})]
    learnt = unrunnable.learn(tmp_path, WHEEL, head, [_verdict(f"{RPC}::T::test_a", "environment")],
                              "m" * 40, now=1_000_000)
    assert learnt == {f"{RPC}::T::test_a": f"failed for the environment: {NOT_REGISTERED.title}: {NOT_REGISTERED.line}"}
    why = unrunnable.load(tmp_path, WHEEL, now=1_000_000 + 86400)[f"{RPC}::T::test_a"]
    assert why == (f"{learnt[f'{RPC}::T::test_a']} (learnt at the merge base {'m' * 12} on 1970-01-12; "
                   "tried again after 7 days, or when a change edits its file)")
    assert unrunnable.load(tmp_path, unrunnable.identity("built", "", "cd" * 32), now=1_000_000) == {}
    assert unrunnable.load(tmp_path, WHEEL, now=1_000_000 + 8 * 86400) == {}  # tried again after a week
    # a later run in which a test of it passes (a worker with that backend) forgets it
    unrunnable.learn(tmp_path, WHEEL, [_result({f"{RPC}::T::test_a": "passed"})], [], "m" * 40, now=1_000_100)
    assert unrunnable.load(tmp_path, WHEEL, now=1_000_200) == {}


def _dist(site, name: str, version: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_a_package_installed_or_upgraded_on_the_worker_or_another_torch_pin_tries_again(tmp_path):
    """A lesson "needs tosa_serializer" holds until the worker has it: another set of installed
    packages, or a commit pinning another torch, is another environment, which learns for itself."""
    site = tmp_path / "site-packages"
    _dist(site, "torch", "2.13.0")
    before = unrunnable.packages_of(site)
    assert before == unrunnable.packages_of(site)  # the same packages, the same digest
    key = unrunnable.identity("wheel", "1.4.1", "ab" * 32, "2.13.0", before)
    unrunnable.learn(tmp_path, key, [_result({f"{RPC}::T::test_a": "failed"})],
                     [_verdict(f"{RPC}::T::test_a", "environment")], "m" * 40, now=1_000_000)
    assert list(unrunnable.load(tmp_path, key, now=1_000_100)) == [f"{RPC}::T::test_a"]
    _dist(site, "tosa_serializer", "1.0")  # the operator installs what the test needed
    installed = unrunnable.packages_of(site)
    assert installed != before
    assert unrunnable.load(tmp_path, unrunnable.identity("wheel", "1.4.1", "ab" * 32, "2.13.0", installed),
                           now=1_000_100) == {}
    shutil.rmtree(site / "torch-2.13.0.dist-info")
    _dist(site, "torch", "2.14.0")  # an upgrade is another environment too
    assert unrunnable.packages_of(site) not in (before, installed)
    assert unrunnable.load(tmp_path, unrunnable.identity("wheel", "1.4.1", "ab" * 32, "2.14.0", before),
                           now=1_000_100) == {}
    assert unrunnable.packages_of(tmp_path / "nowhere") == ""


def test_a_damaged_store_is_no_lesson_and_the_next_run_rewrites_it(tmp_path):
    (tmp_path / unrunnable.FILE).write_text("{not json")
    assert unrunnable.load(tmp_path, WHEEL) == {}
    (tmp_path / unrunnable.FILE).write_text(json.dumps({WHEEL: {RPC: {"why": "x", "at": "yesterday"}, ATEN: 3}}))
    assert unrunnable.load(tmp_path, WHEEL) == {}
    unrunnable.learn(tmp_path, WHEEL, [_result({f"{RPC}::T::test_a": "failed"})],
                     [_verdict(f"{RPC}::T::test_a", "environment")], "m" * 40)
    assert set(unrunnable.load(tmp_path, WHEEL)) == {f"{RPC}::T::test_a"}


def test_selection_leaves_out_what_cannot_run_here_unless_the_change_edits_it(et_repo, data_dir):
    graph = select.import_graph(et_repo.path, et_repo.base, data_dir)
    tables = load_tables()
    change = [ChangedFile("exir/backend/test/demos/rpc/executor_backend_preprocess.py", "M")]
    selected, _ = select.select_tests(graph, change, tables, set())
    assert RPC in {s.path for s in selected}
    ids = graph["test_ids"][RPC]
    why = ("failed for the environment: Backend ExecutorBackend is not registered in the runtime (learnt at "
           "the merge base 0123456789ab on 2026-12-06; tried again after 7 days, or when a change edits its file)")
    # every test of the file learnt: the file is left out, saying why
    selected, left_out = select.select_tests(graph, change, tables, set(),
                                             host=select.Host(cannot_run=dict.fromkeys(ids, why)))
    assert not [s for s in selected if s.path.startswith(RPC)]
    [left] = [s for s in left_out if s.path == RPC]
    assert left.why == "needs" and f"not run on this worker: {why}" in left.reason
    # one of them learnt: the others run by node id
    selected, left_out = select.select_tests(graph, change, tables, set(), host=select.Host(cannot_run={ids[0]: why}))
    assert sorted(s.path for s in selected if s.path.startswith(RPC)) == sorted(ids[1:])
    [left] = [s for s in left_out if s.path == RPC]
    assert left.why == "needs" and f"partly run: 1 of its tests not run on this worker: {why}" in left.reason
    # over the budget, the rest of it is left out as such, still saying what cannot run here
    tight = dataclasses.replace(tables, selection=dataclasses.replace(tables.selection, budget_seconds=1.0))
    selected, left_out = select.select_tests(graph, change, tight, set(), host=select.Host(cannot_run={ids[0]: why}))
    assert selected and not [s for s in selected if s.path.startswith(RPC)]  # the first candidate ran
    [left] = [s for s in left_out if s.path == RPC]
    assert left.why == "budget" and "1 of its tests cannot run on this worker" in left.reason
    # a change to the test file itself runs it whole: it may be the fix
    selected, _ = select.select_tests(graph, change + [ChangedFile(RPC, "M")], tables, set(),
                                      host=select.Host(cannot_run=dict.fromkeys(ids, why)))
    assert RPC in {s.path for s in selected}


@pytest.mark.executorch
def test_test_files_failing_for_the_environment_run_once_then_their_budget_goes_elsewhere(et_repo, tmp_path):
    """Real runs on the installed ExecuTorch, a change to the RPC demo's partitioner. `test_rpc.py`
    delegates to `ExecutorBackend`, which the wheel's runtime does not register, and
    `test_delegate_aten_mode.py` imports `aten_lib`, which the wheel lacks. The first triage runs
    both (environment and pre-existing verdicts, never the change's) and learns; the second
    leaves them out, saying why, and spends their budget on other relevant tests."""
    def touch(repo):
        target = repo / "exir/backend/test/demos/rpc/executor_backend_partitioner.py"
        target.write_text(target.read_text() + "\n# touched\n")

    head = et_repo.branch("touch-rpc-partitioner", edit=touch)
    messages = []
    options = TriageOptions(repo=et_repo.path, base="main", head=head, data_dir=tmp_path / "data",
                            suites=["selected"])
    first = triage(options, progress=messages.append)
    ran = {s.path for s in first.plan.selected}
    assert {RPC, ATEN} <= ran, ran
    verdicts = {v.test: v.verdict for v in first.results}
    assert {v for t, v in verdicts.items() if t.startswith(RPC)} == {"environment"}, verdicts
    assert verdicts[ATEN] == "pre_existing" and "new" not in verdicts.values(), verdicts
    [learnt] = [m for m in messages if m.startswith("learnt: ")]
    rpc_env = sorted(t for t, v in verdicts.items() if t.startswith(RPC))
    assert all(t in learnt for t in [*rpc_env, ATEN]), learnt

    second = triage(options)
    assert not [v for v in second.results if v.test.startswith((RPC, ATEN))], second.results
    # RPC's third test, which passes here, still runs by node id; the other two are not run
    assert any(s.path.startswith(RPC + "::") for s in second.plan.selected)
    assert not {s.path for s in second.plan.selected} & set(rpc_env)
    left = {s.path: s for s in second.plan.left_out}
    assert f"partly run: {len(rpc_env)} of its tests not run on this worker" in left[RPC].reason
    assert "ExecutorBackend is not registered" in left[RPC].reason
    assert left[ATEN].why == "needs" and "could not be collected at either side" in left[ATEN].reason
    assert "No module named 'executorch.extension.pybindings.aten_lib'" in left[ATEN].reason
    assert {s.path.split("::")[0] for s in second.plan.selected} - ran  # the budget went to other relevant tests


@pytest.mark.executorch
def test_a_fixed_suite_runs_its_tests_that_cannot_run_here_once_then_leaves_them_out(et_repo, tmp_path):
    """A fixed pytest suite over `test_rpc.py` (a copy of the bundled tables with one suite more):
    two of its tests delegate to `ExecutorBackend`, which the wheel's runtime does not register.
    The first triage judges them environment and learns; the second deselects them, says so in
    its notes, and still runs the third."""
    tables_dir = tmp_path / "tables"
    shutil.copytree(DEFAULT_DIR, tables_dir)
    suites = (tables_dir / "suites.yaml").read_text()
    (tables_dir / "suites.yaml").write_text(suites.replace("\nselection:", f"""
  rpc_demo:
    description: "the RPC delegate demo"
    kind: pytest
    backends: [portable, xnnpack]
    paths: [{RPC}]
    estimated_seconds: 10

selection:""", 1))
    head = et_repo.branch("touch-rpc-partitioner-fixed", edit=lambda repo: (
        repo / "exir/backend/test/demos/rpc/executor_backend_partitioner.py").write_text(
        (repo / "exir/backend/test/demos/rpc/executor_backend_partitioner.py").read_text() + "\n# touched\n"))
    options = TriageOptions(repo=et_repo.path, base="main", head=head, data_dir=tmp_path / "data",
                            suites=["rpc_demo"], tables_dir=tables_dir)
    messages = []
    first = triage(options, progress=messages.append)
    env = sorted(v.test for v in first.results if v.verdict == "environment")
    assert len(env) == 2 and all(t.startswith(RPC + "::") for t in env), first.results
    assert not [v for v in first.results if v.verdict == "new"]
    assert any(m.startswith("learnt: 2 test(s)") for m in messages), messages

    second = triage(options)
    assert second.results == [], second.results
    [ran] = [r for r in second.suites if r.suite == "rpc_demo"]
    assert [(t.test, t.outcome) for t in ran.tests if t.test.startswith(RPC)] == [
        (t, "passed") for t in sorted({t.test for r in first.suites for t in r.tests} - set(env))]
    [note] = [n for n in second.plan.notes if n.startswith("rpc_demo: ")]
    assert note.startswith(f"rpc_demo: 2 test(s) not run on this worker, which learnt it cannot run them (`{env[0]}`")
    assert "ExecutorBackend is not registered" in note
