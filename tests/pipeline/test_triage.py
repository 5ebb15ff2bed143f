"""Full triage runs on real regressions: base and head suites run on the host target with
the real ExecuTorch runtime. The merge base's results are cached across these tests."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from tasks.pipeline.report import to_markdown
from tasks.pipeline.run import TriageOptions, triage

pytestmark = pytest.mark.executorch


def run_triage(et_repo, data_dir, head, suites, **kw):
    messages = []
    report = triage(TriageOptions(repo=et_repo.path, base="main", head=head, data_dir=data_dir,
                                  suites=suites, **kw), progress=messages.append)
    return report.to_dict(), report, messages


def new_results(data):
    return [r for r in data["results"] if r["verdict"] == "new"]


def assert_env_failure_never_new(data):
    """The BackendWithCompilerDemo test fails in this runtime: an environment verdict, never new;
    or, once an earlier triage on the same compiled parts learnt that (the session's data dir),
    not run, the comment saying so (unrunnable.py)."""
    demo = [r for r in data["results"] if r["test"].endswith("test_multi_method_end_to_end")]
    if demo:
        assert demo[0]["verdict"] in ("environment", "pre_existing")
        return
    [note] = [n for n in data["plan"]["notes"] if n.startswith("multi_method: ")]
    assert "not run on this worker, which learnt it cannot run them" in note, note
    assert "BackendWithCompilerDemo is not registered" in note or "and others" in note, note


def test_partitioner_routing_is_a_new_multi_method_failure(et_repo, data_dir, patches):
    head = et_repo.branch("routing", patches.pipeline("partitioner_routing"))
    data, report, messages = run_triage(et_repo, data_dir, head, ["multi_method"])

    new = new_results(data)
    assert new, data["summary"]
    assert {r["suite"] for r in new} == {"multi_method"}
    assert all(r["head"] in ("failed", "error") and r["base"] == "passed" for r in new)
    assert any(r["failure"]["category"] == "multi_method_lowering" for r in new), [r["failure"] for r in new]
    for r in new:
        assert r["suspects"][0]["path"] == "exir/backend/backend_api.py"
        assert r["reproduce"].startswith("python -m pytest exir/backend/test/test_to_backend_multi_method.py::")
    assert_env_failure_never_new(data)
    assert data["plan"]["changed_files"] == [{"path": "exir/backend/backend_api.py", "status": "M",
                                              "old_path": None, "binary": False, "mode": "100644"}]
    assert data["build"]["status"] == "ok"
    assert data["summary"]["new"] == len(new)
    markdown = to_markdown(report)
    assert f"{len(new)} new failure" in markdown and "not the change's fault" in markdown
    assert any("at head" in m for m in messages)


def test_getitem_order_breaks_the_multi_method_probe(et_repo, data_dir, patches):
    head = et_repo.branch("getitem", patches.probe("multi_method_getitem_order"))
    data, _, _ = run_triage(et_repo, data_dir, head, ["probes"])

    new = new_results(data)
    assert [r["failure"]["category"] for r in new] == ["multi_method_lowering"] * len(new) and new
    top = [s["path"] for s in new[0]["suspects"][:3]]
    assert "exir/backend/backend_api.py" in top
    assert new[0]["reproduce"].startswith("python -m tasks.probes --suite multi_method")


def test_dropped_buffer_write_back_is_a_mutable_buffer_failure(et_repo, tmp_path, patches):
    head = et_repo.branch("writeback", patches.probe("mutable_buffer_no_write_back"))
    # its own data dir: what ran at the merge base must not be answered by an earlier test's cache
    data, _, _ = run_triage(et_repo, tmp_path / "data", head, ["probes", "multi_method"])

    new = new_results(data)
    assert new and any(r["failure"]["category"] == "mutable_buffer" for r in new), data["results"]
    patched = "exir/passes/insert_write_back_for_buffers_pass.py"
    mutable = [r for r in new if r["failure"]["category"] == "mutable_buffer"]
    assert any(patched in [s["path"] for s in r["suspects"][:3]] for r in mutable)
    assert_env_failure_never_new(data)
    base_runs = {b["suite"]: b for b in data["base_runs"]}
    # multi_method only fails on the environment here: nothing of it runs at the merge base
    assert base_runs["multi_method"]["ran"] == [] and base_runs["multi_method"]["source"] in ("cache", "not_needed")
    # probes: only the probes that failed at head ran at the merge base
    failed_probes = {r["test"] for r in data["results"] if r["suite"] == "probes" and r["verdict"] != "environment"}
    assert set(base_runs["probes"]["ran"]) == failed_probes
    assert not base_runs["probes"]["complete"]
    assert all(r["verdict"] != "fixed" for r in data["results"])


def test_harmless_rename_reports_nothing_new(et_repo, data_dir):
    def rename(repo: Path):
        (repo / "exir/backend/test/test_utils.py").rename(repo / "exir/backend/test/test_backend_utils.py")

    head = et_repo.branch("rename", edit=rename)
    data, _, _ = run_triage(et_repo, data_dir, head, ["multi_method", "selected"])

    assert data["summary"]["new"] == 0, new_results(data)
    renamed = data["plan"]["changed_files"][0]
    assert renamed["status"] == "R" and renamed["old_path"] == "exir/backend/test/test_utils.py"
    assert_env_failure_never_new(data)


FLAKY_TEST = (
    "import os\n\n"
    "def test_passes_on_second_run():\n"
    "    # a sandboxed run keeps nothing for the next one: the retry is told by its work directory\n"
    "    first = '/retry-' not in os.environ.get('ETRIAGE_PYTEST_CONFIG', '')\n"
    "    assert not first, 'first run fails (a stand-in for a timing-dependent test)'\n"
)


@pytest.fixture(scope="module")
def flaky_triage(et_repo, tmp_path_factory):
    """A change adding a test that fails once, triaged with the `selected` suite only, with
    its own data dir: no merge-base outcome is known from an earlier test's cache."""
    data_dir = tmp_path_factory.mktemp("etriage-data-flaky")
    def add_test(repo: Path):
        (repo / "exir/backend/test/test_flaky_once.py").write_text(FLAKY_TEST)

    head = et_repo.branch("flaky", edit=add_test)
    data, report, messages = run_triage(et_repo, data_dir, head, ["selected"])
    return data, report


def test_flaky_test_is_retried_and_called_flaky(flaky_triage):
    data, _ = flaky_triage
    selected = {s["path"]: s["reason"] for s in data["plan"]["selected"]}
    assert "changed by this change" in selected["exir/backend/test/test_flaky_once.py"]
    verdicts = {r["test"]: r["verdict"] for r in data["results"]}
    assert verdicts["exir/backend/test/test_flaky_once.py::test_passes_on_second_run"] == "flaky"
    assert "new" not in verdicts.values(), verdicts  # other selected files fail at base too


def test_selected_suite_runs_only_heads_failures_at_the_merge_base(flaky_triage):
    data, report = flaky_triage
    [base_run] = [b for b in data["base_runs"] if b["suite"] == "selected"]
    head_failed = {r["test"] for r in data["results"] if r["suite"] == "selected" and r["verdict"] != "environment"}
    # the new test file does not exist at the merge base: nothing of it can run there
    expected = {t for t in head_failed if not t.startswith("exir/backend/test/test_flaky_once.py")}
    assert expected, "some selected test should fail at head and at the merge base"
    assert set(base_run["ran"]) == expected
    [head_suite] = [s for s in data["suites"] if s["suite"] == "selected"]
    assert len(head_suite["tests"]) > len(base_run["ran"])  # the passing ones did not run at base
    assert base_run["complete"] is False
    assert all(r["verdict"] == "pre_existing" for r in data["results"] if r["test"] in expected)
    assert any("`fixed` is only computed" in n for n in data["plan"]["notes"])
    assert "partial (no `fixed`)" in to_markdown(report)


INTERMITTENT_TEST = (
    "import os\n\n"
    "def test_fails_but_on_its_first_merge_base_run():\n"
    "    # a stand-in for a test that fails at random at the merge base too (the QNN simulator's\n"
    "    # undefined first read of a delegate's cache): there it passes once, by chance\n"
    "    assert '/base-' in os.environ.get('ETRIAGE_PYTEST_CONFIG', ''), 'fails, but by chance'\n"
)


def test_a_test_failing_at_random_at_the_merge_base_too_is_not_the_changes(et_repo, tmp_path_factory):
    """It passed at the merge base once and fails at head, retry included: before calling it new,
    it runs at the merge base again (LUCI's retry without patch), fails there, and is pre-existing."""
    path = "exir/backend/test/test_intermittent.py"
    merge_base = dataclasses.replace(et_repo, base=et_repo.branch(
        "intermittent-base", edit=lambda repo: (repo / path).write_text(INTERMITTENT_TEST)))
    head = merge_base.branch("intermittent-head", edit=lambda repo: (repo / path).write_text(INTERMITTENT_TEST + "# touched\n"))
    messages = []
    report = triage(TriageOptions(repo=et_repo.path, base=merge_base.base, head=head,
                                  data_dir=tmp_path_factory.mktemp("etriage-data-intermittent"), suites=["selected"]),
                    progress=messages.append)
    [verdict] = [v for v in report.results if v.test == f"{path}::test_fails_but_on_its_first_merge_base_run"]
    assert (verdict.verdict, verdict.base) == ("pre_existing", "failed"), verdict
    assert any("at the merge base (attempt 1)" in m for m in messages)
    assert any("intermittent at the merge base" in n and path in n for n in report.plan.notes)
    assert verdict.test not in {v.test for v in report.results if v.verdict == "new"}


def test_quantizer_freezing_the_kv_cache_is_a_mutable_buffer_failure(et_repo, data_dir, patches):
    head = et_repo.branch("quant-kv", patches.probe("mutable_buffer_quantizer_freezes_kv_cache"))
    data, _, _ = run_triage(et_repo, data_dir, head, ["probes"])

    new = new_results(data)
    assert new and all(r["failure"]["category"] == "mutable_buffer" for r in new)
    assert any("quantizer" in s["path"] for s in new[0]["suspects"][:3])


def test_docs_only_change_runs_nothing(et_repo, data_dir):
    def docs(repo: Path):
        (repo / "docs").mkdir(exist_ok=True)
        (repo / "docs" / "multi_method.md").write_text("# Multi-method lowering\n")

    head = et_repo.branch("docs", edit=docs)
    data, report, _ = run_triage(et_repo, data_dir, head, None)
    assert data["plan"]["docs_only"] and data["plan"]["suites"] == [] and data["results"] == []
    assert "documentation-only" in to_markdown(report)


def test_qnn_suite_is_not_run_without_the_sdk(et_repo, data_dir):
    def touch_qnn(repo: Path):
        path = repo / "backends/qualcomm/README.md"
        path.write_text(path.read_text() + "\n" if path.exists() else "x\n")
        (repo / "backends/qualcomm/notes.py").write_text("X = 1\n")

    head = et_repo.branch("qnn", edit=touch_qnn)
    # a worker with no SDK: QNN_SDK_ROOT names nothing (the one `make install` provisioned aside)
    data, _, _ = run_triage(et_repo, data_dir, head, ["qnn"], python=sys.executable,
                            tool_env={"QNN_SDK_ROOT": str(data_dir / "no-qnn-sdk")})
    assert data["plan"]["backends"] == ["qualcomm"]
    qnn = [s for s in data["suites"] if s["suite"] == "qnn"]
    assert qnn and qnn[0]["status"] == "not_run" and "QNN SDK unavailable" in qnn[0]["reason"]
    assert data["summary"]["new"] == 0 and data["summary"]["not_run"] == 1


def test_a_change_whose_relevant_tests_cannot_run_here_says_so(et_repo, data_dir):
    """The Arm quantizer: most of its relevant tests need `tosa_serializer`, which this worker
    lacks. They are left out and the report says why, per changed file, instead of a silent
    pass; what runs is only what can (the `test/` directory beside the backend's modules, by the
    repository's convention), never a test that needs the missing package."""
    def touch(repo: Path):
        target = repo / "backends/arm/quantizer/arm_quantizer.py"
        target.write_text(target.read_text() + "\n# touched\n")

    head = et_repo.branch("arm-quantizer", edit=touch)
    data, report, _ = run_triage(et_repo, data_dir, head, None, targets=["host"], budget_seconds=1)  # the first candidate only
    left = data["plan"]["left_out"]
    assert left and all(s["module"] == "backends/arm/quantizer/arm_quantizer.py" for s in left)
    needs = {s["path"] for s in left if s["why"] == "needs" and "tosa_serializer" in s["reason"]}
    assert needs
    selected = data["plan"]["selected"]
    assert not needs & {s["path"] for s in selected}
    assert all("test directory beside the changed module" in s["reason"] for s in selected), selected
    text = to_markdown(report)
    assert "## Relevant but not run" in text and "need what this worker lacks" in text
