"""Read a lowered ExportedProgram the way a reviewer would: delegates, getitems, signature,
where memory planning put the mutated buffers, and what the emitted Program tells the runtime.

Each check returns plain lines that name the node, delegate or buffer at fault, so a probe's
diagnosis can quote them directly. Nothing here runs a model.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
from torch.export.graph_signature import InputKind, OutputKind

# One check, one phrase, whichever probe runs it: a method's delegates are not those of the
# partitioner it was given. The pipeline groups probe failures by this kind of problem
# (triage_rules/roots.py), so the probes that caught one regression are one root cause.
ROUTED_WRONGLY = "partitioner map routed wrongly"


@dataclass
class Delegate:
    node: str  # the executorch_call_delegate node
    lowered: str  # the get_attr target holding the LoweredBackendModule
    backend_id: str
    compile_specs: dict[str, bytes]
    num_outputs: int
    getitems: dict[str, int] = field(default_factory=dict)  # getitem node -> index


def _is_delegate_call(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is torch.ops.higher_order.executorch_call_delegate


def _val_desc(val) -> str:
    if isinstance(val, torch.Tensor):
        return f"{str(val.dtype).replace('torch.', '')}{list(val.shape)}"
    return type(val).__name__


def delegates(ep) -> list[Delegate]:
    found = []
    for node in ep.graph.nodes:
        if not _is_delegate_call(node):
            continue
        lowered = getattr(ep.graph_module, node.args[0].target)
        vals = node.meta.get("val")
        found.append(
            Delegate(
                node=node.name,
                lowered=node.args[0].target,
                backend_id=lowered.backend_id,
                compile_specs={s.key: s.value for s in lowered.compile_specs},
                num_outputs=len(vals) if isinstance(vals, (list, tuple)) else 1,
                getitems={u.name: u.args[1] for u in node.users if u.target is operator.getitem},
            )
        )
    return found


def getitem_problems(ep, method: str) -> list[str]:
    """Dangling or mis-indexed getitems and leftover fused submodules, one line each."""
    problems = []
    nodes = set(ep.graph.nodes)
    for node in ep.graph.nodes:
        if node.op == "call_module":
            problems.append(f"{method}: submodule call {node.name} -> {node.target} was never replaced by a delegate call")
        if node.target is not operator.getitem:
            continue
        source, index = node.args[0], node.args[1]
        if not isinstance(source, torch.fx.Node) or source not in nodes:
            problems.append(f"{method}: dangling getitem {node.name}: its source {source} is not in the graph")
            continue
        if not _is_delegate_call(source):
            continue
        vals = source.meta.get("val")
        count = len(vals) if isinstance(vals, (list, tuple)) else 1
        if not isinstance(index, int) or not 0 <= index < count:
            problems.append(f"{method}: getitem {node.name} reads output {index} of {source.name}, which has {count} outputs")
            continue
        want, got = vals[index], node.meta.get("val")
        if isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor) and (
            want.shape != got.shape or want.dtype != got.dtype
        ):
            backend = getattr(ep.graph_module, source.args[0].target).backend_id
            problems.append(
                f"{method}: getitem {node.name} reads output #{index} of {source.name} [{backend}] ({_val_desc(want)}) "
                f"but was traced as {_val_desc(got)}: delegate outputs and getitem indices disagree"
            )
    problems.extend(_delegate_input_problems(ep, method))
    return problems


def _delegate_input_problems(ep, method: str) -> list[str]:
    """A delegate's call arguments must line up with its lowered program's user inputs."""
    problems = []
    for node in ep.graph.nodes:
        if not _is_delegate_call(node):
            continue
        lowered = getattr(ep.graph_module, node.args[0].target)
        program = lowered.original_module
        user_inputs = list(program.graph_signature.user_inputs)
        args = [a for a in node.args[1:]]
        if len(args) != len(user_inputs):
            problems.append(
                f"{method}: {node.name} ({lowered.backend_id}) is called with {len(args)} inputs "
                f"but its program takes {len(user_inputs)}: {user_inputs}"
            )
            continue
        placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
        for position, (arg, name) in enumerate(zip(args, user_inputs)):
            want = placeholders[name].meta.get("val") if name in placeholders else None
            got = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
            if isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor) and want.shape != got.shape:
                problems.append(
                    f"{method}: {node.name} input #{position} is {arg} ({_val_desc(got)}) "
                    f"but the delegate expects {name} ({_val_desc(want)})"
                )
    return problems


# ---- graph signature -------------------------------------------------------------------


@dataclass
class BufferState:
    fqn: str
    input_name: str | None  # placeholder name when the buffer is a BUFFER input
    mutated_by: str | None  # op producing its BUFFER_MUTATION output
    read: bool  # the placeholder has users

    def describe(self) -> str:
        if self.input_name is None:
            return f"{self.fqn} missing from inputs"
        state = f"{self.input_name} BUFFER"
        state += f" -> BUFFER_MUTATION({self.mutated_by})" if self.mutated_by else " (not mutated)"
        return state if self.read else state + " (unused)"


@dataclass
class SignatureSummary:
    buffers: dict[str, BufferState]
    constants: list[str]  # inputs that are params / constant tensors / unmutated buffers
    mutations: int  # number of BUFFER_MUTATION outputs

    def describe(self, fqns: list[str]) -> str:
        return "; ".join(self.buffers[f].describe() for f in fqns)


def _op_name(node) -> str:
    """`index_put` for aten.index_put.default, edge or not; `getitem`; `placeholder:x`."""
    if not isinstance(node, torch.fx.Node):
        return str(node)
    if node.op != "call_function":
        return f"{node.op}:{node.target}"
    name = str(getattr(node.target, "__name__", None) or node.target)
    parts = name.split(".")
    return parts[1] if parts[0] == "aten" and len(parts) > 1 else parts[0]


CACHE_WRITE_OPS = ("index_put", "index_put_", "index_copy", "index_copy_")


@dataclass
class CacheWrite:
    node: str
    op: str
    source: str  # the placeholder written into
    kind: str  # what that placeholder is in the signature

    def describe(self) -> str:
        return f"{self.node} ({self.op}) writes into a copy of {self.source} ({self.kind}), not a mutable buffer"


def constant_cache_writes(ep) -> list[CacheWrite]:
    """index_put/index_copy on a placeholder that is not a mutated buffer: the signature of a
    cache that was turned into a constant (its update is computed, then dropped)."""
    sig = ep.graph_signature
    mutated = set(sig.buffers_to_mutate.values())
    found = []
    for node in ep.graph.nodes:
        if _op_name(node) not in CACHE_WRITE_OPS:
            continue
        source = node.args[0]
        if not isinstance(source, torch.fx.Node) or source.op != "placeholder":
            continue
        fqn = sig.inputs_to_buffers.get(source.name)
        if fqn in mutated:
            continue
        if fqn:
            kind = f"buffer {fqn}, never mutated"
        elif source.name in sig.inputs_to_parameters:
            kind = "parameter"
        elif source.name in sig.inputs_to_lifted_tensor_constants:
            kind = "constant tensor"
        else:
            kind = "user input"
        found.append(CacheWrite(node.name, _op_name(node), source.name, kind))
    return found


def signature_summary(ep, fqns: list[str]) -> SignatureSummary:
    sig = ep.graph_signature
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    output_args = list(ep.graph.output_node().args[0])
    producers = {}
    mutations = 0
    for spec, arg in zip(sig.output_specs, output_args):
        if spec.kind == OutputKind.BUFFER_MUTATION:
            mutations += 1
            producers[spec.target] = _op_name(arg)
    constants = []
    inputs_for = {}
    for spec in sig.input_specs:
        if spec.kind == InputKind.BUFFER:
            inputs_for[spec.target] = spec.arg.name
            if spec.target not in producers:
                constants.append(f"{spec.arg.name} (buffer {spec.target}, not mutated)")
        elif spec.kind in (InputKind.PARAMETER, InputKind.CONSTANT_TENSOR):
            constants.append(f"{spec.arg.name} ({spec.kind.name.lower()})")
    buffers = {}
    for fqn in fqns:
        name = inputs_for.get(fqn)
        node = placeholders.get(name) if name else None
        buffers[fqn] = BufferState(fqn, name, producers.get(fqn), bool(node is not None and node.users))
    return SignatureSummary(buffers, constants, mutations)


def write_back_problems(ep, fqns: list[str]) -> list[str]:
    """After to_executorch every mutated buffer must be written back into its own placeholder
    (a `copy_` into it, an in-place op on it or an out-variant writing to it); otherwise the
    runtime computes the new value and drops it."""
    buffer_inputs = {
        spec.target: spec.arg.name for spec in ep.graph_signature.input_specs if spec.kind == InputKind.BUFFER
    }
    problems = []
    for fqn in fqns:
        name = buffer_inputs.get(fqn)
        placeholder = next((n for n in ep.graph.nodes if n.op == "placeholder" and n.name == name), None)
        if placeholder is None:
            continue  # reported by the signature check
        if not any(_writes_into(user, placeholder) for user in placeholder.users):
            readers = ", ".join(f"{u.name} ({_op_name(u)})" for u in placeholder.users) or "nothing"
            problems.append(
                f"{fqn}: nothing writes back into {name} after to_executorch (its users: {readers}); "
                "the runtime computes the update and drops it"
            )
    return problems


def _writes_into(node: torch.fx.Node, placeholder: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return False
    if node.kwargs.get("out") is placeholder:
        return True
    schema = getattr(node.target, "_schema", None)
    return bool(schema and schema.name.endswith("_") and node.args and node.args[0] is placeholder)


# ---- mutated buffers along the way down -----------------------------------------------------


def cache_problems(ep, fqns: list[str]) -> list[str]:
    """Each buffer in `fqns` must be a BUFFER input with a BUFFER_MUTATION output, read by the
    graph, and no cache write may start from a copy of it (a constant)."""
    return signature_problems(ep, fqns) + [write.describe() for write in constant_cache_writes(ep)]


def signature_problems(ep, fqns: list[str]) -> list[str]:
    """What the graph signature says is wrong with each mutated buffer in `fqns`."""
    problems = []
    for fqn, state in signature_summary(ep, fqns).buffers.items():
        if state.input_name is None:
            problems.append(f"{fqn} is missing from the BUFFER inputs")
        elif state.mutated_by is None:
            problems.append(f"{fqn} ({state.input_name}) has no BUFFER_MUTATION output")
        elif not state.read:
            problems.append(f"{fqn} ({state.input_name}) is never read; its update starts from a constant")
    return problems


def _buffer_inputs(ep, fqns: list[str]) -> dict[str, str]:
    """placeholder name -> fqn, for the buffers in `fqns`."""
    return {name: fqn for name, fqn in ep.graph_signature.inputs_to_buffers.items() if fqn in fqns}


def cache_reads(ep, fqns: list[str]) -> dict[str, int]:
    """fqn -> how many graph nodes use the buffer's input placeholder."""
    by_input = _buffer_inputs(ep, fqns)
    return {by_input[n.name]: len(n.users) for n in ep.graph.nodes if n.op == "placeholder" and n.name in by_input}


def delegate_constant_problems(ep, fqns: list[str]) -> list[str]:
    """No delegate may own a mutated buffer as its own data: it would compute with the value it
    had at lowering time, whatever earlier calls wrote (the second seed, inside a delegate)."""
    problems = []
    for d in delegates(ep):
        sig = getattr(ep.graph_module, d.lowered).original_module.graph_signature
        owned = {**sig.inputs_to_buffers, **sig.inputs_to_parameters, **sig.inputs_to_lifted_tensor_constants}
        problems += [
            f"delegate {d.node} [{d.backend_id}] holds {fqn} as its own constant data ({name}); "
            "expected the mutated buffer as a delegate input"
            for name, fqn in owned.items() if fqn in fqns
        ]
    return problems


@dataclass(frozen=True)
class Placement:
    """Where memory planning put a tensor: arena (mem_id), byte offset and size."""

    mem_id: int | None
    offset: int | None
    size: int

    def describe(self) -> str:
        if self.mem_id is None or self.offset is None:
            return "not memory planned"
        return f"mem_id {self.mem_id} bytes [{self.offset}, {self.offset + self.size})"

    def overlaps(self, other: "Placement") -> bool:
        return (None not in (self.mem_id, self.offset, other.mem_id, other.offset) and self.mem_id == other.mem_id
                and self.offset < other.offset + other.size and other.offset < self.offset + self.size)


def _specs(node: torch.fx.Node) -> list:
    from executorch.exir.tensor import TensorSpec  # deferred: importing this module must not load executorch

    spec = node.meta.get("spec")
    return [s for s in (spec if isinstance(spec, (list, tuple)) else [spec]) if isinstance(s, TensorSpec)]


def _buffer_specs(ep, fqns: list[str]) -> dict[torch.fx.Node, object]:
    """placeholder -> its TensorSpec (set by to_executorch), for the buffers in `fqns`."""
    by_input = _buffer_inputs(ep, fqns)
    return {n: _specs(n)[0] for n in ep.graph.nodes if n.op == "placeholder" and n.name in by_input and _specs(n)}


def placements(ep, fqns: list[str]) -> dict[str, Placement]:
    """After to_executorch: where each buffer's input placeholder lives."""
    by_input = _buffer_inputs(ep, fqns)
    return {by_input[node.name]: Placement(spec.mem_id, spec.mem_offset, spec.allocated_memory)
            for node, spec in _buffer_specs(ep, fqns).items()}


def placement_problems(ep, fqns: list[str]) -> list[str]:
    """A mutated buffer keeps its value between calls, so memory planning must give it memory of
    its own: planned (not constant data), and shared with no other tensor of the method."""
    by_input, buffers = _buffer_inputs(ep, fqns), _buffer_specs(ep, fqns)
    buffer_ids = {id(spec) for spec in buffers.values()}
    problems = []
    for node, spec in buffers.items():
        fqn, mine = by_input[node.name], Placement(spec.mem_id, spec.mem_offset, spec.allocated_memory)
        if mine.mem_id is None or mine.offset is None:
            problems.append(f"{fqn} ({node.name}) is not memory planned: the runtime has no memory to keep it in")
            continue
        for other in ep.graph.nodes:
            if other in buffers and by_input[other.name] <= fqn:
                continue  # itself, or a pair of buffers already compared
            for other_spec in _specs(other):
                if other not in buffers and buffer_ids & {id(other_spec), id(other_spec.inplace_base)}:
                    continue  # a buffer's write-back lives in that buffer's memory
                theirs = Placement(other_spec.mem_id, other_spec.mem_offset, other_spec.allocated_memory)
                if mine.overlaps(theirs):
                    what = by_input.get(other.name, other.name)
                    problems.append(f"{fqn} ({mine.describe()}) shares memory with {what} ({theirs.describe()}): "
                                    "writing one overwrites the other")
    return problems


# ---- the emitted program -----------------------------------------------------------------------


@dataclass
class EmittedMethod:
    """One execution plan of the emitted Program, as the runtime will load it."""

    name: str
    delegates: list[str]  # backend ids, in plan order
    buffers: dict[str, tuple[int, int] | None]  # named tensor -> (mem_id, offset); None: constant data


def emitted_methods(program) -> dict[str, EmittedMethod]:
    """Read an executorch schema Program (ExecutorchProgramManager.executorch_program). Tensors
    carry their names when emitted with emit_mutable_buffer_names."""
    methods = {}
    for plan in program.execution_plan:
        buffers = {}
        for value in plan.values:
            info = getattr(value.val, "extra_tensor_info", None)
            if info is not None and info.fully_qualified_name:
                alloc = value.val.allocation_info
                buffers[info.fully_qualified_name] = (alloc.memory_id, alloc.memory_offset) if alloc else None
        methods[plan.name] = EmittedMethod(plan.name, [d.id for d in plan.delegates], buffers)
    return methods
