"""Program bundles: what a change's Python makes, and what a rebuilt runtime runs.

The exchange format between the two halves of a native run, defined here once:

    <bundle>/manifest.json
        {"format": 1, "programs": [Program...]}
    <bundle>/<program>/program.pte
    <bundle>/<program>/<method>/step<k>/input<i>.bin     raw little-endian tensor bytes
    <bundle>/<program>/<method>/step<k>/expected<j>.bin  eager's output j after step k

A Program has several methods (multi-method programs), each with one or more steps run on
ONE loaded Method in order (`--server_mode`): state kept across steps (mutable buffers, a KV
cache) is checked step by step against eager. Each tensor file carries its dtype and shape
in the manifest.

Halves:
- `python -m tasks.pipeline.programs export --out DIR --backends portable[,xnnpack]` runs in
  the sandbox with the change's Python first on sys.path and writes a bundle (the probes'
  models: tasks/probes/). It imports only the standard library, numpy, torch and executorch.
- `run_bundle(bundle, runner, out_dir, execute)` runs every method with an executor_runner
  command (a "runner command prefix" plus the binary, e.g. ["qemu-aarch64", "-L", ..., runner]);
  `execute(argv, log_path)` starts the process: the caller decides where (the sandbox here,
  a device over ssh elsewhere). `compare_bundle(bundle, out_dir)` reads what the runner wrote
  and compares it with eager. No transport lives in this module.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

FORMAT = 1
MANIFEST = "manifest.json"


@dataclass
class TensorFile:
    file: str  # relative to the bundle root
    dtype: str  # numpy dtype name: float32, int64, ...
    shape: list[int]


@dataclass
class Step:
    inputs: list[TensorFile]
    expected: list[TensorFile]


@dataclass
class MethodSpec:
    name: str
    steps: list[Step]


@dataclass
class Program:
    name: str  # unique in the bundle; also its folder
    suite: str  # multi_method | mutable_buffer: the probe suite (and triage category) it belongs to
    description: str
    pte: str  # relative to the bundle root
    methods: list[MethodSpec]
    needs: list[str] = field(default_factory=list)  # backends the runtime must have besides portable
    atol: float = 1e-4
    rtol: float = 1e-4

    @property
    def test_id(self) -> str:
        return f"{self.suite}::{self.name}"


@dataclass
class Outcome:
    """One program on one runner: passed | failed (a mismatch or a crash) | skipped."""

    program: Program
    outcome: str
    message: str = ""
    log: str = ""
    seconds: float = 0.0


def write_manifest(bundle: Path, programs: list[Program]) -> None:
    (bundle / MANIFEST).write_text(json.dumps({"format": FORMAT, "programs": [asdict(p) for p in programs]},
                                              indent=1))


def read_manifest(bundle: Path) -> list[Program]:
    data = json.loads((bundle / MANIFEST).read_text())
    if data.get("format") != FORMAT:
        raise ValueError(f"{bundle / MANIFEST}: format {data.get('format')!r}, expected {FORMAT}")
    programs = []
    for p in data["programs"]:
        methods = [MethodSpec(m["name"], [Step([TensorFile(**t) for t in s["inputs"]],
                                               [TensorFile(**t) for t in s["expected"]]) for s in m["steps"]])
                   for m in p.pop("methods")]
        programs.append(Program(methods=methods, **p))
    return programs


# ---- running a bundle --------------------------------------------------------------------

def method_script(program: Program, method: MethodSpec) -> str:
    """A POSIX sh script running one method's steps on ONE Method (`--server_mode`).

    Usage: sh SCRIPT BUNDLE_DIR OUT_DIR RUNNER [RUNNER ARGS...]. Before each step the step's
    inputs are copied over the files named by --inputs (the runner re-reads them per stdin
    line) and a line is sent; the step is done when every output file has its full size
    (a release runner logs nothing, not even "SERVER MODE DONE"), and those files are moved
    to OUT_DIR/<program>/<method>/step<k>/out-<i>.bin. A runner that dies ends the script.
    POSIX sh, mkfifo and wc only, so the same script runs on a device's shell."""
    n_inputs = len(method.steps[0].inputs)
    inputs = ",".join(f"$CUR/input{i}.bin" for i in range(n_inputs))
    lines = [
        "set -u",
        "trap '' PIPE  # a runner that died is reported with its log, not by killing this script",
        'BUNDLE=$1; OUT=$2; shift 2',
        f'CUR="$OUT/{program.name}/{method.name}/cur"',
        'rm -rf "$CUR"; mkdir -p "$CUR"; mkfifo "$CUR/in"',
        'ready() { for spec in "$@"; do f=${spec%:*}; [ -f "$f" ] || return 1; '
        '[ $(($(wc -c < "$f"))) -ge "${spec##*:}" ] || return 1; done; }',
        f'"$@" --model_path "$BUNDLE/{program.pte}" --method_name {shlex.quote(method.name)} '
        + (f'--inputs "{inputs}" ' if n_inputs else "")
        + '--output_file "$CUR/out" --server_mode --print_output none < "$CUR/in" > "$CUR/runner.log" 2>&1 &',
        "RUNNER=$!",
        'exec 3>"$CUR/in"',
        "STATUS=0",
    ]
    for k, step in enumerate(method.steps):
        step_dir = f'"$OUT/{program.name}/{method.name}/step{k}"'
        outputs = " ".join(f'"$CUR/out-{j}.bin:{_nbytes(t)}"' for j, t in enumerate(step.expected))
        lines += [f"if [ $STATUS = 0 ]; then",
                  f'  rm -f "$CUR"/out-*.bin; mkdir -p {step_dir}',
                  *(f'  cp "$BUNDLE/{t.file}" "$CUR/input{i}.bin"' for i, t in enumerate(step.inputs)),
                  f'  echo "etriage: step {k}"; echo step >&3 2>/dev/null',
                  f"  until ready {outputs}; do",
                  f'    kill -0 $RUNNER 2>/dev/null || {{ ready {outputs} || {{ '
                  f'echo "etriage: the runner stopped before step {k} finished"; STATUS=3; break; }}; }}',
                  "    sleep 0.01",
                  "  done",
                  *(f'  [ $STATUS = 0 ] && mv "$CUR/out-{j}.bin" {step_dir}/out-{j}.bin'
                    for j in range(len(step.expected))),
                  "fi"]
    lines += ["exec 3>&-", 'wait $RUNNER; CODE=$?', 'cat "$CUR/runner.log"',
              'echo "etriage: runner exit code $CODE"', '[ $STATUS = 0 ] || exit $STATUS', "exit $CODE"]
    return "\n".join(lines) + "\n"


def _nbytes(spec: TensorFile) -> int:
    count = 1
    for dim in spec.shape:
        count *= dim
    return count * np.dtype(spec.dtype).itemsize


Execute = Callable[[list[str], Path], "tuple[int | None, float, str]"]  # argv, log -> (code, seconds, log text)


def run_bundle(bundle: Path, runner: list[str], out_dir: Path, execute: Execute) -> dict[tuple[str, str], tuple]:
    """Run every method of every program; (program, method) -> (exit code, seconds, log text).
    The scripts are written to OUT_DIR/scripts/."""
    scripts = out_dir / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    done = {}
    for program in read_manifest(bundle):
        for method in program.methods:
            script = scripts / f"{program.name}.{method.name}.sh"
            script.write_text(method_script(program, method))
            done[(program.name, method.name)] = execute(
                ["sh", str(script), str(bundle), str(out_dir), *runner], scripts / f"{program.name}.{method.name}.log")
    return done


def _load(path: Path, spec: TensorFile) -> np.ndarray:
    return np.frombuffer(path.read_bytes(), dtype=np.dtype(spec.dtype)).reshape(spec.shape)


def compare_method(bundle: Path, out_dir: Path, program: Program, method: MethodSpec) -> list[str]:
    """What differs from eager, step by step (empty: the method matched at every step)."""
    problems = []
    for k, step in enumerate(method.steps):
        for j, spec in enumerate(step.expected):
            got_path = out_dir / program.name / method.name / f"step{k}" / f"out-{j}.bin"
            where = f"method '{method.name}' step {k + 1}/{len(method.steps)} output #{j}"
            if not got_path.is_file():
                return problems + [f"{where}: the runner wrote no output"]
            expected = _load(bundle / spec.file, spec)
            if got_path.stat().st_size != expected.nbytes:
                problems.append(f"{where}: {got_path.stat().st_size} bytes, eager {expected.nbytes}")
                continue
            got = _load(got_path, spec)
            if not np.allclose(got, expected, atol=program.atol, rtol=program.rtol):
                err = float(np.max(np.abs(got.astype(np.float64) - expected.astype(np.float64))))
                state = "; the earlier steps matched: the state kept across steps differs" if k and not problems else ""
                problems.append(f"{where}: numerical mismatch with eager, max abs err {err:.4g} "
                                f"(atol={program.atol}){state}")
    return problems


def judge(bundle: Path, out_dir: Path, runs: dict[tuple[str, str], tuple], runner_has: set[str]) -> list[Outcome]:
    """Each program's outcome from its methods' runs (see run_bundle) and outputs."""
    outcomes = []
    for program in read_manifest(bundle):
        missing = [b for b in program.needs if b not in runner_has]
        if missing:
            outcomes.append(Outcome(program, "skipped", f"needs a runtime with {', '.join(missing)}"))
            continue
        problems, logs, seconds = [], [], 0.0
        for method in program.methods:
            code, took, log = runs[(program.name, method.name)]
            seconds += took
            logs.append(f"--- method {method.name} (exit code {code}) ---\n{log[-4000:]}")
            if code != 0:
                why = "timed out" if code is None else f"exit code {code}"
                problems.append(f"method '{method.name}' crashed on the runtime ({why})")
            problems += compare_method(bundle, out_dir, program, method)
        message = f"ProbeFailure: [{SUITE_CATEGORY[program.suite]}] {program.description}: {problems[0]}" \
            if problems else ""
        text = "\n".join([message, *(f"problem: {p}" for p in problems[1:]), *logs]) if problems else ""
        outcomes.append(Outcome(program, "failed" if problems else "passed", message, text, round(seconds, 2)))
    return outcomes


SUITE_CATEGORY = {"multi_method": "multi_method_lowering", "mutable_buffer": "mutable_buffer"}


# ---- making a bundle (runs in the sandbox, with the change's Python) -----------------------

def _save(bundle: Path, rel: str, tensor) -> TensorFile:
    array = tensor.detach().contiguous().numpy()
    path = bundle / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(array.tobytes())
    return TensorFile(rel, str(array.dtype), list(array.shape))


def _program(bundle: Path, name: str, suite: str, description: str, pte: bytes,
             method_steps: dict[str, list[tuple[tuple, object]]], needs=(), atol=1e-4, rtol=1e-4) -> Program:
    """method -> [(inputs, eager outputs)] per step."""
    (bundle / name).mkdir(parents=True, exist_ok=True)
    (bundle / name / "program.pte").write_bytes(pte)
    methods = []
    for method, steps in method_steps.items():
        specs = []
        for k, (inputs, outputs) in enumerate(steps):
            outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
            base = f"{name}/{method}/step{k}"
            specs.append(Step([_save(bundle, f"{base}/input{i}.bin", t) for i, t in enumerate(inputs)],
                              [_save(bundle, f"{base}/expected{j}.bin", t) for j, t in enumerate(outputs)]))
        methods.append(MethodSpec(method, specs))
    return Program(name, suite, description, f"{name}/program.pte", methods, list(needs), atol, rtol)


def export_bundle(bundle: Path, backends: set[str]) -> list[Program]:
    """The probes' programs that a runtime with `backends` runs, made by the executorch first
    on sys.path (the change's overlay) and written as a bundle with eager's outputs."""
    import copy  # deferred: only the sandboxed export needs torch and the probes' models

    import torch
    from executorch.exir import ExecutorchBackendConfig, to_edge
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    from tasks.probes import multi_method, mutable_buffer  # deferred: sandbox side only (torch)

    bundle.mkdir(parents=True, exist_ok=True)
    programs = []
    torch.manual_seed(0)
    models = {"forward": multi_method.Forward().eval(), "decode": multi_method.Decode().eval()}
    steps = {"forward": [(torch.randn(2, 8),), (torch.randn(2, 8),)], "decode": [(torch.randn(2, 8),)]}
    with torch.no_grad():
        eps = {m: torch.export.export(models[m], steps[m][0]) for m in models}
        pte = to_edge(eps).to_executorch().buffer
        runs = {m: [(x, models[m](*x)) for x in steps[m]] for m in models}
    programs.append(_program(bundle, "two_methods_portable", "multi_method",
                             "two methods in one program on the rebuilt portable kernels", pte, runs))

    caches = list(mutable_buffer.CACHES)
    model = mutable_buffer._model(mutable_buffer.KVCacheReadFirst)
    ep = torch.export.export(copy.deepcopy(model), mutable_buffer._example(0))
    config = ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(caches)])
    pte = to_edge(ep).to_executorch(config).buffer
    eager = copy.deepcopy(model)
    with torch.no_grad():
        runs = {"forward": [(x, eager(*x)) for x in (mutable_buffer._example(k) for k in range(mutable_buffer.STEPS))]}
    programs.append(_program(bundle, "kv_cache_steps_portable", "mutable_buffer",
                             f"KV cache (index_put_, index_copy_) over {mutable_buffer.STEPS} steps of one Method "
                             "on the rebuilt portable kernels", pte, runs))

    if "xnnpack" in backends:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner  # deferred: as above
        from executorch.exir import to_edge_transform_and_lower

        with torch.no_grad():
            lowered = to_edge(eps).to_backend({"forward": XnnpackPartitioner(), "decode": multi_method.NoDelegation()})
            pte = lowered.to_executorch().buffer
            runs = {m: [(x, models[m](*x)) for x in steps[m]] for m in models}
        programs.append(_program(bundle, "two_methods_xnnpack_portable", "multi_method",
                                 "'forward' on XNNPACK, 'decode' on the portable kernels", pte, runs, needs=["xnnpack"]))
        fp = mutable_buffer._model()
        edge = to_edge_transform_and_lower(torch.export.export(copy.deepcopy(fp), mutable_buffer._example(0)),
                                           partitioner=[XnnpackPartitioner()])
        pte = edge.to_executorch(ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(caches)])).buffer
        eager = copy.deepcopy(fp)
        with torch.no_grad():
            runs = {"forward": [(x, eager(*x)) for x in (mutable_buffer._example(k) for k in range(mutable_buffer.STEPS))]}
        programs.append(_program(bundle, "kv_cache_steps_xnnpack", "mutable_buffer",
                                 f"KV cache lowered with XNNPACK over {mutable_buffer.STEPS} steps of one Method",
                                 pte, runs, needs=["xnnpack"]))
    write_manifest(bundle, programs)
    return programs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.pipeline.programs")
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="write the probes' programs and eager's outputs as a bundle")
    export.add_argument("--out", type=Path, required=True)
    export.add_argument("--backends", default="portable", help="comma-separated: portable, xnnpack")
    args = parser.parse_args(argv)
    programs = export_bundle(args.out, set(args.backends.split(",")))
    print(f"etriage: wrote {len(programs)} program(s) to {args.out}: {', '.join(p.name for p in programs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
