"""`etriage classify` as a user runs it: a real subprocess, real files, bad input."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "executorch"


def etriage(*args: str, stdin: bytes | None = None, python_flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *python_flags, "-m", "etriage.cli", "classify", *args],
        input=stdin, capture_output=True, timeout=120, check=False,
    )


def test_json_output_one_object_per_input(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    result = etriage("--format", "json", str(FIXTURES / "qnn_op_validation.log"), str(empty))
    assert result.returncode == 0, result.stderr
    first, second = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert first["path"].endswith("qnn_op_validation.log")
    failure = first["failures"][0]
    for key in ("category", "rule", "title", "test", "exception", "message", "line_no", "line",
                "fingerprint", "explanation", "suggestion", "owners"):
        assert key in failure
    assert failure["category"] == "qnn_op_validation"
    assert failure["line_no"] == 4  # counting the `#| source:` header line of the file
    assert second == {"path": str(empty), "failures": []}


def test_text_output_and_stdin():
    result = etriage("-", stdin=b"+ make\nsrc/a.cpp:3:1: error: expected ';'\n##[error]Process completed with exit code 2.\n")
    assert result.returncode == 0
    out = result.stdout.decode()
    assert "Compile error" in out and "line 2: src/a.cpp:3:1: error: expected ';'" in out
    assert "\x1b[" not in out  # not a terminal: no colour


def test_bad_inputs_get_one_clear_line_and_others_still_run(tmp_path):
    binary = tmp_path / "model.pte"
    binary.write_bytes(b"\x00\x01ET12" * 100)
    result = etriage("--format", "json", str(tmp_path / "missing.log"), str(tmp_path), str(binary),
                     str(FIXTURES / "kernel_not_found.log"))
    assert result.returncode == 1
    errors = result.stderr.decode().splitlines()
    assert errors == [
        f"etriage classify: {tmp_path / 'missing.log'}: no such file",
        f"etriage classify: {tmp_path}: is a directory, not a log",
        f"etriage classify: {binary}: binary file, not a log",
    ]
    assert "Traceback" not in result.stderr.decode()
    (only,) = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert only["failures"][0]["rule"] == "et-missing-operator"


def test_invalid_utf8_is_replaced_and_classified(tmp_path):
    path = tmp_path / "latin1.log"
    path.write_bytes(b"caf\xe9 ok\nRuntimeError: Missing out variants: {'aten::foo'} \xff\n")
    result = etriage("--format", "json", str(path))
    assert result.returncode == 0
    failure = json.loads(result.stdout)["failures"][0]
    assert failure["rule"] == "export-missing-out-variant" and "\ufffd" in failure["line"]


def test_malformed_junit_is_a_clear_error(tmp_path):
    path = tmp_path / "report.xml"
    path.write_text("<?xml version='1.0'?>\n<testsuite><testcase name='x'>\n</testsuite>")
    result = etriage(str(path))
    assert result.returncode == 1
    assert result.stderr.decode().startswith(f"etriage classify: {path}: malformed JUnit XML at line 3")


def test_classify_imports_neither_torch_nor_executorch():
    result = etriage(str(FIXTURES / "qnn_op_validation.log"), python_flags=("-X", "importtime"))
    assert result.returncode == 0
    imported = {line.split("|")[-1].strip() for line in result.stderr.decode().splitlines() if "|" in line}
    assert "triage_rules.engine" in imported
    assert not {m for m in imported if m.split(".")[0] in ("torch", "executorch")}


@pytest.mark.parametrize("flag", ["--format=xml"])
def test_usage_errors_exit_non_zero(flag):
    assert etriage(flag, "x").returncode == 2


def test_failed_job_always_gets_a_failure_with_low_confidence(tmp_path):
    quiet = b"step 1\nthe quantized llama answers the same tokens for every prompt\nstep 3 done\n"
    without = etriage("--format", "json", "-", stdin=quiet)
    assert json.loads(without.stdout)["failures"] == []  # a clean-looking log stays clean
    result = etriage("--format", "json", "--failed", "-", stdin=quiet)
    assert result.returncode == 0, result.stderr
    (failure,) = json.loads(result.stdout)["failures"]
    assert failure["line"] == "the quantized llama answers the same tokens for every prompt"
    assert failure["line_no"] == 2
    assert failure["rule"] == "fallback-line" and 0 < failure["confidence"] <= 0.5
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    (only,) = json.loads(etriage("--format", "json", "--failed", str(empty)).stdout)["failures"]
    assert only["rule"] == "empty-log" and only["confidence"] <= 0.5
    assert only["error_not_in_log"] and only["category"] == "other" and not only["environment"]
    assert json.loads(etriage("--format", "json", str(empty)).stdout)["failures"] == []


def test_a_failed_job_whose_log_holds_no_error_line_says_the_error_is_not_in_it():
    """A clean log ending on `Done`: no category is guessed from it (neither a build failure nor a
    device), the real error is elsewhere; the pipeline's verdict is then `not_in_log`. A quiet
    log the model does recognise (a wrong answer) keeps its guess, never more than half sure."""
    clean = b"Collecting torch\nInstalling collected packages\nRunning the export\nDone\n"
    (failure,) = json.loads(etriage("--format", "json", "--failed", "-", stdin=clean).stdout)["failures"]
    assert failure["rule"] == "quiet-log" and failure["line"] in clean.decode()
    assert failure["error_not_in_log"] and failure["category"] == "other" and not failure["environment"]
    assert failure["confidence"] <= 0.5 and not failure["unsure"]
    wrong = b"prompt: What is the capital of France?\nanswer: Berlin\n"
    (guess,) = json.loads(etriage("--format", "json", "--failed", "-", stdin=wrong).stdout)["failures"]
    assert guess["rule"] == "quiet-log" and guess["confidence"] <= 0.5
    assert guess["category"] == "numerical_mismatch" and not guess["error_not_in_log"]


def test_a_quiet_log_line_a_rule_knows_is_the_failure_whatever_its_length():
    """Nothing was extracted and no line has an error word; the line a rule knows is the failure,
    not the longest line of the tail: a registry's `manifest unknown`, a linter's report, an
    answer that degenerates into one repeated word."""
    cases = {
        b"latest: Pulling from some-org/some-long-image-name-here\nmanifest unknown\n": ("ci_infra", "manifest unknown"),
        b"$ codespell\n./README.md:6: Provdie ==> Provide\n$ echo $?\n65\n": ("lint", "Provdie ==> Provide"),
        b"prompt: What is the capital of France?\nanswer: the the the the the the the the\n": (
            "numerical_mismatch", "the the the"),
    }
    for log, (category, words) in cases.items():
        (failure,) = json.loads(etriage("--format", "json", "--failed", "-", stdin=log).stdout)["failures"]
        assert failure["category"] == category and words in failure["line"] and not failure["error_not_in_log"], log
        assert failure["rule"] not in ("quiet-log", "fallback-line"), log


def test_json_says_who_decided_and_what_it_looks_like():
    result = etriage("--format", "json", "-", stdin=b"adb: error: device offline\n")
    failure = json.loads(result.stdout)["failures"][0]
    assert failure["category"] == "device_infra"
    assert failure["decided_by"] and 0 < failure["confidence"] <= 1
    assert all({"source", "category", "line", "similarity"} <= set(n) for n in failure["looks_like"])
