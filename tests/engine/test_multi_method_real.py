"""A multi-method SpecViolationError raised through to_backend is `multi_method_lowering`, in a
CI log and in the bot's own run, and the tests that show it are one root cause (issue 21).

The failures are real: ExecuTorch 1.4.1's own test_to_backend_multi_method.py, run with pytest on
the installed package with a regression patch over it (multi-method to_backend replaces only the
first method's fused submodules), see fixtures/executorch/README.md."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.pipeline import compare
from tasks.records import TestResult as Outcome
from triage_rules import classify_text
from triage_rules.engine import classify_text as read_only

FIXTURE = Path(__file__).parent / "fixtures" / "executorch" / "to_backend_multi_method_first_method_only_replaced.json"
FAILED = json.loads(FIXTURE.read_text())
JOB = "pull / unittest-editable / linux / linux-job"


def ci_log(test: str, failed: dict) -> str:
    """The test's report as pytest prints it in a CI job: section header, traceback, summary."""
    name = test.rsplit("::", 1)[-1]
    return (f"{'_' * 20} TestToBackendMultiMethod.{name} {'_' * 20}\n{failed['text']}\n"
            f"{'=' * 20} short test summary info {'=' * 20}\nFAILED {test} - {failed['message'][:90]}...\n")


def test_the_fixture_is_the_class_of_failure():
    messages = {f["message"] for f in FAILED.values()}
    assert len(FAILED) == 5 and len(messages) == 4  # four fused submodules named, one failure
    assert all(m.startswith("torch._export.verifier.SpecViolationError: call_module is not valid: got a class 'fused_")
               for m in messages)


def test_pytests_short_traceback_gives_the_frames():
    [found] = read_only(ci_log(*next(iter(FAILED.items()))), failed=True, use_model=False)
    assert [(f.file.rsplit("/", 1)[-1], f.function) for f in found.frames][-4:] == [
        ("backend_api.py", "_"), ("exported_program.py", "_validate"), ("verifier.py", "check"),
        ("verifier.py", "_check_graph_module")]


@pytest.mark.parametrize("test", sorted(FAILED))
def test_in_a_ci_log_it_is_multi_method_lowering(test):
    [failure] = classify_text(ci_log(test, FAILED[test]), job_name=JOB, failed=True)
    assert failure.exception.endswith("SpecViolationError")
    # the summary line cut the message; the failure's line is the traceback's, whole
    assert f"{failure.exception}: {failure.message}" == FAILED[test]["message"]
    assert failure.line.startswith("E ") and failure.line.endswith(failure.message)
    assert (failure.category, failure.unsure) == ("multi_method_lowering", [])
    assert any(reason.startswith("structure points to multi_method_lowering") for reason in failure.decision)


def test_without_the_tests_name_the_structure_still_decides():
    """A log cut to the traceback (no section header, no summary line): the frames and the
    objects named decide, not the test's area."""
    text = FAILED["exir/backend/test/test_to_backend_multi_method.py::TestToBackendMultiMethod::"
                  "test_multi_method_to_backend_two_methods"]["text"]
    text = "\n".join(line for line in text.splitlines() if "test_to_backend_multi_method" not in line) + "\n"
    [failure] = classify_text(text, job_name=JOB, failed=True)
    # the verifier's own words for a fused partition (the multi-method rule), the frames or the model
    assert failure.category == "multi_method_lowering"
    assert failure.decided_by in ("mm-original-program-validate", "structure", "model")
    assert not any("guards" in reason for reason in failure.decision)


def test_in_the_bots_own_run_it_is_one_new_multi_method_failure_in_five_tests():
    heads = {("selected", "host", test): Outcome(suite="selected", test=test, target="host", outcome="failed",
                                                 message=f["message"], text=f["text"]) for test, f in FAILED.items()}
    base = {key: Outcome(suite="selected", test=key[2], target="host", outcome="passed") for key in heads}
    verdicts = compare.decide(base, heads, compare.classify_failing(heads, classify_text), {})
    assert {(v.verdict, v.category) for v in verdicts} == {("new", "multi_method_lowering")}
    assert len({v.root for v in verdicts}) == 1 and compare.tally(verdicts)["new"] == 1
    assert compare.spread(verdicts) == "in 5 tests"
