"""executor_runner's command line over ExecuTorch's Python bindings: the fallback runtime of a
device that has Python and the executorch package but no executor_runner binary.

Pushed to the device as one file and run there; it imports nothing of etriage. It accepts the
flags tasks/pipeline/programs.py's method scripts pass to executor_runner and behaves the same:

    --model_path P --method_name M [--inputs a.bin,b.bin] --output_file BASE --server_mode
    --print_output none

One Method is loaded once; each line on stdin re-reads the input files (raw tensor bytes, read
with the method's own input dtypes and shapes), executes, writes output i to BASE-i.bin and
prints "SERVER MODE DONE". Without --server_mode it runs once. A failure exits non-zero.
"""
from __future__ import annotations

import argparse
import sys

# ExecuTorch ScalarType codes (runtime/core/portable_type/scalar_type.h) -> torch dtype names
SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
                7: "float64", 11: "bool", 15: "bfloat16"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="pybind_runner")
    parser.add_argument("--model_path", required=True)
    parser.add_argument("--method_name", default="")
    parser.add_argument("--inputs", default="")
    parser.add_argument("--output_file", default="")
    parser.add_argument("--server_mode", action="store_true")
    parser.add_argument("--print_output", default="summary")
    args = parser.parse_args(argv)

    import torch  # deferred: argument errors answer without loading torch
    # The bindings' own module, not executorch.runtime: that one imports executorch.exir too
    # (about 4 s more per method on these machines), which a runner never needs.
    try:  # the module's name: `_C` on main since #21816 (August 2026), `_portable_lib` in 1.4
        from executorch.extension.pybindings import _C as bindings
    except ImportError:
        from executorch.extension.pybindings import _portable_lib as bindings

    program = bindings._load_program(args.model_path)
    name = args.method_name or program.get_method_name(0)
    method = program.load_method(name)
    meta = method.method_meta()
    paths = [p for p in args.inputs.split(",") if p]
    if paths and len(paths) != meta.num_inputs():
        print(f"pybind_runner: {len(paths)} input file(s) for {meta.num_inputs()} inputs of {name}", flush=True)
        return 2

    def step() -> None:
        inputs = []
        for i, path in enumerate(paths):
            info = meta.input_tensor_meta(i)
            with open(path, "rb") as handle:
                data = bytearray(handle.read())
            if len(data) != info.nbytes():
                raise ValueError(f"input {i} ({path}): {len(data)} bytes, the method expects {info.nbytes()}")
            dtype = getattr(torch, SCALAR_TYPES[info.dtype()])
            inputs.append(torch.frombuffer(data, dtype=dtype).reshape(tuple(info.sizes())).clone())
        outputs = method.call(inputs)
        for i, out in enumerate(outputs):
            if args.output_file and isinstance(out, torch.Tensor):
                with open(f"{args.output_file}-{i}.bin", "wb") as handle:
                    handle.write(out.contiguous().numpy().tobytes())
            if args.print_output != "none":
                print(f"Output {i}: {out}", flush=True)

    if not args.server_mode:
        step()
        return 0
    if not args.output_file:
        print("pybind_runner: --output_file must be set in --server_mode", flush=True)
        return 2
    for _line in sys.stdin:
        step()
        print("SERVER MODE DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
