"""Multi-method lowering probes: several methods, per-method partitioners, shared nodes.

Seed: executorch PR 10584 (QNN multi-method). Lowering several methods into one program broke
`test_multi_method_to_backend_two_methods_different_backends`: nodes shared by several
delegated subgraphs (the sin/cos frequencies of sharded llama) left getitem nodes dangling
because delegate input/output names were matched wrongly. These probes lower real
multi-method programs, read the lowered graphs (which backend each method got, every
delegate's getitems and inputs) and run every method on the runtime against eager.
"""
from __future__ import annotations

import torch

from tasks.probes import graph_checks
from tasks.probes.records import ProbeFailure
from tasks.probes.runtime import LoadedProgram, import_optional, require_backends, to_pte

XNNPACK = "XnnpackBackend"


class NoDelegation:
    """A partitioner that keeps its method on the portable kernels (tags nothing)."""

    def __new__(cls):
        from executorch.exir.backend.partitioner import Partitioner, PartitionResult

        class NoDelegationPartitioner(Partitioner):
            def partition(self, exported_program):
                return PartitionResult(tagged_exported_program=exported_program, partition_tags={})

        return NoDelegationPartitioner()


def submodule_partitioner(backend_id: str, submodules: tuple[str, ...]):
    """Tag the ops of each named submodule as its own delegate for `backend_id`.

    A constant read by several delegates is tagged with the first; ExecuTorch must then copy it
    for the others (`_maybe_duplicate_constant_nodes`), which is the path the seed broke.
    """
    from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult

    class SubmodulePartitioner(Partitioner):
        def partition(self, exported_program):
            spec = DelegationSpec(backend_id, [])
            tags = {}
            for node in exported_program.graph.nodes:
                if node.op != "call_function":
                    continue
                paths = [path for path, _ in (node.meta.get("nn_module_stack") or {}).values()]
                owner = next((s for s in submodules if s in paths), None)
                if owner is None:
                    continue
                node.meta["delegation_tag"] = owner
                tags[owner] = spec
                for arg in node.all_input_nodes:
                    if arg.op == "placeholder" and _is_constant(exported_program, arg):
                        arg.meta.setdefault("delegation_tag", owner)
            return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)

    return SubmodulePartitioner()


def _is_constant(ep, node) -> bool:
    sig = ep.graph_signature
    return node.name in sig.inputs_to_parameters or node.name in sig.inputs_to_buffers or (
        node.name in sig.inputs_to_lifted_tensor_constants
    )


# ---- shared checks -----------------------------------------------------------------------


def _routing_problems(method_programs: dict, expected: dict[str, tuple[str, ...]], partitioners: dict) -> list[str]:
    """Each method's delegates must come from the backends its own partitioner targets."""
    problems = []
    for method, want in expected.items():
        got = [d.backend_id for d in graph_checks.delegates(method_programs[method])]
        if list(want) != got:
            given = type(partitioners[method]).__name__
            problems.append(
                f"{graph_checks.ROUTED_WRONGLY}: method '{method}' was given {given} "
                f"(expects delegates {list(want) or 'none (portable)'}) but was lowered to {got or 'no delegate'}"
            )
    return problems


def _structure_problems(method_programs: dict) -> list[str]:
    problems = []
    for method, ep in method_programs.items():
        problems.extend(graph_checks.getitem_problems(ep, method))
    return problems


def _output_problems(method: str, got: list, expected, atol: float = 1e-4, rtol: float = 1e-4) -> list[str]:
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    if len(got) != len(expected):
        return [f"method '{method}': runtime returned {len(got)} outputs, eager {len(expected)}"]
    problems = []
    for i, (g, e) in enumerate(zip(got, expected)):
        if g.shape != e.shape:
            problems.append(f"method '{method}' output #{i}: shape {list(g.shape)} != eager {list(e.shape)}")
        elif not torch.allclose(g, e, atol=atol, rtol=rtol):
            problems.append(
                f"method '{method}' output #{i}: numerical mismatch, max abs err {float((g - e).abs().max()):.4g}"
            )
    return problems


def _delegate_details(method_programs: dict) -> dict:
    return {
        method: [
            {"node": d.node, "backend_id": d.backend_id, "outputs": d.num_outputs, "getitems": d.getitems}
            for d in graph_checks.delegates(ep)
        ]
        for method, ep in method_programs.items()
    }


def _raise_if(problems: list[str], headline: str, data: dict) -> None:
    if problems:
        raise ProbeFailure(f"{headline}: {problems[0]}", [f"problem: {p}" for p in problems], data)


def _lower_and_check(edge, partitioners: dict, expected: dict) -> tuple[object, list[str], dict]:
    """EdgeProgramManager.to_backend({method: partitioner}) and read what came out."""
    lowered = edge.to_backend(partitioners)
    programs = {m: lowered.exported_program(m) for m in partitioners}
    problems = _routing_problems(programs, expected, partitioners) + _structure_problems(programs)
    return lowered, problems, {"delegates": _delegate_details(programs)}


# ---- probes -------------------------------------------------------------------------------


class Forward(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.linear(x)) + x


class Decode(torch.nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0


def per_method_partitioners() -> dict:
    """Two methods, two partitioners: 'forward' on XNNPACK, 'decode' on the portable kernels."""
    require_backends(XNNPACK)
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge

    torch.manual_seed(0)
    models = {"forward": Forward().eval(), "decode": Decode().eval()}
    inputs = {"forward": (torch.randn(2, 8),), "decode": (torch.randn(2, 8),)}
    with torch.no_grad():
        eps = {m: torch.export.export(models[m], inputs[m]) for m in models}
    partitioners = {"forward": XnnpackPartitioner(), "decode": NoDelegation()}
    lowered, problems, data = _lower_and_check(
        to_edge(eps), partitioners, {"forward": (XNNPACK,), "decode": ()}
    )
    _raise_if(problems, "two methods on XNNPACK + portable", data)
    _, pte = to_pte(lowered)
    program = LoadedProgram(pte)
    for method in models:
        with torch.no_grad():
            expected = models[method](*inputs[method])
        problems += _output_problems(method, program.run(method, inputs[method]), expected)
    _raise_if(problems, "two methods on XNNPACK + portable", data)
    return data


class AddSinCosSub(torch.nn.Module):
    def forward(self, x):
        y = torch.sin(x + x)
        return torch.cos(y) - x


class SinAdd(torch.nn.Module):
    def forward(self, x):
        return torch.sin(x) + x


def two_methods_different_backends() -> dict:
    """The seed's failing test, as a probe: per-method partitioners on two demo backends.

    'first_second' splits into FirstBackendWithPreprocessAll (add, sin) and
    SecondBackendWithPreprocessAll (cos, sub); 'all_first' sends everything to the first
    backend through its own partitioner. The demo backends exist only at lowering time (the
    runtime does not register them), so this probe checks the lowered programs only.
    """
    from executorch.exir import to_edge
    from executorch.exir.backend.backend_api import MethodProgramsPartitionerSpec, to_backend
    from executorch.exir.backend.canonical_partitioners.all_node_partitioner import AllNodePartitioner
    from executorch.exir.backend.compile_spec_schema import CompileSpec

    # The demo backends ship with the wheel's tests; a slimmer build may leave them out.
    demo = import_optional("executorch.exir.backend.test.backend_with_preprocess_all_demo", may_be_absent=True)
    first, second = "FirstBackendWithPreprocessAll", "SecondBackendWithPreprocessAll"
    x = (torch.ones(3),)
    programs = {
        "first_second": to_edge(torch.export.export(AddSinCosSub(), x)).exported_program(),
        "all_first": to_edge(torch.export.export(SinAdd(), x)).exported_program(),
    }
    partitioners = {
        "first_second": demo.BackendWithPreprocessAllPartitioner(),
        "all_first": AllNodePartitioner(first, [CompileSpec("method", b"all_first")]),
    }
    lowered = to_backend(MethodProgramsPartitionerSpec(programs, partitioners))
    expected = {"first_second": (first, second), "all_first": (first,)}
    problems = _routing_problems(lowered, expected, partitioners) + _structure_problems(lowered)
    for d in graph_checks.delegates(lowered["all_first"]):
        if d.compile_specs.get("method") != b"all_first":
            problems.append(
                f"{graph_checks.ROUTED_WRONGLY}: method 'all_first' delegate {d.node} carries compile specs "
                f"{sorted(d.compile_specs)}, not {['method']} from its own partitioner AllNodePartitioner"
            )
    data = {"delegates": _delegate_details(lowered), "runtime": "not run: demo backends are lowering-only"}
    _raise_if(problems, "two methods on different backends", data)
    return data


class RopeHalf(torch.nn.Module):
    """One rotary half (q or k); becomes one delegate with two outputs of different shapes."""

    def forward(self, x, cos, sin, freq):
        rotated = x * cos - x * sin * freq
        flat = (x * sin).reshape(-1)
        return rotated, flat


class SharedRope(torch.nn.Module):
    """sin/cos of a shared frequency table feed two delegates (q_rope, k_rope), which also both
    read the table itself; their outputs are consumed in the reverse of the produced order."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", torch.linspace(0.05, 1.0, 8))
        self.q_rope = RopeHalf()
        self.k_rope = RopeHalf()

    def forward(self, q, k, pos):
        angles = pos * self.inv_freq
        cos, sin = torch.cos(angles), torch.sin(angles)
        q_rot, q_flat = self.q_rope(q, cos, sin, self.inv_freq)
        k_rot, k_flat = self.k_rope(k, cos, sin, self.inv_freq)
        k_gate = torch.tanh(k_flat).reshape(k_rot.shape)  # second output of the second delegate first
        q_gate = torch.sigmoid(q_flat).reshape(q_rot.shape)
        return q_rot * k_gate, k_rot * q_gate, torch.tanh(q_rot + k_rot)


def rope_inputs() -> dict[str, tuple]:
    """SharedRope's two methods' arguments: a 4-token prefill, then one decode step."""
    return {"prefill": (torch.randn(4, 8), torch.randn(4, 8), torch.arange(4.0).reshape(4, 1)),
            "decode": (torch.randn(1, 8), torch.randn(1, 8), torch.tensor([[4.0]]))}


def shared_nodes_across_delegates() -> dict:
    """'prefill' and 'decode' of a rope-like block, each split into two XNNPACK delegates that
    share computed nodes (cos, sin) and a constant (inv_freq)."""
    require_backends(XNNPACK)
    from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend  # noqa: F401 (registers it)
    from executorch.exir import to_edge

    torch.manual_seed(0)
    model = SharedRope().eval()
    inputs = rope_inputs()
    eps = {m: torch.export.export(model, args) for m, args in inputs.items()}
    partitioners = {m: submodule_partitioner(XNNPACK, ("q_rope", "k_rope")) for m in inputs}
    lowered, problems, data = _lower_and_check(
        to_edge(eps), partitioners, {m: (XNNPACK, XNNPACK) for m in inputs}
    )
    _raise_if(problems, "shared nodes across delegates", data)
    _, pte = to_pte(lowered)
    program = LoadedProgram(pte)
    for method, args in inputs.items():
        problems += _output_problems(method, program.run(method, args), model(*args))
    _raise_if(problems, "shared nodes across delegates", data)
    return data


PROBES = [
    ("per_method_partitioners", per_method_partitioners),
    ("two_methods_different_backends", two_methods_different_backends),
    ("shared_nodes_across_delegates", shared_nodes_across_delegates),
]
