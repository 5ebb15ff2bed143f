"""Line kinds: real lines from the fixtures, the kind and score band they land in."""
from __future__ import annotations

import pytest

from triage_rules.linekinds import classify_line
from triage_rules.readers import clean_line


@pytest.mark.parametrize(
    "raw,kind,low,high",
    [
        ("2026-07-30T10:55:18.2486986Z FAILED [310.0221s] a/test_x.py::T::test_y - RuntimeError: boom", "pytest_summary", 85, 85),
        ("##[error]Process completed with exit code 1.", "gha_exit", 1, 20),
        ("RuntimeError: Command docker exec -t 8b92 /exec failed with exit code 1", "wrapper", 1, 20),
        ("[ERROR] [Qnn ExecuTorch]: Cannot Open QNN library libQnnHtp.so, with error: x", "qnn_error", 80, 80),
        ("E 00:00:47.286136 executorch:QnnManager.cpp:273] Fail to load Qnn library", "et_log", 80, 80),
        ("E       RuntimeError: Failed to execute method forward, error: 0x20", "et_execute", 78, 78),
        ("\x1b[1m>>>\x1b[0m Lint for \x1b[4mexir/x.py\x1b[0m:", "lint_path", 78, 78),
        ("  \x1b[41m\x1b[1mError\x1b[0m (FLAKE8) \x1b[4mF401\x1b[0m", "lint_error", 75, 75),
        ("src/a.cpp:128:26: error: no matching function for call", "compiler_error", 70, 70),
        ("CMake Error at CMakeLists.txt:12 (message):", "cmake_error", 68, 68),
        ("FAILED: [code=1] caffe2/x.cpp.o ", "ninja_failed", 50, 50),
        ("AttributeError: module 'torch._C' has no attribute 'x'", "exception", 55, 55),
        ("SyntaxError: invalid decimal literal", "exception", 72, 72),
        ("  File \"/x.py\", line 3, in f", None, 0, 0),
        ("test_x.py::T::test_error_message PASSED [0.1s] [ 4%]", None, 0, 0),
        ("+ echo 'Build left local git repository checkout dirty'", None, 0, 0),
        ("Failed to parse and upload json test reports: An error occurred (AccessDenied)", None, 0, 0),
        ("##[group]Run python -m pytest", None, 0, 0),
        ("________ TestToBackendMultiMethod.test_multi_method_end_to_end ________", "pytest_section", 75, 75),
    ],
)
def test_line_kinds(raw, kind, low, high):
    info = classify_line(clean_line(raw))
    if kind is None:
        assert info is None or info.score <= 0
    else:
        assert info is not None and info.kind == kind and low <= info.score <= high, info


@pytest.mark.parametrize("raw, line", [
    ("[rank0]: AssertionError: Mutating module attribute cache_k during export.",
     "AssertionError: Mutating module attribute cache_k during export."),
    ("[default3]:RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1207", "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1207"),
    ("> RuntimeError: a leaf Variable that requires grad is being used in an in-place operation.",
     "RuntimeError: a leaf Variable that requires grad is being used in an in-place operation."),
    (">>> Lint for exir/x.py:", ">>> Lint for exir/x.py:"),  # lintrunner's own marker stays
    ("-> 1166         new_edge_programs[name] = to_backend(program, partitioner)",
     "-> 1166         new_edge_programs[name] = to_backend(program, partitioner)"),
])
def test_a_launchers_or_quotes_line_prefix_is_not_part_of_the_line(raw, line):
    """torchrun prefixes every line with its rank; a log pasted into a reply is quoted. The line
    read, and so its kind, is the line without it."""
    assert clean_line(raw) == line
    if line[0].isalpha():
        assert classify_line(clean_line(raw)).kind == classify_line(line).kind != None  # noqa: E711
