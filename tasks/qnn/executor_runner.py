"""A host stand-in for QNN's `qnn_executor_runner`, for test_qnn_delegate.py's x86 mode.

ExecuTorch's QNN tests (`--enable_x86_64`) run each lowered .pte with the C++
`qnn_executor_runner` built for x86_64, which the executorch wheel does not ship. This takes
the same command line (`--model_path --input_list_path --output_folder_path --method_index`;
the runner's other flags are accepted and ignored) and runs the method through the wheel's own
runtime (`executorch.runtime`, which registers QnnBackend), i.e. on QAIRT's x86 HTP simulator.
Inputs: one line of `input_list_path` per inference, space-separated raw files relative to the
working directory, read with the method's own input dtypes and shapes. Outputs:
`output_<line>_<output>.raw`, the C++ runner's naming, which the tests read back.

Not emulated: `--dump_intermediate_outputs`, etdump profiling, `--shared_buffer`,
`--performance_output_path` (tests that need them fail, saying so in the runner's output).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# ExecuTorch ScalarType codes (runtime/core/portable_type/scalar_type.h) -> numpy dtype names
SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
                7: "float64", 11: "bool", 27: "uint16"}
UNSUPPORTED = ("--dump_intermediate_outputs", "--performance_output_path", "--shared_buffer")


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="qnn_executor_runner")
    parser.add_argument("--model_path", required=True)
    parser.add_argument("--input_list_path", default="")
    parser.add_argument("--output_folder_path", required=True)
    parser.add_argument("--method_index", type=int, default=0)
    return parser.parse_known_args(argv)


def method_name(pte: bytes, index: int) -> str:
    """The C++ runner's `program->get_method_name(index)`: the execution plan's order."""
    from executorch.exir._serialize._program import deserialize_pte_binary  # deferred: heavy

    plans = deserialize_pte_binary(pte).program.execution_plan
    if not 0 <= index < len(plans):
        raise SystemExit(f"qnn_executor_runner: --method_index {index} out of range ({len(plans)} methods)")
    return plans[index].name


def read_inputs(line: str, meta, cwd: Path) -> list:
    import numpy as np
    import torch

    names = line.split()
    if len(names) != meta.num_inputs():
        raise SystemExit(f"qnn_executor_runner: {len(names)} input files for {meta.num_inputs()} inputs")
    inputs = []
    for i, name in enumerate(names):
        info = meta.input_tensor_meta(i)
        dtype = SCALAR_TYPES.get(int(info.dtype()))
        if dtype is None:
            raise SystemExit(f"qnn_executor_runner: input {i} has unsupported dtype code {int(info.dtype())}")
        data = np.fromfile(cwd / name, dtype=dtype)
        inputs.append(torch.from_numpy(data.reshape(tuple(info.sizes()))))
    return inputs


def main(argv: list[str] | None = None) -> int:
    args, ignored = parse(sys.argv[1:] if argv is None else argv)
    wanted = [flag.split("=")[0] for flag in ignored if flag.split("=")[0] in UNSUPPORTED]
    if wanted:
        print(f"qnn_executor_runner (etriage host stand-in): {', '.join(wanted)} not emulated", flush=True)
        return 2
    from executorch.runtime import Runtime  # deferred: loads the runtime and its QnnBackend

    pte = Path(args.model_path).read_bytes()
    name = method_name(pte, args.method_index)
    method = Runtime.get().load_program(pte).load_method(name)
    lines = Path(args.input_list_path).read_text().splitlines() if args.input_list_path else []
    out = Path(args.output_folder_path)
    out.mkdir(parents=True, exist_ok=True)
    for i, line in enumerate(line for line in lines if line.strip()):
        start = time.perf_counter()
        outputs = method.execute(read_inputs(line, method.metadata, Path.cwd()))
        for j, tensor in enumerate(outputs):
            tensor.detach().contiguous().numpy().tofile(out / f"output_{i}_{j}.raw")
        print(f"qnn_executor_runner: {name} inference {i}: {len(outputs)} outputs in "
              f"{time.perf_counter() - start:.3f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
