"""Mutable-buffer probes: a KV cache must stay a mutable buffer, through quantization too.

Seed: executorch PR 4627. In the pt2e-quantized flow the KV cache became a frozen constant
and its `index_put` stopped being a graph output, so quantized llama gave the same answer
for different prompts. Each probe here follows one flow (FP, or XNNPACK-quantized pt2e)
from export to the runtime and checks, at every stage, that `k_cache` (written with
`index_put_`) and `v_cache` (written with `index_copy_`) are BUFFER inputs with a
BUFFER_MUTATION output, then runs the program three steps against eager.
"""
from __future__ import annotations

import copy

import torch

from tasks.probes import graph_checks
from tasks.probes.records import ProbeFailure
from tasks.probes.runtime import LoadedProgram, import_optional, require_backends, to_pte

CACHES = {"k_cache": "index_put_", "v_cache": "index_copy_"}
STEPS = 3


class KVCache(torch.nn.Module):
    """One attention-like step: project, write this step into both caches, read them back."""

    def __init__(self, dim: int = 8, max_seq: int = 4):
        super().__init__()
        self.proj = torch.nn.Linear(dim, 2 * dim)
        self.register_buffer("k_cache", torch.zeros(max_seq, dim))
        self.register_buffer("v_cache", torch.zeros(max_seq, dim))
        self.dim = dim

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        kv = self.proj(x)
        self.k_cache.index_put_((pos,), kv[:, : self.dim])
        self.v_cache.index_copy_(0, pos, kv[:, self.dim :])
        # The output depends on every step written so far, so a lost write shows.
        return self.k_cache.sum(0, keepdim=True) + self.v_cache.sum(0, keepdim=True)


class KVCacheReadFirst(KVCache):
    """Also reads the cache before writing it (a running summary of earlier steps): an op
    whose only input is the mutated buffer, which constant propagation must never fold."""

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        earlier = self.k_cache.sum(0, keepdim=True) * 0.5
        return super().forward(x, pos) + earlier


def _model(cls: type[KVCache] = KVCache) -> KVCache:
    torch.manual_seed(0)
    model = cls().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def _example(step: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed * 100 + step)
    return torch.randn(1, 8, generator=g), torch.tensor([step])


def _reset_caches(module: torch.nn.Module) -> list[str]:
    """Zero the caches (calibration writes into them); return the ones the module lost."""
    buffers = dict(module.named_buffers())
    for name in CACHES:
        if name in buffers:
            buffers[name].zero_()
    return [name for name in CACHES if name not in buffers]


def _functional(ep):
    """torch.export keeps `index_put_` in place; BUFFER_MUTATION outputs appear once the
    program is functionalised, which is what to_edge does next."""
    return ep.run_decompositions({})


def _signature_problems(stage: str, ep) -> list[str]:
    return [f"{stage}: {problem}" for problem in graph_checks.signature_problems(ep, list(CACHES))]


def _describe(stage: str, ep) -> str:
    summary = graph_checks.signature_summary(ep, list(CACHES))
    return f"{stage}: {summary.describe(list(CACHES))}; BUFFER_MUTATION outputs: {summary.mutations}"


def _cache_readers(ep) -> dict[str, int]:
    """fqn -> how many graph nodes use the cache's input placeholder."""
    by_input = {name: fqn for name, fqn in ep.graph_signature.inputs_to_buffers.items() if fqn in CACHES}
    return {fqn: len(node.users) for node in ep.graph.nodes
            if node.op == "placeholder" and (fqn := by_input.get(node.name))}


def _new_constants(before, after) -> list[str]:
    old = set(graph_checks.signature_summary(before, list(CACHES)).constants)
    return [c for c in graph_checks.signature_summary(after, list(CACHES)).constants if c not in old]


def _lower(ep, flow: str) -> tuple[list[str], str, object, bytes]:
    """Lower with XNNPACK and serialise; the lowered program is checked before to_executorch
    (which rewrites that graph in place)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    stage = f"{flow} to_edge+lower"
    problems = _signature_problems(stage, edge.exported_program())
    description = _describe(stage, edge.exported_program())
    # Initialise the caches from the program instead of trusting fresh memory to be zero.
    config = ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(list(CACHES))])
    program, pte = to_pte(edge, config)
    final = program.exported_program()
    problems += [f"{flow} to_executorch: {p}" for p in graph_checks.write_back_problems(final, list(CACHES))]
    return problems, description, final, pte


def _run_steps(pte: bytes, reference: torch.nn.Module, atol: float, rtol: float) -> tuple[list[str], dict]:
    """Three calls on one loaded program against eager; then two prompts must differ."""
    program = LoadedProgram(pte)
    eager = copy.deepcopy(reference)
    problems, errors = [], []
    for step in range(STEPS):
        x, pos = _example(step)
        expected = eager(x, pos)
        got = program.run("forward", (x, pos))[0]
        err = float((got - expected).abs().max())
        errors.append(err)
        if not torch.allclose(got, expected, atol=atol, rtol=rtol):
            problems.append(
                f"runtime step {step + 1}/{STEPS} (pos={step}): output differs from eager by {err:.4g} "
                f"(atol={atol}); the cache state was not kept across calls"
            )
    first = LoadedProgram(pte).run("forward", _example(0, seed=1))[0]
    second = LoadedProgram(pte).run("forward", _example(0, seed=2))[0]
    if torch.allclose(first, second):
        problems.append("runtime: two different inputs gave the same output (the cache is read as a constant)")
    return problems, {"max_abs_error_per_step": errors}


def _finish(flow: str, problems: list[str], details: list[str], data: dict) -> dict:
    if problems:
        summary = f"{flow}: " + problems[0]
        raise ProbeFailure(summary, details + [f"problem: {p}" for p in problems], data)
    return data


def kv_cache_fp() -> dict:
    """FP flow: export -> to_edge_transform_and_lower(XNNPACK) -> to_executorch -> runtime."""
    require_backends("XnnpackBackend")
    model = _model()
    ep = torch.export.export(copy.deepcopy(model), _example(0))
    problems = _signature_problems("FP export", _functional(ep))
    lower_problems, lowered, _, pte = _lower(ep, "FP")
    problems += lower_problems
    run_problems, data = _run_steps(pte, model, atol=1e-4, rtol=1e-4)
    details = [_describe("FP export", _functional(ep)), lowered]
    return _finish("FP flow", problems + run_problems, details, data)


def kv_cache_quantized() -> dict:
    """pt2e flow: export -> XNNPACKQuantizer prepare/calibrate/convert -> export -> lower -> run.

    The reference is the FP model: a quantized eager model that lost its cache would agree
    with a runtime that lost it too. The tolerance covers int8 error, not a lost step.
    """
    require_backends("XnnpackBackend")
    quantize_pt2e = import_optional("torchao.quantization.pt2e.quantize_pt2e")
    xq = import_optional("executorch.backends.xnnpack.quantizer.xnnpack_quantizer")
    model = _model()
    fp_ep = _functional(torch.export.export(copy.deepcopy(model), _example(0)))
    quantizer = xq.XNNPACKQuantizer().set_global(xq.get_symmetric_quantization_config())
    prepared = quantize_pt2e.prepare_pt2e(torch.export.export(copy.deepcopy(model), _example(0)).module(), quantizer)
    # Calibrate on the very steps the probe runs, so int8 ranges cover the accumulated cache.
    lost = _reset_caches(prepared)
    for seed in (1, 2):
        _reset_caches(prepared)
        for step in range(STEPS):
            prepared(*_example(step, seed=seed))
    converted = quantize_pt2e.convert_pt2e(prepared)
    _reset_caches(converted)
    q_ep = torch.export.export(converted, _example(0))
    q_functional = _functional(q_ep)

    problems = [f"prepare_pt2e: {name} is no longer a buffer of the prepared model" for name in lost]
    problems += _signature_problems("quantized export", q_functional)
    details = [_describe("FP export", fp_ep), _describe("quantized export", q_functional)]
    fp_count = graph_checks.signature_summary(fp_ep, list(CACHES)).mutations
    q_count = graph_checks.signature_summary(q_functional, list(CACHES)).mutations
    details.append(f"BUFFER_MUTATION outputs: {fp_count} -> {q_count}")
    new = _new_constants(fp_ep, q_functional)
    if new:
        details.append("constants only in the quantized flow: " + ", ".join(new))
    frozen = graph_checks.constant_cache_writes(q_functional)
    details += [f"quantized export: {w.describe()}" for w in frozen]
    lower_problems, lowered, _, pte = _lower(q_ep, "quantized")
    problems += lower_problems
    details.append(lowered)
    run_problems, data = _run_steps(pte, model, atol=0.1, rtol=0.02)
    data["buffer_mutations"] = {"fp": fp_count, "quantized": q_count}
    if problems and (q_count != fp_count or frozen):
        # Lead with the FP-vs-quantized signature difference when it shows the loss: that is
        # what the author needs. Otherwise the first problem leads, as in the other flows (one
        # regression that breaks both flows then reads as one problem in both).
        fp_state = graph_checks.signature_summary(fp_ep, list(CACHES)).describe(list(CACHES))
        q_state = graph_checks.signature_summary(q_functional, list(CACHES)).describe(list(CACHES))
        q_state += "".join(f", {w.op} reads {w.source} (constant)" for w in frozen)
        summary = (
            f"quantized flow lost the mutable KV cache: FP: {fp_state}; quantized: {q_state}; "
            f"BUFFER_MUTATION outputs: {fp_count} -> {q_count}"
        )
        raise ProbeFailure(summary, details + [f"problem: {p}" for p in problems + run_problems], data)
    return _finish("quantized flow", problems + run_problems, details, data)


def kv_cache_through_passes() -> dict:
    """Every step between export and the emitted program, on the portable runtime (no
    delegate): to_edge, constant propagation (which must never fold a mutated buffer, the
    second seed's symptom in another place), memory planning and emission with the buffers'
    write-back, then three calls against eager. After each step the caches must still be
    BUFFER inputs with a BUFFER_MUTATION output, read by the graph, never constants."""
    from executorch.exir import EdgeCompileConfig, EdgeProgramManager, ExecutorchBackendConfig, to_edge
    from executorch.exir.passes.constant_prop_pass import constant_prop_pass
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    model = _model(KVCacheReadFirst)
    ep = torch.export.export(copy.deepcopy(model), _example(0))
    edge = to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    problems = _signature_problems("to_edge", edge.exported_program())
    details = [_describe("to_edge", edge.exported_program())]
    before = _cache_readers(edge.exported_program())  # the pass may rewrite its input in place
    propagated = constant_prop_pass(edge.exported_program())
    problems += _signature_problems("constant_prop_pass", propagated)
    frozen = graph_checks.constant_cache_writes(propagated)
    problems += [f"constant_prop_pass: {w.describe()}" for w in frozen]
    new = _new_constants(edge.exported_program(), propagated)
    after = _cache_readers(propagated)
    problems += [f"constant_prop_pass folded {before[fqn] - after.get(fqn, 0)} read(s) of the mutated buffer {fqn} "
                 f"into constant(s) {', '.join(new) or '?'}: those reads no longer see the state written by earlier calls"
                 for fqn in before if after.get(fqn, 0) < before[fqn]]
    details.append(_describe("constant_prop_pass", propagated))
    manager = EdgeProgramManager({"forward": propagated}, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    config = ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(list(CACHES))])
    program, pte = to_pte(manager, config)
    final = program.exported_program()
    problems += [f"memory planning/emission: {p}" for p in graph_checks.write_back_problems(final, list(CACHES))]
    run_problems, data = _run_steps(pte, model, atol=1e-4, rtol=1e-4)
    return _finish("export -> to_edge -> constant_prop_pass -> to_executorch (portable)",
                   problems + run_problems, details, data)


PROBES = [
    ("kv_cache_fp", kv_cache_fp),
    ("kv_cache_quantized", kv_cache_quantized),
    ("kv_cache_through_passes", kv_cache_through_passes),
]
