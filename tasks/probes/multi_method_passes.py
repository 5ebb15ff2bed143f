"""Multi-method probe along the whole way down: prefill and decode sharing a KV cache.

Both seeds at once. A program with two methods over one model, `prefill` lowered to XNNPACK
and `decode` kept on the portable kernels (per-method partitioners, the first seed's setting),
both writing the KV cache (the second seed's state). The probe walks every step between export
and the runtime -- export, to_edge, delegate lowering, constant propagation, to_executorch
(memory planning with the cache shared across methods), emission, runtime load -- and after
each checks what the seeds lost: every method is still there under its name, each has the
delegates its partitioner as_lowered, each cache stays a mutated buffer (never a constant, never
owned by a delegate, memory of its own, the same memory in both methods), and what the
runtime loads matches what lowering as_lowered.

The Python runtime gives every loaded method memory of its own, so state is checked within
each method (three calls against eager), not across methods; that the methods share the
cache is checked in the emitted program.
"""
from __future__ import annotations

import copy

import torch

from tasks.probes import graph_checks
from tasks.probes.multi_method import XNNPACK, NoDelegation
from tasks.probes.mutable_buffer import CACHES, KVCache
from tasks.probes.records import ProbeFailure
from tasks.probes.runtime import import_optional, require_backends

HEADLINE = "prefill (XNNPACK) + decode (portable) sharing a KV cache"
FQNS = list(CACHES)
STEPS = 3
PREFILL_LEN = 3
# method -> the delegates its partitioner means: XNNPACK only (at least one), or none
EXPECTED_BACKENDS = {"prefill": {XNNPACK}, "decode": set()}


class ScaledCacheRead(KVCache):
    """KVCache that also reads k_cache before this call's write through an op XNNPACK takes, so
    in 'prefill' a delegate reads the mutated buffer directly: it must receive it as an input on
    every call, never keep a copy from lowering time."""

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        earlier = (self.k_cache * 0.5).sum(0, keepdim=True)
        return super().forward(x, pos) + earlier


def _model() -> ScaledCacheRead:
    torch.manual_seed(0)
    model = ScaledCacheRead(max_seq=PREFILL_LEN + STEPS).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def _inputs(method: str, step: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """prefill writes positions 0..2 on every call; decode writes one position per call after them."""
    g = torch.Generator().manual_seed(seed * 100 + step)
    if method == "prefill":
        return torch.randn(PREFILL_LEN, 8, generator=g), torch.arange(PREFILL_LEN)
    return torch.randn(1, 8, generator=g), torch.tensor([PREFILL_LEN + step])


class Walk:
    """Problems found along the way, each saying after which step and in which method; the
    evidence is each method's cache signature wherever a step changed it."""

    def __init__(self):
        self.problems: list[str] = []
        self.details: list[str] = []
        self._last: dict[str, str] = {}

    def check(self, step: str, method: str | None, problems: list[str]) -> None:
        where = ("at " if step.startswith("runtime") else "after ") + step + ": "
        where += f"method '{method}': " if method else ""
        self.problems += [where + p for p in problems]

    def methods(self, step: str, present) -> None:
        want, got = sorted(EXPECTED_BACKENDS), sorted(present)
        if want != got:
            self.check(step, None, [f"expected methods {want}, got {got}"])

    def caches(self, step: str, programs: dict) -> None:
        self.methods(step, programs)
        for method in sorted(programs):
            self.check(step, method, graph_checks.cache_problems(programs[method], FQNS))
            state = graph_checks.signature_summary(programs[method], FQNS).describe(FQNS)
            if self._last.get(method) != state:
                self.details.append(f"{step}: {method}: {state}")
                self._last[method] = state

    def delegates(self, step: str, programs: dict, as_lowered: dict[str, list[str]] | None = None) -> dict:
        """Each method's delegates must be what its partitioner targets (at lowering), then stay
        what lowering made; no delegate may own a cache."""
        found = {m: [d.backend_id for d in graph_checks.delegates(ep)] for m, ep in sorted(programs.items())}
        for method, got in found.items():
            want = EXPECTED_BACKENDS.get(method, set())
            if as_lowered is not None and got != as_lowered.get(method):
                self.check(step, method, [f"expected delegates {as_lowered.get(method)} (as lowered), got {got}"])
            elif as_lowered is None and (set(got) != want or (want and not got)):
                expected = f"only {sorted(want)}" if want else "none (portable)"
                self.check(step, method, [f"{graph_checks.ROUTED_WRONGLY}: expected delegates {expected}, "
                                          f"got {got or 'none'}"])
            self.check(step, method, graph_checks.delegate_constant_problems(programs[method], FQNS))
        return found


def _export(walk: Walk, model: torch.nn.Module):
    """torch.export each method, then to_edge over all of them."""
    from executorch.exir import EdgeCompileConfig, to_edge

    exported = {m: torch.export.export(copy.deepcopy(model), _inputs(m, 0)) for m in EXPECTED_BACKENDS}
    # torch.export keeps in-place writes; BUFFER_MUTATION outputs appear once functionalised.
    walk.caches("export", {m: ep.run_decompositions({}) for m, ep in exported.items()})
    edge = to_edge(exported, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    walk.caches("to_edge", {m: edge.exported_program(m) for m in edge.methods})
    return edge


def _lower(walk: Walk, edge) -> tuple[object, dict[str, list[str]]]:
    """EdgeProgramManager.to_backend with a partitioner per method."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    lowered = edge.to_backend({"prefill": XnnpackPartitioner(), "decode": NoDelegation()})
    programs = {m: lowered.exported_program(m) for m in lowered.methods}
    walk.caches("delegate lowering", programs)
    for method, ep in sorted(programs.items()):
        walk.check("delegate lowering", method, graph_checks.getitem_problems(ep, method))
    return lowered, walk.delegates("delegate lowering", programs)


def _fold(walk: Walk, lowered):
    """constant_prop_pass on each lowered method, where to_executorch runs it
    (do_quant_fusion_and_const_prop); before lowering it would fold the weight transposes
    XNNPACK's linear matching needs. A read of a cache must never be folded."""
    from executorch.exir import EdgeCompileConfig, EdgeProgramManager
    from executorch.exir.passes.constant_prop_pass import constant_prop_pass

    folded = {}
    for method in sorted(lowered.methods):
        before = graph_checks.cache_reads(lowered.exported_program(method), FQNS)  # the pass may rewrite in place
        folded[method] = constant_prop_pass(lowered.exported_program(method))
        after = graph_checks.cache_reads(folded[method], FQNS)
        walk.check("constant propagation", method, [
            f"{before[f] - after.get(f, 0)} read(s) of the mutated buffer {f} were folded into constants"
            for f in before if after.get(f, 0) < before[f]])
    walk.caches("constant propagation", folded)
    return EdgeProgramManager(folded, compile_config=EdgeCompileConfig(_check_ir_validity=False))


def _to_executorch(walk: Walk, edge, as_lowered: dict[str, list[str]]):
    """to_executorch: write-back, memory planning (caches shared across methods), emission."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    config = ExecutorchBackendConfig(
        passes=[InitializedMutableBufferPass(FQNS)],  # the caches start from their eager value
        memory_planning_pass=MemoryPlanningPass(share_mutable_buffers=True),
        emit_mutable_buffer_names=True,
    )
    program = edge.to_executorch(config)
    step = "to_executorch (memory planning)"
    programs = {m: program.exported_program(m) for m in program.methods}
    walk.methods(step, programs)
    placed = {}
    for method, ep in sorted(programs.items()):
        walk.check(step, method, graph_checks.write_back_problems(ep, FQNS))
        walk.check(step, method, graph_checks.placement_problems(ep, FQNS))
        placed[method] = graph_checks.placements(ep, FQNS)
    walk.delegates(step, programs, as_lowered)
    for fqn in FQNS:
        where = {m: p[fqn] for m, p in placed.items() if fqn in p}
        if len({(p.mem_id, p.offset) for p in where.values()}) > 1:
            places = ", ".join(f"'{m}' at {p.describe()}" for m, p in sorted(where.items()))
            walk.check(step, None, [f"{fqn} is one buffer shared by the methods but is planned at different places "
                                    f"({places}): what one method writes, the other never reads"])
    walk.details += [f"{step}: {m}: " + "; ".join(f"{f} at {p.describe()}" for f, p in sorted(placed[m].items()))
                     for m in sorted(placed)]
    _check_emitted(walk, program.executorch_program, as_lowered, placed)
    return program


def _check_emitted(walk: Walk, emitted, as_lowered: dict[str, list[str]], placed: dict) -> None:
    """The Program the runtime loads: its methods, their delegates, the caches' memory."""
    step = "emission"
    methods = graph_checks.emitted_methods(emitted)
    walk.methods(step, methods)
    for name, method in sorted(methods.items()):
        problems = []
        if method.delegates != as_lowered.get(name):
            problems.append(f"expected delegates {as_lowered.get(name)} (as lowered), got {method.delegates}")
        for fqn in FQNS:
            planned = placed.get(name, {}).get(fqn)
            want = planned.describe() if planned else "a planned place"
            if fqn not in method.buffers:
                problems.append(f"no emitted tensor is named {fqn} (expected the mutable buffer at {want})")
            elif method.buffers[fqn] is None:
                problems.append(f"{fqn} is emitted as constant data, expected a mutable buffer at {want}")
            elif planned is not None and method.buffers[fqn] != (planned.mem_id, planned.offset):
                got_id, got_offset = method.buffers[fqn]
                problems.append(f"{fqn} is emitted at mem_id {got_id} offset {got_offset}, planned at {want}")
        walk.check(step, name, problems)


def _run(walk: Walk, pte: bytes, model: torch.nn.Module) -> dict:
    """Load the program, run each method three times against its own eager copy, then compare
    the caches the runtime holds with eager's; two inputs must give two outputs."""
    bindings = import_optional("executorch.extension.pybindings.portable_lib")
    program = bindings._load_program_from_buffer(pte)
    present = [program.get_method_name(i) for i in range(program.num_methods())]
    walk.methods("runtime load", present)
    errors = {}
    for method in sorted(set(EXPECTED_BACKENDS) & set(present)):
        loaded, eager = program.load_method(method), copy.deepcopy(model)
        problems, errors[method] = [], []
        for step in range(STEPS):
            args = _inputs(method, step)
            expected, got = eager(*args), loaded.call(args)[0]
            errors[method].append(float((got - expected).abs().max()))
            if not torch.allclose(got, expected, atol=1e-4, rtol=1e-4):
                problems.append(f"call {step + 1}/{STEPS}: output differs from eager by {errors[method][-1]:.4g}")
        problems += _state_problems(loaded, eager)
        first = program.load_method(method).call(_inputs(method, 0, seed=1))[0]
        second = program.load_method(method).call(_inputs(method, 0, seed=2))[0]
        if torch.allclose(first, second):
            problems.append("two different inputs gave the same output (the cache is read as a constant)")
        walk.check("runtime", method, problems)
    return errors


def _state_problems(loaded, eager: torch.nn.Module) -> list[str]:
    """The caches a loaded method holds (named attributes) against eager's, after the same calls."""
    problems = []
    for fqn in FQNS:
        try:
            held = loaded.get_attribute(fqn)
        except RuntimeError as exc:  # the binding's only error: the program does not name this tensor
            problems.append(f"the runtime holds no {fqn} ({exc})")
            continue
        want = getattr(eager, fqn)
        if not torch.allclose(held, want, atol=1e-4, rtol=1e-4):
            problems.append(f"after {STEPS} calls the runtime's {fqn} differs from eager's by "
                            f"{float((held - want).abs().max()):.4g}: the state it keeps is not what was written")
    return problems


def kv_cache_methods_through_passes() -> dict:
    """Two methods with a KV cache through every pass to the runtime (module docstring)."""
    require_backends(XNNPACK)
    model = _model()
    walk = Walk()
    lowered, as_lowered = _lower(walk, _export(walk, model))
    program = _to_executorch(walk, _fold(walk, lowered), as_lowered)
    errors = _run(walk, program.buffer, model)
    data = {"delegates": as_lowered, "max_abs_error_per_call": errors}
    if walk.problems:
        details = walk.details + [f"problem: {p}" for p in walk.problems]
        raise ProbeFailure(f"{HEADLINE}: {walk.problems[0]}", details, data)
    return data


PROBES = [("kv_cache_methods_through_passes", kv_cache_methods_through_passes)]
