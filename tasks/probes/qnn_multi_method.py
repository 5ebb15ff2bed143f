"""The multi-method probe on QNN: two methods of one program lowered to HTP, run on x86.

Seed: executorch PR 10584 (QNN multi-method). `prefill` and `decode` of a rope-like block whose
sin/cos frequencies are shared by every consumer are lowered to QNN's HTP backend from one
program (`to_edge_transform_and_lower_to_qnn` with a compile spec per method, no weight
sharing: the x86 simulator does not support it), emitted into one .pte and run on the x86 HTP
simulator through the ExecuTorch runtime. Each method must be lowered to QnnBackend, its
getitem indices must agree with its delegates' outputs, and each must match eager within fp16
rounding. Needs QNN_SDK_ROOT (the qnn-htp-sim target sets it); without it the probe is skipped.
"""
from __future__ import annotations

import torch

from tasks.probes import graph_checks
from tasks.probes.multi_method import SharedRope, _delegate_details, _output_problems, _raise_if, rope_inputs
from tasks.probes.runtime import LoadedProgram, require_backends, to_pte

QNN = "QnnBackend"
ATOL = 2e-2  # fp16 on HTP: the measured error of these models is below 4e-3


def prefill_decode_on_htp() -> dict:
    from tasks.qnn import htp  # deferred: imports executorch.backends.qualcomm, only with QNN_SDK_ROOT set

    htp.require_sdk()
    require_backends(QNN)
    torch.manual_seed(0)
    model = SharedRope().eval()
    inputs = rope_inputs()
    edge = htp.lower({m: model for m in inputs}, inputs)
    programs = {m: edge.exported_program(m) for m in inputs}
    data = {"delegates": _delegate_details(programs), "methods": sorted(edge.methods)}
    problems = [f"method '{m}' is missing from the lowered program (methods: {sorted(edge.methods)})"
                for m in inputs if m not in edge.methods]
    for method, ep in programs.items():
        backends = [d.backend_id for d in graph_checks.delegates(ep)]
        if not backends or set(backends) != {QNN}:
            problems.append(f"method '{method}' was lowered to {backends or 'no delegate'}, expected {QNN} only")
        problems += graph_checks.getitem_problems(ep, method)
    _raise_if(problems, "two methods on QNN HTP", data)
    _, pte = to_pte(edge)
    program = LoadedProgram(pte)
    if program.method_names() != sorted(inputs):
        problems.append(f"the .pte holds methods {program.method_names()}, expected {sorted(inputs)}")
    errors = {}
    for method, args in inputs.items():
        with torch.no_grad():
            expected = model(*args)
        got = program.run(method, args)
        errors[method] = max(float((g - e).abs().max()) for g, e in zip(got, expected)) if len(got) == len(expected) else None
        problems += _output_problems(method, got, expected, atol=ATOL, rtol=ATOL)
    data["max_abs_error"] = errors
    data["pte_bytes"] = len(pte)
    _raise_if(problems, "two methods on QNN HTP", data)
    return data


PROBES = [("prefill_decode_on_htp", prefill_decode_on_htp)]
