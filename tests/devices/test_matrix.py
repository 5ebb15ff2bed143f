"""The test x target matrix: in the markdown report (the PR comment) from real records, and
through the real `etriage triage` command line on a real regression with a real ssh device."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks.pipeline.report import comment_section, to_markdown
from tasks.records import BuildResult, CommitEnvironment, Plan, Report, SuiteResult, Verdict
from tasks.records import TestResult as Outcome  # not Test*: pytest would try to collect it
from tasks.sample_repo import build_sample_repo

ROOT = Path(__file__).resolve().parents[2]


def _report() -> Report:
    plan = Plan(base="b" * 40, head="h" * 40, merge_base="m" * 40, changed_files=[], areas=["exir"],
                backends=["portable"], suites=["probes"], targets=["host", "ssh:lab-1", "emulated-arm64"], recipes=[])
    host = SuiteResult("probes", "host", "h" * 40, "ran", tests=[
        Outcome("probes", "mutable_buffer::kv_cache_write_back", "host", "passed")])
    ssh = SuiteResult("probes", "ssh:lab-1", "h" * 40, "ran", reason="on device lab-1 (SM8750)", tests=[
        Outcome("probes", "mutable_buffer::kv_cache_steps_portable", "ssh:lab-1", "failed"),
        Outcome("probes", "multi_method::two_methods_portable", "ssh:lab-1", "passed")])
    emulated = SuiteResult("probes", "emulated-arm64", "h" * 40, "crashed", reason="device fault (refused); 3 attempt(s)")
    verdicts = [Verdict(suite="probes", test="mutable_buffer::kv_cache_steps_portable", target="ssh:lab-1",
                        base="passed", head="failed", verdict="new"),
                Verdict(suite="probes", test="probes (suite crashed)", target="emulated-arm64", base="absent",
                        head="error", verdict="environment")]
    return Report(base=plan.base, head=plan.head, merge_base=plan.merge_base, plan=plan,
                  build=BuildResult(status="ok", kind="overlay", commit=plan.head), results=verdicts,
                  suites=[host, ssh, emulated], summary={"new": 1, "environment": 1})


def test_matrix_rows_are_tests_columns_are_targets():
    text = to_markdown(_report())
    table = text[text.index("## Tests × targets"):].split("\n\n")[1].splitlines()
    assert table[0] == "| test | host | ssh:lab-1<br><sub>lab-1 (SM8750)</sub> | emulated-arm64 |"
    rows = {line.split(" | ")[0].strip("| `"): line.split(" | ")[1:] for line in table[2:]}
    assert rows["mutable_buffer::kv_cache_steps_portable"] == ["·", "❌ new", "💥 crashed (🌩️ environment) |"]
    assert rows["multi_method::two_methods_portable"][1] == "✅"
    assert rows["mutable_buffer::kv_cache_write_back"] == ["✅", "·", "💥 crashed (🌩️ environment) |"]
    assert table[2].startswith("| `mutable_buffer::kv_cache_steps_portable`")  # failures first


def test_no_matrix_for_one_target():
    report = _report()
    report.suites = report.suites[:1]
    assert "Tests × targets" not in to_markdown(report)


def test_a_suite_that_ran_nowhere_on_a_target_is_a_row_named_by_the_suite():
    report = _report()
    report.suites.append(SuiteResult("multi_method", "host", "h" * 40, "ran", tests=[
        Outcome("multi_method", "test_to_backend_multi_method.py::test_two", "host", "passed")]))
    report.suites.append(SuiteResult("multi_method", "ssh:lab-1", "h" * 40, "not_run", reason="device busy"))
    report.suites.append(SuiteResult("mutable_buffer", "host", "h" * 40, "not_run", reason="no sandbox"))
    report.suites.append(SuiteResult("mutable_buffer", "ssh:lab-1", "h" * 40, "not_run", reason="no sandbox"))
    text = to_markdown(report)
    assert "| `mutable_buffer (whole suite)` | — not run | — not run |" in text
    assert "| `test_to_backend_multi_method.py::test_two` | ✅ | — not run |" in text
    assert "| `(whole suite)`" not in text


def test_a_run_that_started_nothing_says_why_once_and_draws_no_matrix():
    """The merge base's environment could not be made: every suite on every target has that one
    reason. It is said once, naming what it kept from running; the report names the merge base's
    environment as the merge base's, though the run carries it as its build's."""
    plan = Plan(base="b" * 40, head="h" * 40, merge_base="m" * 40, changed_files=[], areas=["exir"],
                backends=["portable"], suites=["multi_method", "probes"], targets=["host", "qnn-htp-sim"], recipes=[])
    reason = "could not build the merge base mmmmmmmmmmmm: the build of the compiled parts failed"
    suites = [SuiteResult(suite, target, "h" * 40, "not_run", reason=reason)
              for suite in ("multi_method", "probes") for target in ("host", "qnn-htp-sim")]
    base_env = CommitEnvironment(commit="m" * 40, status="failed", reason="the build of the compiled parts failed")
    report = Report(base=plan.base, head=plan.head, merge_base=plan.merge_base, plan=plan,
                    build=BuildResult(status="environment", kind="environment", commit="m" * 40, reason=reason,
                                      environment=base_env), results=[], suites=suites, summary={"environment": 1})
    text = to_markdown(report)
    assert "Tests × targets" not in text
    section = text[text.index("## Not run"):].split("\n\n")[1].splitlines()
    assert section == [f"- multi_method, probes on host, qnn-htp-sim: not run: {reason}"]
    assert "Environments: merge base `mmmmmmmmmmmm`: could not be made" in text
    assert "head `mmmmmmmmmmmm`" not in text
    section, _ = comment_section(report, section_title="Rebuild and tests")  # the PR comment's
    assert section.count("not run: ") == 1 and "Tests × targets" not in section


@pytest.mark.slow
def test_triage_on_host_and_an_ssh_device_through_the_command_line(sshd, tmp_path):
    """A change that drops the KV cache's write-back: the device's mutable-buffer program fails
    step by step, a new failure naming the device; the matrix shows test x target."""
    repo = build_sample_repo(tmp_path / "executorch")
    head = repo.branch("no-write-back", ROOT / "tasks/probes/regressions/mutable_buffer_no_write_back.patch")
    device = sshd.device("loop-1", backends=("portable",))
    inventory = tmp_path / "devices.yaml"
    inventory.write_text(yaml.safe_dump({"devices": {"loop-1": device.model_dump(mode="json", exclude={"id"})}}))
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "etriage.cli", "triage", "--repo", str(repo.path), "--base", "main",
                           "--head", head, "--suite", "probes", "--target", "host", "--target", "ssh:loop-1",
                           "--devices", str(inventory), "--data-dir", str(tmp_path / "data"), "--format", "json",
                           "--out", str(out)], capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    device_new = [r for r in data["results"] if r["target"] == "ssh:loop-1" and r["verdict"] == "new"]
    assert [r["test"] for r in device_new] == ["mutable_buffer::kv_cache_steps_portable"]
    markdown = to_markdown(Report.from_dict(data))  # the same report, as the PR comment
    assert "| test | host | ssh:loop-1<br><sub>loop-1 (x86_64)</sub> |" in markdown
    assert "on device loop-1 (SoC x86_64" in markdown


def test_an_environment_failure_says_what_the_environment_lacks():
    """A runtime built without a backend the test needs (ExecuTorch main's own multi-method test
    on pybindings built by the pybind recipe): the entry names the lack, not only the error."""
    from tasks.pipeline import compare
    from triage_rules import classify_text

    key = ("multi_method", "host", "exir/backend/test/test_to_backend_multi_method.py::test_multi_method_end_to_end")
    heads = {key: Outcome(suite=key[0], test=key[2], target=key[1], outcome="failed",
                          message="RuntimeError: Failed to execute method forward, error: 0x20",
                          text="E       RuntimeError: Failed to execute method forward, error: 0x20\n"
                               "[method.cpp:85] Backend BackendWithCompilerDemo is not registered.\n")}
    [verdict] = compare.decide({}, heads, compare.classify_failing(heads, classify_text), {})
    assert verdict.verdict == "environment"
    report = _report()
    report.results = [verdict]
    text = to_markdown(report)
    section = text[text.index("## Environment failures"):].split("\n\n")[1]
    assert "Backend BackendWithCompilerDemo is not registered in the runtime: `" in section, section
