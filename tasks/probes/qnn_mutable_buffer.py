"""The mutable-buffer probe on QNN: a KV cache through QNN quantization and HTP lowering.

Seed: executorch PR 4627 (a quantized llama's KV cache became a constant, so different prompts
gave the same answer). The KV-cache model of mutable_buffer.py goes through `QnnQuantizer`
(8-bit activations and weights) with `prepare_pt2e` / calibration / `convert_pt2e`, is lowered
to QNN's HTP backend with the mutable buffers taken into the delegate, and runs on the x86 HTP
simulator:
- after quantization each cache is still a BUFFER input with a BUFFER_MUTATION output, and no
  cache write starts from a constant (`_frozen_param`);
- after lowering no delegate holds a cache as its own constant data;
- three calls on one loaded method match eager step by step (the state carries over), and
  two different prompts give different outputs;
- the cache's first read is defined: every fresh load of the program gives the same first step
  (a delegate whose copy of the buffer starts undefined differs between loads; that is reported
  as a state bug with the values, never as flakiness).
"""
from __future__ import annotations

import copy

import torch

from tasks.probes import graph_checks
from tasks.probes.mutable_buffer import (
    CACHES,
    STEPS,
    KVCache,
    _describe,
    _example,
    _functional,
    _model,
    _reset_caches,
    _signature_problems,
)
from tasks.probes.records import ProbeFailure
from tasks.probes.runtime import LoadedProgram, import_optional, require_backends, to_pte

QNN = "QnnBackend"
ATOL = 0.1  # HTP's int8 kernels against the quantized eager model: measured at most 0.04
FP_ATOL = 1.5  # the quantized model against FP: measured up to 0.74 (a lost cache row is larger)
FRESH_LOADS = 3


def _quantized(model: KVCache, quantizer) -> torch.fx.GraphModule:
    quantize_pt2e = import_optional("torchao.quantization.pt2e.quantize_pt2e")
    prepared = quantize_pt2e.prepare_pt2e(torch.export.export(copy.deepcopy(model), _example(0)).module(), quantizer)
    for seed in (1, 2):  # calibrate on the very steps the probe runs
        _reset_caches(prepared)
        for step in range(STEPS):
            prepared(*_example(step, seed=seed))
    converted = quantize_pt2e.convert_pt2e(prepared)
    _reset_caches(converted)
    return converted


def _runtime_problems(pte: bytes, model: KVCache, converted) -> tuple[list[str], dict]:
    """Step by step against the quantized eager model (its own int8 error against FP is up to
    0.74 on steps 2-3 here, so FP cannot be the step reference), loosely against FP too."""
    problems, data = [], {}
    program, eager, fp = LoadedProgram(pte), copy.deepcopy(converted), copy.deepcopy(model)
    _reset_caches(eager)
    errors, fp_errors = [], []
    for step in range(STEPS):
        x, pos = _example(step)
        expected, reference = eager(x, pos), fp(x, pos)
        got = program.run("forward", (x, pos))[0]
        errors.append(float((got - expected).abs().max()))
        fp_errors.append(float((got - reference).abs().max()))
        if errors[-1] > ATOL:
            problems.append(f"runtime step {step + 1}/{STEPS} (pos={step}): output differs from quantized eager by "
                            f"{errors[-1]:.4g} (atol={ATOL}); the cache state was not kept across calls")
        elif fp_errors[-1] > FP_ATOL:
            problems.append(f"runtime step {step + 1}/{STEPS} (pos={step}): output differs from FP eager by "
                            f"{fp_errors[-1]:.4g} (atol={FP_ATOL}) though it matches quantized eager: the "
                            "quantized model itself lost the cache")
    data["max_abs_error_per_step"] = errors
    data["max_abs_error_vs_fp_per_step"] = fp_errors
    firsts = [LoadedProgram(pte).run("forward", _example(0))[0] for _ in range(FRESH_LOADS)]
    spread = max(float((f - firsts[0]).abs().max()) for f in firsts)
    data["first_step_spread_across_loads"] = spread
    if spread > 1e-6:  # the diagnosis, ahead of the step mismatches it causes
        problems.insert(0, f"state bug: the first step differs between {FRESH_LOADS} fresh loads of the program by "
                        f"{spread:.4g} (first values {[round(float(f.flatten()[0]), 4) for f in firsts]}): the "
                        "delegate's copy of the cache starts undefined, not at the buffer's initial value")
    other = LoadedProgram(pte).run("forward", _example(0, seed=2))[0]
    if torch.allclose(firsts[0], other):
        problems.append("runtime: two different prompts gave the same output (the cache is read as a constant)")
    return problems, data


def _delegate_cache_problems(lowered) -> list[str]:
    """QNN takes a mutable buffer into its delegate (one I/O address at runtime), so the cache
    must be a mutated buffer of the delegate's own program: a BUFFER input with a
    BUFFER_MUTATION output there, never a constant it computes from."""
    owners = [d for d in graph_checks.delegates(lowered)]
    outside = set(lowered.graph_signature.buffers_to_mutate.values())
    problems = []
    for fqn in CACHES:
        if fqn in outside:
            continue  # kept outside the delegate (skip_mutable_buffer): checked by the signature
        inside = [d for d in owners if fqn in getattr(lowered.graph_module, d.lowered).original_module
                  .graph_signature.inputs_to_buffers.values()]
        if not inside:
            problems.append(f"QNN lowering: {fqn} is neither mutated outside a delegate nor a buffer of one")
        for d in inside:
            ep = getattr(lowered.graph_module, d.lowered).original_module
            problems += [f"QNN lowering: inside delegate {d.node}: {p}" for p in graph_checks.signature_problems(ep, [fqn])]
            problems += [f"QNN lowering: inside delegate {d.node}: {w.describe()}"
                         for w in graph_checks.constant_cache_writes(ep) if w.source in
                         {n for n, f in ep.graph_signature.inputs_to_buffers.items() if f == fqn}]
    return problems


def _qnn_flow(skip_mutable_buffer: bool) -> dict:
    from tasks.qnn import htp  # deferred: imports executorch.backends.qualcomm, only with QNN_SDK_ROOT set

    htp.require_sdk()
    require_backends(QNN)
    model = _model()
    converted = _quantized(model, htp.quantizer())
    q_ep = torch.export.export(converted, _example(0))
    q_functional = _functional(q_ep)
    problems = _signature_problems("QNN-quantized export", q_functional)
    frozen = graph_checks.constant_cache_writes(q_functional)
    problems += [f"QNN-quantized export: {w.describe()}" for w in frozen]
    details = [_describe("QNN-quantized export", q_functional)]
    edge = htp.lower(converted, _example(0), use_fp16=False, skip_mutable_buffer=skip_mutable_buffer)
    lowered = edge.exported_program()
    backends = [d.backend_id for d in graph_checks.delegates(lowered)]
    if QNN not in backends:
        problems.append(f"QNN lowering: no {QNN} delegate (delegates: {backends or 'none'})")
    problems += _delegate_cache_problems(lowered)
    outside = sorted(lowered.graph_signature.buffers_to_mutate.values())
    details.append(f"QNN lowering: delegates {backends}; caches mutated outside the delegate: {outside}")
    if skip_mutable_buffer:
        problems += [f"QNN lowering (skip_mutable_buffer): {fqn} is not a BUFFER_MUTATION output of the program"
                     for fqn in CACHES if fqn not in outside]
    data = {"delegates": backends, "caches_outside_delegate": outside}
    if problems:
        raise ProbeFailure(f"QNN-quantized flow lost the mutable KV cache: {problems[0]}",
                           details + [f"problem: {p}" for p in problems], data)
    config = None
    if skip_mutable_buffer:  # the runtime owns the caches: initialise them from the program
        config = import_optional("executorch.exir").ExecutorchBackendConfig(
            passes=[import_optional("executorch.exir.passes.init_mutable_pass").InitializedMutableBufferPass(list(CACHES))])
    _, pte = to_pte(edge, config)
    run_problems, run_data = _runtime_problems(pte, model, converted)
    data.update(run_data)
    if run_problems:
        where = "as delegate I/O" if skip_mutable_buffer else "inside the QNN delegate"
        raise ProbeFailure(f"QNN-quantized KV cache {where} on HTP: {run_problems[0]}",
                           details + [f"problem: {p}" for p in run_problems], data)
    return data


def kv_cache_qnn_quantized() -> dict:
    """The caches kept as the program's mutable buffers, delegate inputs and outputs
    (`skip_mutable_buffer=True`: what upstream's x86 tests run)."""
    return _qnn_flow(skip_mutable_buffer=True)


def kv_cache_qnn_in_delegate() -> dict:
    """The caches taken into the QNN delegate (QNN's default: one I/O address at runtime)."""
    return _qnn_flow(skip_mutable_buffer=False)


PROBES = [("kv_cache_qnn_quantized", kv_cache_qnn_quantized),
          ("kv_cache_qnn_in_delegate", kv_cache_qnn_in_delegate)]
