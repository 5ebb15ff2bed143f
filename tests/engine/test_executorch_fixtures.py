"""Real ExecuTorch / QNN failure output (tests/engine/fixtures/executorch): category and primary line."""
from __future__ import annotations

from pathlib import Path

import pytest

from triage_rules import classify_file, classify_text

FIXTURES = Path(__file__).parent / "fixtures" / "executorch"

# file, category, rule, environment, primary line (stripped)
CASES = [
    # pytest's summary line there has no message (the test id fills 80 columns): the line it cut
    ("multi_method_backend_not_registered.log", "runtime_error", "et-backend-not-registered", True,
     "E       RuntimeError: Failed to execute method forward, error: 0x20"),
    ("xnnpack_backend_not_registered.log", "runtime_error", "et-backend-not-registered", True,
     "Backend XnnpackBackend is not registered."),
    ("qnn_cannot_open_library.log", "qnn_sdk_or_toolchain", "qnn-library-open", True,
     "[ERROR] [Qnn ExecuTorch]: Cannot Open QNN library libQnnHtp.so, with error: libc++.so.1: cannot open shared object file: No such file or directory"),
    ("qnn_stub_lib_mismatch.log", "qnn_sdk_or_toolchain", "qnn-version-mismatch", True,
     "[ERROR] [Qnn ExecuTorch]:  <E> Stub lib id mismatch: expected (v2.28.0.241029232508_102474), detected (v2.25.17.241017130936_18858)"),
    ("qnn_op_validation.log", "qnn_op_validation", "qnn-op-validation", False,
     "[ERROR]QnnDsp <E> validateNativeOps aten_linear_default:qti.aisw:FullyConnected op validator (quantized and FP16) failed 3110 and 3110"),
    ("qnn_partitioner_keyerror.log", "qnn_op_validation", "qnn-partitioner-keyerror", False,
     "KeyError: 'aten.bitwise_not.default'"),
    ("qnn_python_module_missing.log", "qnn_sdk_or_toolchain", "qnn-optional-module-missing", True,
     "ModuleNotFoundError: No module named 'executorch.backends.qualcomm.python'"),
    ("missing_operator_logcat.log", "runtime_error", "et-missing-operator", False,
     "11-24 09:35:11.099: I/ETLOG(3388): Missing operator: [4] aten::native_dropout.out"),
    ("kernel_not_found.log", "runtime_error", "et-missing-operator", False,
     "[operator_registry.cpp:256] kernel 'aten::bitwise_right_shift.Tensor_out' not found."),
    ("missing_out_variants.log", "export_failure", "export-missing-out-variant", False,
     "RuntimeError: Missing out variants: {'aten::_weight_int4pack_mm'}"),
    ("lintrunner_executorch.log", "lint", "lint-lintrunner-path", False,
     ">>> Lint for backends/xnnpack/test/test_xnnpack_quantized.py:"),
    ("drci_lint_qualcomm.log", "lint", "lint-lintrunner-path", False,
     ">>> Lint for backends/qualcomm/tests/utils.py:"),
    ("mutable_buffer_writeback_dropped.log", "mutable_buffer", "mb-mutation-lost", False,
     "RuntimeError: lift_mutated_buffers classified these buffer writes as KV-cache"),
]


def _log_text(name: str) -> str:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    return "\n".join(line for line in text.split("\n") if not line.startswith("#|"))


def test_every_fixture_names_its_source():
    for path in FIXTURES.glob("*.log"):
        assert path.read_text(encoding="utf-8").startswith("#| source: "), path.name
    assert {name for name, *_ in CASES} == {p.name for p in FIXTURES.glob("*.log")}


@pytest.mark.parametrize("name,category,rule,environment,primary", CASES, ids=[c[0] for c in CASES])
def test_fixture_category_and_primary_line(name, category, rule, environment, primary):
    failures = classify_text(_log_text(name))
    assert failures, name
    first = failures[0]
    assert (first.category, first.rule, first.environment) == (category, rule, environment)
    assert first.line.strip() == primary
    assert first.title and first.explanation


def test_runtime_error_code_is_named_and_test_id_kept():
    first = classify_text(_log_text("multi_method_backend_not_registered.log"))[0]
    assert first.test == "exir/backend/test/test_to_backend_multi_method.py::TestToBackendMultiMethod::test_multi_method_end_to_end"
    assert first.exception == "RuntimeError"
    assert "Error::NotFound" in first.message
    assert "@cccclai" in first.owners


def test_classify_file_reads_the_same_as_text(tmp_path):
    path = tmp_path / "job.log"
    path.write_text(_log_text("qnn_op_validation.log"), encoding="utf-8")
    assert [f.to_dict() for f in classify_file(path)] == [f.to_dict() for f in classify_text(path.read_text())]


@pytest.mark.parametrize("category", ["multi_method_lowering", "mutable_buffer"])
def test_probe_failure_line_sets_the_category_it_names(category):
    log = (
        "2026-08-01T10:00:00.0000000Z ============ FAILURES ============\n"
        f"2026-08-01T10:00:00.1000000Z E   AssertionError: probe failed\n"
        f"2026-08-01T10:00:00.2000000Z ProbeFailure: [{category}] lowered program lost its state\n"
        "2026-08-01T10:00:01.0000000Z ##[error]Process completed with exit code 1.\n"
    )
    first = classify_text(log)[0]
    assert (first.category, first.rule) == (category, "probe-failure")
    assert "lowered program lost its state" in first.explanation
    assert first.line == f"ProbeFailure: [{category}] lowered program lost its state"


def test_wrappers_never_win_over_a_specific_error():
    log = "\n".join([
        "2026-08-01T10:00:00.0000000Z + python -m pytest backends/qualcomm/tests",
        "2026-08-01T10:00:01.0000000Z [ERROR] [Qnn ExecuTorch]: Cannot Open QNN library libQnnHtp.so, with error: x",
        "2026-08-01T10:00:02.0000000Z RuntimeError: Command docker exec -t 8b9261964e6f /exec failed with exit code 1",
        "2026-08-01T10:00:03.0000000Z ##[error]Process completed with exit code 1.",
    ])
    failures = classify_text(log)
    assert failures[0].line.startswith("[ERROR] [Qnn ExecuTorch]")
    assert failures[0].line_no == 2
    assert all("docker exec" not in f.line for f in failures)
