"""One root cause, one entry: the root keys of real failure lines (issue 21, item 2). The probe
lines are the probes' real output on regression patches applied to the installed ExecuTorch
1.4.1 (tasks/probes/regressions/); the SpecViolationErrors are ExecuTorch's own, raised by
multi-method to_backend on tests/engine/corpus/regressions/multi_method_first_method_only_replaced."""
from __future__ import annotations

from pathlib import Path

import pytest

from triage_rules import classify_text
from triage_rules.records import Failure, Frame
from triage_rules.roots import probe_problem, root_keys

FIXTURES = Path(__file__).parent / "fixtures" / "executorch"

# multi_method_first_partitioner_for_all.patch (the demo's regression): three probes, one check
DEMO = [
    "ProbeFailure: [multi_method_lowering] two methods on XNNPACK + portable: partitioner map routed wrongly: method "
    "'decode' was given NoDelegationPartitioner (expects delegates none (portable)) but was lowered to "
    "['XnnpackBackend']",
    "ProbeFailure: [multi_method_lowering] two methods on different backends: partitioner map routed wrongly: method "
    "'all_first' delegate executorch_call_delegate carries compile specs ['add', 'sin'], not ['method'] from its own "
    "partitioner AllNodePartitioner",
    "ProbeFailure: [multi_method_lowering] prefill (XNNPACK) + decode (portable) sharing a KV cache: after delegate "
    "lowering: method 'decode': partitioner map routed wrongly: expected delegates none (portable), got "
    "['XnnpackBackend', 'XnnpackBackend']",
]
# mutable_buffer_no_write_back.patch: three probes, three flows, one missing write-back
NO_WRITE_BACK = [
    "ProbeFailure: [mutable_buffer] FP flow: FP to_executorch: k_cache: nothing writes back into b_k_cache after "
    "to_executorch (its users: aten_index_put_default (index_put)); the runtime computes the update and drops it",
    "ProbeFailure: [mutable_buffer] quantized flow: quantized to_executorch: k_cache: nothing writes back into "
    "b_k_cache after to_executorch (its users: aten_index_put_default (index_put)); the runtime computes the update "
    "and drops it",
    "ProbeFailure: [mutable_buffer] export -> to_edge -> constant_prop_pass -> to_executorch (portable): memory "
    "planning/emission: k_cache: nothing writes back into b_k_cache after to_executorch (its users: "
    "aten_sum_dim_int_list (sum), aten_index_put_default (index_put)); the runtime computes the update and drops it",
]
# other regressions' probe lines: other problems
OTHERS = [
    "ProbeFailure: [multi_method_lowering] prefill (XNNPACK) + decode (portable) sharing a KV cache: after "
    "to_executorch (memory planning): k_cache is one buffer shared by the methods but is planned at different places "
    "('decode' at mem_id 2 bytes [0, 192), 'prefill' at mem_id 2 bytes [192, 384)): what one method writes, the "
    "other never reads",
    "ProbeFailure: [mutable_buffer] export -> to_edge -> constant_prop_pass -> to_executorch (portable): "
    "constant_prop_pass folded 1 read(s) of the mutated buffer k_cache into constant(s) ?: those reads no longer see "
    "the state written by earlier calls",
    "ProbeFailure: [multi_method_lowering] shared nodes across delegates: prefill: getitem getitem_1 reads output #1 "
    "of executorch_call_delegate, whose producer order says #0",
]


def keys(line: str) -> list[str]:
    return root_keys(Failure(line=line, line_no=1, message=line))


@pytest.mark.parametrize("lines, problem", [(DEMO, "partitioner map routed wrongly"),
                                            (NO_WRITE_BACK, "nothing writes back into <name> after <name>")])
def test_probes_that_caught_one_regression_share_one_problem(lines, problem):
    assert {probe_problem(line.split("] ", 1)[1]) for line in lines} == {problem}
    assert len({keys(line)[0] for line in lines}) == 1


def test_other_problems_are_other_roots():
    found = {keys(line)[0] for line in [DEMO[0], NO_WRITE_BACK[0], *OTHERS]}
    assert len(found) == 2 + len(OTHERS)


SPEC = """Traceback (most recent call last):
  File "/etriage/tasks/probes/multi_method.py", line 211, in two_methods_different_backends
    lowered = to_backend(MethodProgramsPartitionerSpec(programs, partitioners))
  File "/site-packages/executorch/exir/backend/backend_api.py", line 772, in _
    tagged_exported_program._validate()
  File "/site-packages/torch/_export/verifier.py", line 286, in _check_graph_module
    raise SpecViolationError(
torch._export.verifier.SpecViolationError: call_module is not valid: got a class '{name}'
"""


def test_one_raise_site_naming_other_submodules_is_one_root():
    a, b = (classify_text(SPEC.format(name=n), failed=True)[0] for n in ("fused_FirstBackendWithPreprocessAll",
                                                                        "fused_first_tag1"))
    assert a.fingerprint != b.fingerprint and keys_of(a)[0] != keys_of(b)[0]  # other messages...
    assert keys_of(a)[1] == keys_of(b)[1]  # ...one raise site, one message shape


def keys_of(failure: Failure) -> list[str]:
    return root_keys(failure)


def test_the_same_message_shape_from_another_raise_site_is_another_root():
    here = Failure(line="KeyError: 'k_cache'", line_no=1, exception="KeyError", message="'k_cache'",
                   frames=[Frame("exir/passes/insert_write_back_for_buffers_pass.py", 80, "_insert_copy")])
    there = Failure(line="KeyError: 'v_cache'", line_no=1, exception="KeyError", message="'v_cache'",
                    frames=[Frame("exir/memory_planning.py", 10, "apply_algo")])
    assert not set(root_keys(here)) & set(root_keys(there))


def test_a_message_without_a_frame_keeps_its_names():
    """No raise site to join on: a summary line's names stay part of its root (two missing
    modules are two roots)."""
    a = Failure(line="x", line_no=1, exception="ModuleNotFoundError", message="No module named 'tosa'")
    b = Failure(line="x", line_no=1, exception="ModuleNotFoundError", message="No module named 'vela'")
    assert root_keys(a) != root_keys(b) and len(root_keys(a)) == 1


def test_one_message_from_two_missing_backends_is_two_environment_roots():
    """ExecuTorch's own RuntimeError (0x20) says only that the method failed; the runtime's line
    above it names the backend it lacks. Two backends missing are two environment problems."""
    log = (FIXTURES / "multi_method_backend_not_registered.log").read_text(encoding="utf-8")
    demo = classify_text(log, failed=True)[0]
    rpc = classify_text(log.replace("BackendWithCompilerDemo", "ExecutorBackend"), failed=True)[0]
    assert demo.environment and rpc.environment and demo.message == rpc.message
    assert demo.title != rpc.title
    assert not set(root_keys(demo)) & set(root_keys(rpc))
    assert root_keys(demo) == root_keys(classify_text(log, failed=True)[0])  # the same backend: one root
