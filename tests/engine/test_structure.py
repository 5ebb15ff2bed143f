"""Structure before words (issue 21, item 1): the frames on the stack and the objects a failure
names are evidence the decision weighs, a probe's own category is never overruled, and the
evidence that decided is shown. The multi-method SpecViolationError is the first seed thread's
failure (`to_backend(MethodProgramsPartitionerSpec(...))` rejecting `fused_first_tag1`)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tasks.pipeline import compare
from tasks.records import TestResult as Outcome
from triage_rules import classify_text
from triage_rules.records import Failure, Frame
from triage_rules.scorer import Scorer
from triage_rules.structure import found_in, pointed_to

TRACEBACK = """Traceback (most recent call last):
  File "/executorch/exir/backend/test/test_to_backend_multi_method.py", line 212, in test_multi_method_to_backend_two_methods_different_backends
    lowered = to_backend(MethodProgramsPartitionerSpec(edge_programs, partitioners))
  File "/executorch/exir/backend/backend_api.py", line 770, in _
    _unsafe_adjust_original_program(
  File "/executorch/exir/backend/utils.py", line 455, in _unsafe_adjust_original_program
    original_program._validate()
  File "/executorch/exir/verification/verifier.py", line 139, in _check_graph_module
    raise SpecViolationError(
torch._export.verifier.SpecViolationError: call_module is not valid: got a class 'fused_first_tag1'
"""
TEST = ("exir/backend/test/test_to_backend_multi_method.py::TestToBackendMultiMethod::"
        "test_multi_method_to_backend_two_methods_different_backends")


@pytest.mark.parametrize("line, frames, expected", [
    ("SpecViolationError: call_module is not valid: got a class 'fused_first_tag1'",
     [Frame("exir/backend/utils.py", 455, "_unsafe_adjust_original_program")],
     ["adjust_original_program", "fused_submodule"]),
    ("AssertionError: index_put_ is no longer a BUFFER_MUTATION output",
     [Frame("exir/passes/insert_write_back_for_buffers_pass.py", 80, "insert_write_back_for_buffers_pass")],
     ["write_back", "buffer_mutation", "index_put"]),
    ("RuntimeError: getitem index 3 out of range for executorch_call_delegate",
     [Frame("exir/memory_planning.py", 10, "apply_algo")], ["memory_planning", "getitem", "call_delegate"]),
    ("ValueError: b__frozen_param0 is a constant", [Frame("torchao/quantization/pt2e/quantize_pt2e.py", 1, "convert_pt2e")],
     ["quantizer_convert", "frozen_param"]),
    ("AssertionError: 3 != 4", [], []),
    # another delegate backend named as a word; the same name inside a path is not the failure's
    ("vkcompute::vkapi::Error: Exception raised from toConstTensor", [], ["delegate_backend"]),
    ("RuntimeError: Non-passthrough operation could not run on NPU (Vela)", [], ["delegate_backend"]),
    ("backends/xnnpack/partition/config/gemm_configs.py:12:1: F401 'torch' imported but unused", [], []),
    ("'executorch.backends.xnnpack.test.test_xnnpack_utils.randomize_bn' imported but unused", [], []),
    ("ValueError: bad node", [Frame("backends/vulkan/partitioner/vulkan_partitioner.py", 3, "is_node_supported")],
     ["partitioner"]),
    # a method other than `forward` named where it is loaded or run: a program with several methods
    ("RuntimeError: Failed to load method forward_32, error: 0x:23", [], ["named_method"]),
    ("RuntimeError: Method text_decoder missing fallback kernels (2 total):", [], ["named_method"]),
    ('program.load_method("prefill")', [], ["named_method"]),
    ("RuntimeError: Failed to load method forward, error: 0x:14", [], []),
    ("DeprecationWarning: the method get_item is deprecated, use in_place_op", [], []),
    ("[method.cpp:1397] CALL_DELEGATE execute failed at instruction 0: 0x1", [], []),
])
def test_signals_are_read_from_frames_and_the_objects_named(line, frames, expected):
    failure = Failure(line=line, line_no=1, message=line, frames=frames)
    assert found_in(failure) == expected


def test_only_signals_that_say_what_the_failure_is_point_to_a_category():
    assert pointed_to(["to_backend", "fused_submodule", "method_programs", "index_put"]) == {
        "multi_method_lowering": ["method_programs"], "mutable_buffer": ["index_put"]}


def test_a_multi_method_spec_violation_in_a_ci_log_is_multi_method_lowering():
    [failure] = classify_text(TRACEBACK, job_name="pull / unittest / linux", failed=True)
    assert failure.exception.endswith("SpecViolationError")
    assert failure.category == "multi_method_lowering" and not failure.unsure
    # the stack's own lines (`_unsafe_adjust_original_program(`) name the multi-method rule; the
    # bare SpecViolationError rule, weak, never decides it
    assert failure.rule == "mm-original-program-validate" and failure.decided_by == failure.rule
    assert failure.decision[0] == f"{failure.decided_by} decided multi_method_lowering"
    [structure] = [reason for reason in failure.decision if reason.startswith("structure points to")]
    # the deciding evidence with its learned weight: P(category | signal) over the training records
    assert re.match(r"structure points to multi_method_lowering \(weight 0\.\d\d\): learned from .*method_programs "
                    r"0\.\d\d \(table \+ \d+ of \d+ training records\)", structure), structure
    assert any("mm-original-program-validate` (strong, weight 0.4)" in reason for reason in failure.decision)


def test_a_multi_method_spec_violation_in_the_bots_own_run_is_multi_method_lowering():
    key = ("selected", "host", TEST)
    heads = {key: Outcome(suite="selected", test=TEST, target="host", outcome="failed",
                          message=TRACEBACK.strip().splitlines()[-1], text=TRACEBACK)}
    base = {key: Outcome(suite="selected", test=TEST, target="host", outcome="passed")}
    [verdict] = compare.decide(base, heads, compare.classify_failing(heads, classify_text), {})
    assert (verdict.verdict, verdict.category) == ("new", "multi_method_lowering")
    assert any("guards multi_method_lowering" in reason for reason in verdict.failure.decision)


def test_a_probes_own_category_is_never_overruled_by_structure():
    text = ("ProbeFailure: [multi_method_lowering] kv cache methods: index_put_ on k_cache lost its "
            "BUFFER_MUTATION output in method 'decode'\n")
    [failure] = classify_text(text, failed=True)
    assert (failure.category, failure.decided_by, failure.confidence) == ("multi_method_lowering", "probe-failure", 1.0)
    assert "never overruled" in failure.decision[-1]


def scorer_with(counts: dict[str, tuple[int, int]]) -> Scorer:
    """A scorer that knows only how many training records showed each signal, per class."""
    classes = ["multi_method_lowering", "export_failure"]
    return Scorer([], np.zeros((0, 2)), np.zeros(2), classes, (np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64),
                                                              np.zeros(0), 0), [],
                  signal_ids=list(counts), signal_counts=np.array(list(counts.values()), dtype=float))


def test_a_signals_weight_is_learnt_from_the_training_records():
    expected = {"method_programs": "multi_method_lowering"}
    # the table's expectation alone (no record shows the signal): the prior points
    [(weight, _)] = scorer_with({"method_programs": (0, 0)}).pointing(["method_programs"], expected).values()
    assert 0.85 < weight <= 0.95
    # records that agree make it stronger; records that disagree turn it
    assert scorer_with({"method_programs": (30, 0)}).pointing(["method_programs"], expected)[
        "multi_method_lowering"][0] > weight
    assert set(scorer_with({"method_programs": (0, 30)}).pointing(["method_programs"], expected)) == {"export_failure"}
    # a signal the table gives no direction points only where enough records show it
    assert scorer_with({"getitem": (0, 2)}).pointing(["getitem"], expected) == {}
    assert set(scorer_with({"getitem": (0, 9)}).pointing(["getitem"], expected)) == {"export_failure"}
    assert scorer_with({"getitem": (5, 5)}).pointing(["getitem"], expected) == {}  # no side: no evidence
