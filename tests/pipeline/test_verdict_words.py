"""What the change can cause, it is not excused from (issue 21, item 3): real crash lines are
`runtime_error` judged against the merge base, a job log holding only a wrapper's exit line is
`not_in_log` with a link to the job, a `new` verdict never excuses the change and an
environment verdict never calls itself new. Real lines from ../shared (seeds, PyTorch's CI
logs) and the corpus; the real engine classifies them, the one verdict engine judges them."""
from __future__ import annotations

import re

import pytest

from tasks.pipeline import compare
from tasks.records import CiReport
from tasks.records import TestResult as Outcome
from tasks.summary import render_ci_section
from triage_rules import classify_text
from triage_rules.engine import classify_text as engine_classify
from triage_rules.linekinds import raised
from triage_rules.decide import decide
from triage_rules.scorer import Opinion
from triage_rules.records import CATEGORIES

EXCUSE = re.compile(r"(?i)not (?:caused by )?(?:the|this) change|not the change|re-?run the job")
JOB = {"name": "pull / unittest / linux", "id": 7, "html_url": "https://github.com/pytorch/executorch/actions/runs/1/job/7"}

CRASHES = [
    # ../shared/fixtures/logs/pytorch-log-classifier/test_file_signal_crash.txt (the marked line)
    "2026-07-31T06:28:05.2272960Z nn/test_pruning 1/1 failed! Received signal: SIGBUS",
    # corpus records (train/eval), verbatim failure lines
    "Fatal Python error: Segmentation fault",
    "F/libc    (25506): Fatal signal 11 (SIGSEGV), code 1 (SEGV_MAPERR), fault addr 0x0 in tid 25731 (DefaultDispatch), pid 2",
    "==1175261==ERROR: AddressSanitizer: SEGV on unknown address 0x000000000000 (pc 0x00000e58cd54 bp 0x7fffffffb0f0 sp 0x7ff",
    "fish: Job 1, 'python' terminated by signal SIGSEGV (Address boundary error)",
    "Segmentation fault (core dumped)",
    "Fatal Python error: Aborted",
]
WRAPPERS = [
    # ../shared/seeds/000_da6ab458f76718fd.txt: 8 of the 12 "new failures"
    "RuntimeError: Command docker exec -t 8b9261964e6f35861f8c195a8c3f83b070b36637827e0e5d9292fb3031573168 /exec failed with exit code 1",
    "##[error]Process completed with exit code 1.",
]


def ci(line: str, base: set[str] | None = None):
    found = [(JOB, f) for f in classify_text(line + "\n", job_name=JOB["name"], failed=True)]
    return compare.decide_ci(found, base or set())


@pytest.mark.parametrize("line", CRASHES)
def test_a_crash_is_a_runtime_error_judged_against_the_base_and_never_excused(line):
    [verdict] = ci(line)
    failure = verdict.failure
    assert failure.rule == "runtime-crash" and failure.category == "runtime_error"
    assert not failure.environment and verdict.verdict == "new"
    assert not EXCUSE.search(failure.explanation + failure.suggestion)
    [at_base] = ci(line, base={failure.fingerprint})  # the merge base crashed the same way
    assert at_base.verdict == "pre_existing"


@pytest.mark.parametrize("line", CRASHES[:3])
def test_a_crash_is_never_relabelled_into_the_environment_by_a_confident_model(line):
    [failure] = engine_classify(line + "\n", use_model=False)
    rest = 0.02 / (len(CATEGORIES) - 1)
    decide(failure, Opinion({c: 0.98 if c == "ci_infra" else rest for c in CATEGORIES}, ()))
    assert failure.category == "runtime_error" and not failure.environment


@pytest.mark.parametrize("line", WRAPPERS)
def test_a_log_with_only_a_wrapper_line_is_not_in_log_with_a_link_to_the_job(line):
    [verdict] = ci(line)
    assert verdict.verdict == "not_in_log" and verdict.category != "ci_infra"
    assert verdict.link == JOB["html_url"]
    section = render_ci_section(CiReport(head="a" * 40, merge_base="b" * 40, merge_base_exact=True,
                                         jobs=[JOB["name"]], results=[verdict]))
    assert f"[open the job]({JOB['html_url']})" in section
    assert "**new**" not in section and not EXCUSE.search(section)


def test_a_wrapper_line_beside_the_real_error_leaves_the_real_error_to_speak():
    log = ("FAILED exir/backend/test/test_to_backend_multi_method.py::TestToBackendMultiMethod::test_two - "
           "RuntimeError: partitioner map routed wrongly\n" + WRAPPERS[0] + "\n")
    verdicts = ci(log)
    assert verdicts and all(v.verdict == "new" for v in verdicts)


SECTION_LOG = """=================================== FAILURES ===================================
_____ TestToBackendMultiMethod.test_multi_method_to_backend_two_methods ______

    def test_multi_method_to_backend_two_methods(self):
>       lowered = to_backend(MethodProgramsPartitionerSpec(edge_programs, partitioners))

exir/backend/test/test_to_backend_multi_method.py:212:
exir/backend/utils.py:455: in _unsafe_adjust_original_program
    original_program._validate()
E   torch._export.verifier.SpecViolationError: call_module is not valid: got a class 'fused_first_tag1'

exir/verification/verifier.py:139: SpecViolationError
"""


def test_a_pytest_log_without_its_summary_line_shows_what_the_test_raised_beside_its_header():
    """Dr. CI's classifier (and the engine) read such a log at the test's section header, which
    names the test but not the error: the entry shows what it raised too."""
    [verdict] = ci(SECTION_LOG)
    assert verdict.failure.line.startswith("_____ TestToBackendMultiMethod")
    section = render_ci_section(CiReport(head="a" * 40, merge_base="b" * 40, merge_base_exact=True,
                                         jobs=[JOB["name"]], results=[verdict]))
    assert ("  raised `torch._export.verifier.SpecViolationError: call_module is not valid: got a class "
            "'fused_first_tag1'`") in section
    # a summary line says it itself: nothing more is shown
    [summary] = ci("FAILED exir/backend/test/test_x.py::T::test_a - AssertionError: 3 != 4\n")
    assert raised(summary.failure) == ""
    assert "raised" not in render_ci_section(CiReport(head="a" * 40, merge_base="b" * 40, merge_base_exact=True,
                                                      jobs=[JOB["name"]], results=[summary]))


@pytest.mark.parametrize("line, said", [
    ("____ test_x ____", "ValueError: bad `x`"),
    ("FAIL: test_two (exir.tests.T)", "ValueError: bad `x`"),
    ("ValueError: bad `x`", ""),  # the line says it
])
def test_what_a_failure_raised_is_shown_only_beside_a_section_header(line, said):
    from triage_rules.records import Failure
    failure = Failure(line=line, line_no=1, exception="ValueError", message="bad\n`x`")
    assert raised(failure) == said
    assert raised(Failure(line=line, line_no=1, message="bad")) == ""  # nothing raised is known


def test_a_new_verdict_never_carries_the_environment_categorys_excuse():
    # a model that leans to ci_infra, not surely enough to blame the environment (decide.ENVIRONMENT_FLOOR)
    [failure] = engine_classify("ValueError: bad cache index\n", use_model=False)
    rest = 0.5 / (len(CATEGORIES) - 1)
    decide(failure, Opinion({c: 0.5 if c == "ci_infra" else rest for c in CATEGORIES}, ()))
    assert failure.category == "ci_infra" and not failure.environment and EXCUSE.search(failure.explanation)
    [verdict] = compare.decide_ci([(JOB, failure)], set())
    assert verdict.verdict == "new"
    assert not EXCUSE.search(verdict.failure.explanation + verdict.failure.suggestion)
    assert EXCUSE.search(failure.explanation)  # the engine's record itself is left as it was


def test_an_environment_verdict_never_says_new():
    line = "##[error]The runner has received a shutdown signal. This can happen when the runner service is stopped"
    [verdict] = ci(line)
    assert verdict.verdict == "environment"
    section = render_ci_section(CiReport(head="a" * 40, merge_base="b" * 40, merge_base_exact=True,
                                         jobs=[JOB["name"]], results=[verdict]))
    assert "**new**" not in section and "caused by this change" not in section


@pytest.mark.parametrize("base_outcome, expected", [("passed", "new"), ("failed", "pre_existing")])
def test_the_bot_s_own_run_judges_a_crash_against_the_base_too(base_outcome, expected):
    key = ("selected", "host", "nn/test_pruning.py::test_prune")
    heads = {key: Outcome(suite=key[0], test=key[2], target=key[1], outcome="failed", message=CRASHES[1],
                          text="Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f (most recent call first):\n")}
    base = {key: Outcome(suite=key[0], test=key[2], target=key[1], outcome=base_outcome)}
    [verdict] = compare.decide(base, heads, compare.classify_failing(heads, classify_text), {})
    assert (verdict.verdict, verdict.category) == (expected, "runtime_error")
    assert not EXCUSE.search(verdict.failure.explanation + verdict.failure.suggestion)


# The tail of a real crashed suite: the QNN delegate tests on ExecuTorch main (cff6f4dd32) in an
# environment built without the QNN Python adaptors; pytest stopped in its conftest.
QNN_CONFTEST = """\
INTERNALERROR>   File "/tmp/qnn-delegate-tests-lt5lwlty/conftest.py", line 55, in pytest_configure
INTERNALERROR>     from test_qnn_delegate import (
INTERNALERROR>   File "/tmp/qnn-delegate-tests-lt5lwlty/test_qnn_delegate.py", line 22, in <module>
INTERNALERROR>     from executorch.backends.qualcomm._passes.qnn_pass_manager import (
INTERNALERROR>   File "executorch/backends/qualcomm/builders/node_visitor.py", line 9, in <module>
INTERNALERROR>     import executorch.backends.qualcomm.python.PyQnnManagerAdaptor as PyQnnManager
INTERNALERROR> ModuleNotFoundError: No module named 'executorch.backends.qualcomm.python'
"""


@pytest.mark.parametrize("log, reason, line, category", [
    (QNN_CONFTEST, "no JUnit results (exit code 3)",
     "INTERNALERROR> ModuleNotFoundError: No module named 'executorch.backends.qualcomm.python'", "qnn_sdk_or_toolchain"),
    ("HOSTILE sleep started\n", "no JUnit results (killed: the sandbox's wall-clock limit (15 s))",
     "etriage: suite qnn on qnn-htp-sim: no JUnit results (killed: the sandbox's wall-clock limit (15 s))", None),
], ids=["real-error-in-log", "nothing-better"])
def test_a_crashed_suite_speaks_with_its_logs_error_line_not_the_missing_results(log, reason, line, category):
    """"no JUnit results (exit code 3)" is what etriage saw, not what went wrong: the log's own
    error line is the primary line when it has one; the crash's reason when it has nothing."""
    suite = compare.SuiteResult("qnn", "qnn-htp-sim", "h" * 40, "crashed", reason=reason, log_excerpt=log)
    heads = compare.index([suite])
    [verdict] = compare.decide({}, heads, compare.classify_failing(heads, classify_text), {})
    assert verdict.primary_line.strip() == line
    assert category is None or verdict.category == category


# What pytest's JUnit holds for one failing test (junit_logging=all): the traceback, then the
# captured sections. Shaped as ExecuTorch main's test_create_mutable_buffer failed on a regression.
PYTEST_FAILURE = """\
    def test_create_mutable_buffer_renamed_name(self):
        ep = self._export()
        create_mutable_buffer(ep, "0_cache", torch.zeros(2))
        signature = ep.graph_signature
>       assert "_0_cache" in signature.buffers_to_mutate.values()
E       AssertionError: assert '_0_cache' in mappingproxy({'0_cache': '_0_cache'})

backends/transforms/test/test_create_mutable_buffer.py:212: AssertionError
--------------------------------- Captured Log ---------------------------------
DEBUG    torch.__trace:structured.py:28
--------------------------------- Captured Err ---------------------------------

"""


def test_a_failed_tests_excerpt_is_its_traceback_not_the_last_captured_section():
    key = ("mutable_buffer", "host",
           "backends/transforms/test/test_create_mutable_buffer.py::TestMutableBufferCreation::test_create_mutable_buffer_renamed_name")
    heads = {key: Outcome(suite=key[0], test=key[2], target=key[1], outcome="failed",
                          message="AssertionError: assert '_0_cache' in mappingproxy({'0_cache': '_0_cache'})",
                          text=PYTEST_FAILURE)}
    [verdict] = compare.decide({}, heads, compare.classify_failing(heads, classify_text), {})
    assert verdict.primary_line.startswith("FAILED backends/transforms/test/test_create_mutable_buffer.py")
    assert ">       assert \"_0_cache\" in signature.buffers_to_mutate.values()" in verdict.log_excerpt
    assert "E       AssertionError: assert '_0_cache'" in verdict.log_excerpt
    assert "Captured Err" not in verdict.log_excerpt


SPEC_VIOLATION = ("E   torch._export.verifier.SpecViolationError: call_module is not valid: got a class 'fused_first_tag1'\n"
                  "/torch/_export/verifier.py:286: SpecViolationError\n")
NOT_REGISTERED = ("E       RuntimeError: Failed to execute method forward, error: 0x20\n"
                  "[method.cpp:85] Backend BackendWithCompilerDemo is not registered.\n")


@pytest.mark.parametrize("head_text, base_text, expected", [
    # ExecuTorch main's test_multi_method_end_to_end on a multi-method regression: at head the
    # change's SpecViolationError, at the merge base a backend the built runtime lacks
    (SPEC_VIOLATION, NOT_REGISTERED, "new"),
    (SPEC_VIOLATION, SPEC_VIOLATION.replace("fused_first_tag1", "fused_first_tag2"), "pre_existing"),  # alike
    (SPEC_VIOLATION, "", "pre_existing"),  # the merge base's output unknown (cached without text): alike
], ids=["otherwise", "alike", "unknown"])
def test_a_test_failing_at_both_sides_is_pre_existing_only_for_the_same_root(head_text, base_text, expected):
    key = ("multi_method", "host", "exir/backend/test/test_to_backend_multi_method.py::T::test_multi_method_end_to_end")
    heads = {key: Outcome(suite=key[0], test=key[2], target=key[1], outcome="failed",
                          message=head_text.splitlines()[0].split("   ", 1)[-1].strip(), text=head_text)}
    base = {key: Outcome(suite=key[0], test=key[2], target=key[1], outcome="failed",
                         message=(base_text.splitlines() or [""])[0].split("   ", 1)[-1].strip(), text=base_text)}
    failures = compare.classify_failing(heads, classify_text)
    base_failures = compare.classify_failing(base, classify_text) if base_text else {}
    assert (key in compare.retry_candidates(base, heads, failures, base_failures)) == (expected == "new")
    [verdict] = compare.decide(base, heads, failures, {}, base_failures=base_failures)
    assert (verdict.verdict, verdict.category) == (expected, "multi_method_lowering")
    assert ("At the merge base this test fails too, of another cause" in verdict.failure.explanation) == (expected == "new")
