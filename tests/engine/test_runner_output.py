"""What real test runners print in a CI job (no tty: 80 columns), read back: one failure per test,
its test id, and the line that states it. The logs are real runs of pytest, unittest, and ctest
over googletest.

pytest (8 on) cuts its summary line to the terminal's width unless `CI` or `BUILD_NUMBER` is set:
`FAILED t.py::T::test - SpecViolationError: call_module is not va...`. A GitHub Actions step has
`CI=true`; a container it starts has it only if the job passes it in, and a developer's run has
none. Cut, the failure's line is the traceback's exception line, with the whole message; a whole
summary line stays the failure's line, as PyTorch's CI marks it (test_pytorch_logs.py). A long
test id leaves the section header one `_` a side."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from triage_rules import classify_text
from triage_rules.fingerprint import normalise

LONG = ("call_module is not valid: got a class 'fused_first_tag1' while validating the original program "
        "after the partitions of both methods became submodules")
TEST_FILE = '''
class SpecViolationError(Exception):
    pass

def _unsafe_adjust_original_program():
    raise {raised}

def {name}():
    _unsafe_adjust_original_program()
'''
SHORT_NAME = "test_two_methods"
LONG_NAME = "test_multi_method_to_backend_two_methods_different_partitioners_with_several_submodules"


def ci_env(ci: bool = False) -> dict[str, str]:
    """A job's terminal: none, so 80 columns; none of this pytest run's own settings, nor of the
    CI running this suite: `CI=true` only when asked for (a GitHub Actions step's own)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "COLUMNS")) and k not in ("CI", "BUILD_NUMBER")}
    return env | {"COLUMNS": "80"} | ({"CI": "true"} if ci else {})


def pytest_log(tmp_path, raised: str, *options: str, name: str = SHORT_NAME, ci: bool = False) -> str:
    """What `python -m pytest` prints for one failing test, as a job's log has it (no tty)."""
    (tmp_path / "test_lowering.py").write_text(TEST_FILE.format(raised=raised, name=name))
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rf", *options, "test_lowering.py"],
                         cwd=tmp_path, env=ci_env(ci), capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    return run.stdout


def summary_of(log: str) -> str:
    return next(line for line in log.splitlines() if line.startswith("FAILED "))


@pytest.mark.parametrize("raised, name, cut", [
    (f"SpecViolationError({LONG!r})", SHORT_NAME, "the message cut"),
    ("SpecViolationError('k_cache')", SHORT_NAME, "only the exception's name left"),
    (f"SpecViolationError({LONG!r})", LONG_NAME, "no message: the test id fills the line"),
])
@pytest.mark.parametrize("tb", ["long", "short"])
def test_a_cut_summary_line_gives_way_to_the_exception_line_it_cut(tmp_path, raised, name, cut, tb):
    log = pytest_log(tmp_path, raised, f"--tb={tb}", name=name)
    message = LONG if LONG in raised else "k_cache"
    summary = summary_of(log)
    assert message not in summary, cut  # the class: pytest cut it
    assert summary.endswith("...") == (name == SHORT_NAME), cut

    [failure] = classify_text(log)
    assert failure.line.startswith("E ") and failure.line.endswith(message)
    assert failure.message == message
    assert failure.exception.endswith("SpecViolationError")
    assert failure.test == f"test_lowering.py::{name}"
    assert log.splitlines()[failure.line_no - 1] == failure.line


def test_a_whole_summary_line_stays_the_failures_line(tmp_path):
    log = pytest_log(tmp_path, "KeyError('k_cache')")
    assert summary_of(log).endswith("KeyError: 'k_cache'")
    [failure] = classify_text(log)
    assert failure.line == summary_of(log)
    assert (failure.exception, failure.message) == ("KeyError", "'k_cache'")


@pytest.mark.parametrize("name", [SHORT_NAME, LONG_NAME])
def test_pytest_under_ci_leaves_the_summary_whole_and_it_stays_the_failures_line(tmp_path, name):
    log = pytest_log(tmp_path, f"SpecViolationError({LONG!r})", name=name, ci=True)
    assert summary_of(log).endswith(LONG)  # the class: CI set, pytest cuts nothing
    [failure] = classify_text(log)
    assert failure.line == summary_of(log)
    assert failure.message == LONG and failure.exception.endswith("SpecViolationError")
    assert failure.test == f"test_lowering.py::{name}"


@pytest.mark.parametrize("name", [SHORT_NAME, LONG_NAME])
def test_a_cut_summary_without_its_traceback_stays(tmp_path, name):
    log = pytest_log(tmp_path, f"SpecViolationError({LONG!r})", "--tb=no", name=name)
    [failure] = classify_text(log)
    assert failure.line == summary_of(log)
    assert failure.test == f"test_lowering.py::{name}"


UNITTEST_FILE = '''
import unittest

class TestToBackendMultiMethod(unittest.TestCase):
    def {name}(self):
        raise RuntimeError("Failed to execute method forward, error: 0x20")
'''


@pytest.mark.parametrize("name", [SHORT_NAME, LONG_NAME])
def test_unittests_header_names_the_test_once(tmp_path, name):
    """Python 3.11 on prints `ERROR: test_x (module.Class.test_x)`, before `(module.Class)`."""
    (tmp_path / "test_lowering.py").write_text(UNITTEST_FILE.format(name=name))
    run = subprocess.run([sys.executable, "-m", "unittest", "test_lowering"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and f"ERROR: {name} (" in run.stderr
    [failure] = classify_text(run.stderr)
    assert failure.test == f"test_lowering.TestToBackendMultiMethod.{name}"
    assert failure.exception == "RuntimeError"


def test_a_unittest_header_of_python_3_10_names_the_class():
    log = ("ERROR: test_two_methods (test_lowering.TestToBackendMultiMethod)\n" + "-" * 70 + "\n"
           "Traceback (most recent call last):\n  File \"test_lowering.py\", line 5, in test_two_methods\n"
           "RuntimeError: Failed to execute method forward, error: 0x20\n")
    [failure] = classify_text(log)
    assert failure.test == "test_lowering.TestToBackendMultiMethod.test_two_methods"


def pytest_section(title: str, fill: str = "_", width: int = 80) -> str:
    """pytest's separator line (TerminalWriter.sep) for a terminal of `width` columns."""
    n = max((width - len(title) - 2) // 2, 1)
    line = f"{fill * n} {title} {fill * n}"
    return line + fill if len(line) + 1 <= width else line


def pytest_summary(nodeid: str, raised: str, width: int = 80, ci: bool = False) -> str:
    """pytest's short summary line (_get_line_with_reprcrash_message) at `width` columns."""
    head, room = f"FAILED {nodeid}", width - len(f"FAILED {nodeid}") - len(" - ")
    raised = raised.splitlines()[0]
    if ci:
        return f"{head} - {raised}"
    if room < 3:
        return head
    return f"{head} - {raised if len(raised) <= room else raised[:room - 3] + '...'}"


@pytest.mark.parametrize("ci", [False, True])
def test_the_framing_below_is_pytests_own(tmp_path, ci):
    for name in (SHORT_NAME, LONG_NAME):
        log = pytest_log(tmp_path, f"SpecViolationError({LONG!r})", name=name, ci=ci)
        assert pytest_section(name) in log.splitlines()
        assert summary_of(log) == pytest_summary(f"test_lowering.py::{name}", f"test_lowering.SpecViolationError: {LONG}", ci=ci)


QNN_TEST = "TestQNNQuantizedOperator.test_qnn_backend_element_wise_add"
QNN_NODEID = "backends/qualcomm/tests/test_qnn_delegate.py::" + QNN_TEST.replace(".", "::")


def raised(record) -> str:
    """What the test raised, as pytest's summary restates it: the output's last exception line."""
    from triage_rules.linekinds import EXCEPTION_RE

    return next(line for line in reversed(record.excerpt.splitlines()) if EXCEPTION_RE.match(line))


def qnn_pytest_log(record, ci: bool) -> str:
    """A broken op builder's real HTP lowering output, as pytest frames it in test_qnn_delegate.py."""
    return "\n".join([pytest_section("FAILURES", "="), pytest_section(QNN_TEST), record.excerpt,
                      pytest_section("short test summary info", "="),
                      pytest_summary(QNN_NODEID, raised(record), ci=ci)])


@pytest.mark.parametrize("ci", [False, True])
def test_qnn_op_builder_failures_in_a_pytest_log_are_op_validation(ci):
    """Real HTP lowering output of broken QNN op builders (corpus/untrained) in a pytest log of
    test_qnn_delegate.py. Cut (no CI variable), the summary line has no room for a message: it was
    the failure's line and the rules read a test id (74 of 90). Whole (CI=true), it restated the
    generic `AssertionError: Failed to generate Qnn context binary.` that wraps the builder's own
    `[ERROR] [Qnn ExecuTorch]` lines, which state the failure when the output stands alone (74 of
    90). Framed either way, the failure is stated by the line that states it unframed."""
    from triage_rules.corpus import UNTRAINED_DIR, load_corpus

    records = [r for r in load_corpus(UNTRAINED_DIR / "qnn_simulator_of_executorch.jsonl") if r.id.startswith("gen-qnn-op")]
    assert len(records) == 90
    [record] = [r for r in records if r.id == "gen-qnn-op_add-47-16-swap_arguments-attention"]
    summary = pytest_summary(QNN_NODEID, raised(record), ci=ci)
    assert (summary == f"FAILED {QNN_NODEID}") != ci
    under_the_wrapper = 0  # whole: the builder's line states it, not the summary restating the wrapper
    for r in records:
        [alone] = classify_text(r.excerpt)
        [failure] = classify_text(qnn_pytest_log(r, ci))
        restated = pytest_summary(QNN_NODEID, alone.line, ci=True)
        assert failure.line in ((alone.line, restated) if ci else (alone.line,)), r.id
        assert failure.test == QNN_NODEID
        under_the_wrapper += ci and failure.line == alone.line
    if ci:
        assert under_the_wrapper >= 5  # 11 of 90
    found = [classify_text(qnn_pytest_log(r, ci))[0].category for r in records]
    assert found.count("qnn_op_validation") >= 80  # 83 measured, cut or whole


def test_a_collection_error_is_one_failure_not_two(tmp_path):
    """pytest's `Interrupted: 1 error during collection` counts the error it reported above."""
    (tmp_path / "test_qnn_backend_import_of_a_module_with_a_rather_long_name_for_its_test.py").write_text(
        "import executorch_module_that_is_not_built\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "."], cwd=tmp_path,
                         env=ci_env(), capture_output=True, text=True, timeout=120)
    assert "Interrupted: 1 error during collection" in run.stdout
    [failure] = classify_text(run.stdout)
    assert failure.exception == "ModuleNotFoundError" and failure.category == "import_or_env"
    assert failure.test == "test_qnn_backend_import_of_a_module_with_a_rather_long_name_for_its_test.py"


def test_collection_errors_of_two_files_are_two_failures(tmp_path):
    """A file's test id (`ERROR collecting a/test_x.py`) was keyed by its suffix: every file's
    collection error became one failure, and the second file's error was lost."""
    (tmp_path / "test_one.py").write_text("import executorch_module_that_is_not_built\n")
    (tmp_path / "test_two.py").write_text("from torch_module_that_is_not_there import export\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "."], cwd=tmp_path,
                         env=ci_env(), capture_output=True, text=True, timeout=120)
    assert "Interrupted: 2 errors during collection" in run.stdout
    found = {f.test: f.message for f in classify_text(run.stdout)}
    assert found == {"test_one.py": "No module named 'executorch_module_that_is_not_built'",
                     "test_two.py": "No module named 'torch_module_that_is_not_there'"}


# ExecuTorch's unittest job runs `pytest -n auto` with its pytest.ini's `-rEfX --tb=native
# --capture=sys`. A test that crashes the interpreter takes its pytest-xdist worker down:
# faulthandler's dump goes to the job's log at once, naming no test but in its frames, and
# xdist reports the crash later under a section named after the test's *file*.
XDIST_TESTS = '''
import ctypes

class TestToBackendMultiMethod:
    def test_multi_method_partitions(self):
        raise RuntimeError("Expected 2 partitions in method 'forward', got 1")

def test_runtime_reads_a_freed_buffer():
    ctypes.string_at(0)

def test_buffer_mutation():
    buffers_to_mutate = {}
    assert "k_cache" in buffers_to_mutate, "buffers_to_mutate lost k_cache after quantization"
'''


FAULT = "Fatal Python error: Segmentation fault"


def crashing_run(command: list[str], cwd: Path, ci: bool, attempts: int = 3) -> str:
    """A pytest run whose test segfaults, as one stream (a job's log: faulthandler's dump before
    the summary or after it). Under a loaded CI, once in many runs a crashed xdist worker left no
    dump (CI at 9d388c2); the log without it is tested on its own
    (test_a_crash_log_without_faulthandlers_dump_is_the_same_failure). These tests are about
    the dump, so they run again for it, a bounded number of times."""
    for _ in range(attempts):
        log = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *command], cwd=cwd,
                             env=ci_env(ci), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=180).stdout
        if FAULT in log:
            return log
    raise AssertionError(f"no faulthandler dump in {attempts} runs:\n{log}")


def xdist_log(tmp_path, *options: str, ci: bool) -> str:
    (tmp_path / "test_lowering.py").write_text(XDIST_TESTS)
    return crashing_run(["-rEfX", "--tb=native", "--capture=sys", *options, "test_lowering.py"], tmp_path, ci)


CRASHED = "test_lowering.py::test_runtime_reads_a_freed_buffer"


def test_a_crashed_xdist_worker_is_its_tests_crash_once_never_excused(tmp_path):
    """Before: the crash was three failures (faulthandler's `Fatal Python error` with no test,
    the file's section, and the summary line), and the summary line, read with its neighbours
    in pytest's summary (the next test's `buffers_to_mutate lost k_cache`), was `mutable_buffer`;
    so was every test's line beside it."""
    by_mode = {}
    for ci in (False, True):
        (tmp_path / str(ci)).mkdir()
        log = xdist_log(tmp_path / str(ci), "-n", "2", ci=ci)
        assert f"crashed while running '{CRASHED}'" in log, log
        found = {f.test: f for f in classify_text(log, failed=True)}
        assert {t: (f.category, f.rule, f.environment) for t, f in found.items()} == {
            CRASHED: ("runtime_error", "runtime-crash", False),
            "test_lowering.py::TestToBackendMultiMethod::test_multi_method_partitions": (
                "multi_method_lowering", "mm-test-failed", False),
            "test_lowering.py::test_buffer_mutation": ("mutable_buffer", "mb-mutation-lost", False)}, ci
        by_mode[ci] = found[CRASHED]
    # whichever worker crashed (`gw0`, `gw1`) and whether pytest cut the line: the same failure
    assert by_mode[False].fingerprint == by_mode[True].fingerprint
    assert "crashed while running" in by_mode[False].line
    assert normalise(by_mode[False].message) == normalise(by_mode[True].message) == (
        f"worker 'gw<n>' crashed while running '{CRASHED}'")


def without_the_dump(log: str) -> str:
    """The log as a crashed worker leaves it without faulthandler (its dump lost, or a worker
    killed by SIGKILL): from `Fatal Python error` to the dump's last line (`Extension modules`, or
    the last frame) taken out."""
    lines = log.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith(FAULT))
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end].startswith(("Thread ", "Current thread ", "  File ",
                                                                                "Extension modules"))):
        end += 1
    return "".join(lines[:start] + lines[end:])


def test_a_crash_log_without_faulthandlers_dump_is_the_same_failure(tmp_path):
    """Once in many loaded runs a crashed xdist worker's dump never reached the log: the crash
    is then only xdist's `crashed while running`, and it is the same failure, no fewer, no more."""
    log = xdist_log(tmp_path, "-n", "2", ci=True)
    bare = without_the_dump(log)
    assert FAULT not in bare and "string_at" not in bare and f"crashed while running '{CRASHED}'" in bare, bare
    assert verdicts(bare) == verdicts(log)
    assert (CRASHED, "runtime_error", "runtime-crash") in [entry[:3] for entry in verdicts(bare)]


def verdicts(log: str) -> list[tuple]:
    return sorted((f.test, f.category, f.rule, f.environment, f.fingerprint) for f in classify_text(log, failed=True))


def test_a_summary_lines_context_is_its_own_not_the_neighbours_message(tmp_path):
    """pytest's summary lists each failed test on one line, and a multi-line message goes on
    below it (`assert 'k_cache' in {}`): read as the next test's context, that made a crash
    `mutable_buffer` whenever xdist reported it just after test_buffer_mutation."""
    crash, mutation = XDIST_TESTS.split("def test_runtime_reads_a_freed_buffer")[1], XDIST_TESTS.split("def test_buffer_mutation")[1]
    (tmp_path / "test_lowering.py").write_text(
        f"def test_buffer_mutation{mutation}\ndef test_runtime_reads_a_freed_buffer{crash.split('def ')[0]}"
        .replace("ctypes.string_at(0)", 'raise OSError("lost")'))
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rEfX", "--tb=native",
                          "test_lowering.py"], cwd=tmp_path, env=ci_env(ci=True), capture_output=True, text=True, timeout=120)
    summary = run.stdout[run.stdout.index("short test summary info"):].splitlines()
    assert summary[1:4] == [
        "FAILED test_lowering.py::test_buffer_mutation - AssertionError: buffers_to_mutate lost k_cache after quantization",
        "assert 'k_cache' in {}", "FAILED test_lowering.py::test_runtime_reads_a_freed_buffer - OSError: lost"], summary
    found = {f.test.rsplit("::", 1)[-1]: f for f in classify_text(run.stdout)}
    assert found["test_runtime_reads_a_freed_buffer"].line.startswith("FAILED")
    for name, failure in found.items():
        others = [line for line in failure.context if line.startswith("FAILED") and name not in line]
        assert not others, (name, failure.context)
    assert not any("k_cache" in line for line in found["test_runtime_reads_a_freed_buffer"].context)


def test_a_parametrised_tests_crash_is_one_failure(tmp_path):
    """faulthandler's frame names the function (`test_runtime_reads`), xdist the test with its
    parameters (`test_runtime_reads[fp16]`): one crash, not two entries."""
    (tmp_path / "test_param.py").write_text(
        "import ctypes\nimport pytest\n\n@pytest.mark.parametrize('dtype', ['int8', 'fp16'])\n"
        "def test_runtime_reads(dtype):\n    if dtype == 'fp16':\n        ctypes.string_at(0)\n")
    log = crashing_run(["-n", "2", "test_param.py"], tmp_path, ci=True)
    assert "crashed while running" in log, log
    [crash] = classify_text(log, failed=True)
    assert (crash.test, crash.category, crash.rule) == ("test_param.py::test_runtime_reads[fp16]", "runtime_error",
                                                        "runtime-crash")


def test_a_crash_without_xdist_is_the_test_faulthandler_names(tmp_path):
    """A plain `pytest` dies with the interpreter: no summary, no test id but in faulthandler's
    frames (`File ".../test_lowering.py", line 9 in test_...`)."""
    log = xdist_log(tmp_path, ci=True)
    assert FAULT in log and "short test summary" not in log, log
    [crash] = classify_text(log, failed=True)
    assert (crash.test, crash.category, crash.environment) == (CRASHED, "runtime_error", False)
    assert crash.line.endswith(FAULT)


MULTI_METHOD_TESTS = (
    "import ctypes\n\n"
    "class TestToBackendMultiMethod:\n"
    "    def test_multi_method_end_to_end(self):\n"
    "        ctypes.string_at(0)\n\n"
    "    def test_multi_method_partitions(self):\n"
    "        raise RuntimeError(\"Expected 2 partitions in method 'forward', got 1\")\n")


@pytest.mark.parametrize("xdist", [False, True])
def test_a_crash_in_a_multi_method_test_is_a_runtime_error_and_its_neighbour_keeps_the_area(tmp_path, xdist):
    """Issue 21: a crash is `runtime_error`, whatever test it crashed in. The test's area
    (`test_to_backend_multi_method.py`) still names a failure whose own line is no crash."""
    (tmp_path / "test_to_backend_multi_method.py").write_text(MULTI_METHOD_TESTS)
    log = crashing_run(["-rEfX", "--tb=native", *(["-n", "2"] if xdist else []), "test_to_backend_multi_method.py"],
                       tmp_path, ci=True)
    found = {f.test.rsplit("::", 1)[-1]: f for f in classify_text(log, failed=True)}
    crash = found["test_multi_method_end_to_end"]
    assert (crash.category, crash.rule, crash.environment) == ("runtime_error", "runtime-crash", False)
    if xdist:  # a plain pytest died with the interpreter before the next test ran
        partitions = found["test_multi_method_partitions"]
        assert (partitions.category, partitions.rule) == ("multi_method_lowering", "mm-test-failed")
    assert len(found) == 1 + xdist, list(found)


@pytest.mark.parametrize("runner, quiet", [("pytest", []), ("pytest", ["-q"]), ("unittest", [])])
def test_a_log_holding_only_the_runners_count_has_its_error_elsewhere(tmp_path, runner, quiet):
    """The tests' reports went elsewhere (a sub-job, an artifact, a cut log): the count says no
    failure, so the verdict is "the real error is not in this log", never a category guessed
    from the words `failed` and `passed`."""
    (tmp_path / "test_lowering.py").write_text(UNITTEST_FILE.format(name=SHORT_NAME))
    command = ["-m", "pytest", "-p", "no:cacheprovider", *quiet, "test_lowering.py"] if runner == "pytest" else [
        "-m", "unittest", "test_lowering"]
    run = subprocess.run([sys.executable, *command], cwd=tmp_path, env=ci_env(),
                         capture_output=True, text=True, timeout=120)
    count = (run.stdout + run.stderr).strip().splitlines()[-1]
    assert "1 failed in " in count or count == "FAILED (errors=1)", count
    [failure] = classify_text(f"+ python {' '.join(command)}\n{count}\n", failed=True)
    assert (failure.rule, failure.category, failure.error_not_in_log) == ("test-count-only", "other", True)


CTEST_PROJECT = '''cmake_minimum_required(VERSION 3.16)
project(runner_output {languages})
enable_testing()
{body}
'''
CRASHES = '''
add_test(NAME op_add_test COMMAND sh -c "exit 1")
add_test(NAME op_sub_test COMMAND sh -c "exit 0")
add_test(NAME op_mul_test COMMAND sh -c "kill -SEGV $$")
add_test(NAME op_div_test COMMAND sh -c "kill -ABRT $$")
add_test(NAME op_hang_test COMMAND sleep 30)
set_tests_properties(op_hang_test PROPERTIES TIMEOUT 1)
# ten tests and more: ctest pads its counters (` 3/11 Test  #3: ...`)
foreach(i RANGE 1 6)
  add_test(NAME op_pass_${i}_test COMMAND sh -c "exit 0")
endforeach()
'''
GTESTS = '''
find_package(GTest REQUIRED)
add_executable(op_add_test op_add_test.cpp)
target_link_libraries(op_add_test GTest::gtest_main)
add_test(NAME op_add_test COMMAND op_add_test)
add_executable(method_test method_test.cpp)
target_link_libraries(method_test GTest::gtest_main)
add_test(NAME method_test COMMAND method_test)
add_executable(exit_test exit_test.cpp)
target_link_libraries(exit_test GTest::gtest_main)
add_test(NAME exit_test COMMAND exit_test)
add_test(NAME export_script_test COMMAND sh -c "echo comparing the exported program; exit 1")
'''


def ctest_log(tmp_path, body: str, languages: str = "NONE", verbose: bool = False, **sources: str) -> str:
    """What `ctest --output-on-failure` prints for a real CMake project (ExecuTorch's C++ tests run
    so); or `ctest -V`: each test's output before its verdict, each line after the test's number."""
    (tmp_path / "CMakeLists.txt").write_text(CTEST_PROJECT.format(languages=languages, body=body))
    for name, text in sources.items():
        (tmp_path / name.replace("_cpp", ".cpp")).write_text(text)
    subprocess.run(["cmake", "-S", ".", "-B", "build"], cwd=tmp_path, check=True, capture_output=True, timeout=300)
    subprocess.run(["cmake", "--build", "build"], cwd=tmp_path, check=True, capture_output=True, timeout=300)
    run = subprocess.run(["ctest", "-V" if verbose else "--output-on-failure"], cwd=tmp_path / "build",
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "The following tests FAILED:" in run.stdout, run.stdout + run.stderr
    return run.stdout


@pytest.mark.skipif(not shutil.which("ctest"), reason="needs cmake's ctest (scripts/system-deps.sh)")
@pytest.mark.parametrize("verbose", [False, True])
def test_ctests_crashes_and_time_outs_are_the_tests_never_excused(tmp_path, verbose):
    """A crash is `runtime_error` and judged against the base; a test's own time limit too. A
    test that failed without output is kept beside them, as its error not in the log (before:
    it was left out, and ctest's 4 failed tests were 3 failures), and the neighbouring test's
    crash in ctest's list is not its reading."""
    log = ctest_log(tmp_path, CRASHES, verbose=verbose)
    found = {f.test: f for f in classify_text(log, failed=True)}
    assert sorted(found) == ["op_add_test", "op_div_test", "op_hang_test", "op_mul_test"], [
        (f.test, f.line) for f in found.values()]
    assert {t: (f.category, f.rule, f.environment, f.error_not_in_log) for t, f in found.items()} == {
        "op_add_test": ("other", "test-count-only", False, True),
        "op_mul_test": ("runtime_error", "runtime-crash", False, False),
        "op_div_test": ("runtime_error", "runtime-crash", False, False),
        "op_hang_test": ("runtime_error", "test-time-limit", False, False)}
    (tmp_path / "silent").mkdir()
    [only] = classify_text(ctest_log(tmp_path / "silent", 'add_test(NAME op_add_test COMMAND sh -c "exit 1")',
                                     verbose=verbose), failed=True)
    assert (only.test, only.rule, only.category, only.error_not_in_log) == ("op_add_test", "test-count-only", "other", True)


@pytest.mark.skipif(not (shutil.which("ctest") and shutil.which("g++") and Path("/usr/include/gtest/gtest.h").exists()),
                    reason="needs cmake, g++ and googletest (scripts/system-deps.sh)")
@pytest.mark.parametrize("verbose", [False, True])
def test_googletests_failure_is_its_own_test_once_and_a_crash_is_kept(tmp_path, verbose):
    """With `-V` every output line starts with the test's number (`1: [ RUN      ] X.Y`): the
    assertion was not read, and op_add_test's failure was lost beside method_test's crash. A
    crash is the googletest test that started and never finished (before: ctest's name for the
    whole binary, `method_test`); a crash after every test finished (`[==========] 1 test from
    1 test suite ran.`), in a static destructor, is the binary's. A test whose output holds no
    failure is kept, its error not in the log; a binary whose output holds googletest's failure
    is that test's failure, not a second one."""
    log = ctest_log(tmp_path, GTESTS, "CXX", verbose=verbose,
                    op_add_test_cpp='#include <gtest/gtest.h>\nTEST(OpAddOutTest, BroadcastSupported) { EXPECT_EQ(1 + 1, 3); }\n'
                                    'TEST(OpAddOutTest, Passes) { EXPECT_EQ(2, 2); }\n',
                    method_test_cpp='#include <gtest/gtest.h>\nTEST(MethodTest, LoadsOneMethod) { EXPECT_EQ(1, 1); }\n'
                                    'TEST(MethodTest, TwoMethods) { volatile int* p = nullptr; *p = 1; }\n'
                                    'TEST(MethodTest, NeverRuns) { EXPECT_EQ(1, 1); }\n',
                    exit_test_cpp='#include <cstdlib>\n#include <gtest/gtest.h>\n'
                                  'struct AtExit { ~AtExit() { std::abort(); } } at_exit;\n'
                                  'TEST(ExitTest, Passes) { EXPECT_EQ(1, 1); }\n')
    failures = classify_text(log, failed=True)
    assert [(f.test, f.rule) for f in failures] == [("OpAddOutTest.BroadcastSupported", "gtest-assertion"),
                                                    ("MethodTest.TwoMethods", "runtime-crash"),
                                                    ("exit_test", "runtime-crash"),
                                                    ("export_script_test", "test-count-only")], [(f.test, f.line) for f in failures]
    assert failures[0].line.endswith("op_add_test.cpp:2: Failure")
    assert all(f.category == "runtime_error" and not f.environment for f in failures[1:3])
    assert failures[3].error_not_in_log and not failures[3].environment
    assert "method_test" in failures[1].line and "exit_test" in failures[2].line
