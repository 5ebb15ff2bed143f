"""Real multi-method and mutable-buffer records from QNN's HTP simulator: mutants of the code of
ExecuTorch's QNN backend that lowers several methods or a program's mutable buffers, run through
the bot's own QNN probes; what ExecuTorch and QNN raised becomes a corpus record.

    QNN_SDK_ROOT=... LD_LIBRARY_PATH=$QNN_SDK_ROOT/lib/x86_64-linux-clang \\
    .venv/bin/python scripts/qnn_area_records.py [--per-module 30] [--seed 0] [--module qnn_preprocess]
        [--scenario two_methods] [--out tests/engine/corpus/untrained/qnn_areas_of_executorch.jsonl]

The scenarios are the probes' flows (tasks/probes/qnn_multi_method.py, qnn_mutable_buffer.py):
two methods of one program lowered to HTP from one call and run on x86; a KV cache quantized
with QNN's quantizer and lowered with the caches inside the delegate, and kept as delegate I/O.
The mutated code (`AREAS` below) is the QNN backend's lowering path: its partitioner, its
preprocess and its lowering entry point, and the parts of its op visitors and passes that map
a program's mutable buffers to QNN tensors.

A mutant (bench/mutants.py: one small change) is swapped into a forked child (the parent has
imported everything once) and every scenario whose run covered its lines is run. A record is a
scenario that raised something other than it raised unmutated, with ExecuTorch's frames in the
traceback: the probe's own findings (`ProbeFailure`, the bot's words) are no record, nor is a
`NameError` a linter catches first. Its label is where the fault is: a mutated line that handles
a buffer's mutation (`mutab`, `mutated`, `mutbuf`,
`buffers_to_mutate`) is `mutable_buffer`; any other line of the
lowering path is `multi_method_lowering` ("Lowering to a backend broke", as the corpus labels a
backend's partitioner and preprocess failures).

Records' sources are the mutated modules at the installed release, never a thread of the
evaluation split (such a record is dropped). They are written to `corpus/untrained/`, which
training does not read: trained on, they left grouped CV where it was and turned a PyTorch CI
log's distributed timeout into a multi-method failure (docs/ENGINE.md).
"""
from __future__ import annotations

import argparse
import os
import random
import re
import sys
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench.mutants import candidates  # noqa: E402
from mutant_records import compiling, load_executorch, patch_module, run_forked  # noqa: E402
from qnn_records import _quiet, import_qualcomm, kept_excerpt, mutant_record, traced, write_unseen  # noqa: E402

OUT = REPO / "tests" / "engine" / "corpus" / "untrained" / "qnn_areas_of_executorch.jsonl"
CHILD_TIMEOUT = 240
PER_MUTANT = 1  # records of one mutant: its first failure with a new message shape
PER_SHAPE = 2  # records of one message shape in one module
# a line that handles a buffer's mutation (not a constant buffer, nor a compile spec's bytes)
_BUFFER_LINE = re.compile(r"(?i)mutab|mutbuf|mutated|buffers_to_mutate")


@dataclass(frozen=True)
class Module:
    path: str  # package-relative (executorch/...)
    lines: str = ""  # only mutants whose own lines match this (a generic module's area part)


# The QNN backend's lowering path: each module's mutants, or only those whose lines match.
AREAS = (
    Module("backends/qualcomm/qnn_preprocess.py"),
    Module("backends/qualcomm/partition/qnn_partitioner.py"),
    Module("backends/qualcomm/partition/utils.py"),
    Module("backends/qualcomm/utils/utils.py", r"graph_names|ensure_graph_specific_dict|skip_mutable_buffer|"
           r"partitioner|to_edge_transform_and_lower|edge_prog|compile_spec|method"),
    Module("backends/qualcomm/builders/node_visitor.py", _BUFFER_LINE.pattern),
    Module("backends/qualcomm/builders/node_visitor_manager.py", _BUFFER_LINE.pattern),
    Module("backends/qualcomm/builders/utils.py", _BUFFER_LINE.pattern),
    Module("backends/qualcomm/_passes/insert_io_qdq.py", _BUFFER_LINE.pattern),
    Module("backends/qualcomm/_passes/qnn_pass_manager.py", _BUFFER_LINE.pattern),
)
SCENARIOS = ("two_methods", "kv_cache_in_delegate", "kv_cache_as_io")


def scenario(name: str) -> dict:
    """Run one probe flow; what it raised: {"raised": exception type or "", "traceback": lines,
    "native": QNN's and the delegate's error lines}."""
    from tasks.probes import qnn_multi_method, qnn_mutable_buffer
    from tasks.qnn import htp

    flow = {"two_methods": qnn_multi_method.prefill_decode_on_htp,
            "kv_cache_in_delegate": qnn_mutable_buffer.kv_cache_qnn_in_delegate,
            "kv_cache_as_io": qnn_mutable_buffer.kv_cache_qnn_quantized}[name]
    raised, lines = "", []
    with htp.native_log() as log:
        try:
            flow()
        except Exception as exc:  # noqa: BLE001 - every failure of the flow is data here
            raised = type(exc).__name__
            lines = "".join(traceback.format_exception(exc)).splitlines()
    return {"raised": raised, "traceback": lines, "native": log.errors}


def coverage(name: str, files: set[str]) -> dict:
    """Lines of `files` that scenario `name` ran unmutated, and what it raised."""
    return traced(lambda: scenario(name), files.__contains__)


def _own_lines(mutant, source: str) -> str:
    """The source lines the mutant's statement spans."""
    return "\n".join(source.splitlines()[mutant.line - 1:max((mutant.line, *mutant.lines))])


def label_of(mutant, source: str) -> str:
    return "mutable_buffer" if _BUFFER_LINE.search(_own_lines(mutant, source)) else "multi_method_lowering"


def in_scope(mutant, source: str, pattern: str) -> bool:
    return not pattern or bool(re.search(pattern, _own_lines(mutant, source)))


def area_records(per_module: int, seed: int, installed: Path, version: str, only: str | None = None,
                 scenarios: list[str] | None = None) -> list[dict]:
    import_qualcomm()
    from tasks.probes import qnn_multi_method, qnn_mutable_buffer  # noqa: F401 - imported once, in the parent

    files = {str(installed / m.path): m for m in AREAS if (installed / m.path).exists()}
    runs, baseline = {}, {}
    for name in scenarios or SCENARIOS:
        run = run_forked(lambda name=name: (_quiet(), coverage(name, set(files)))[1], timeout=CHILD_TIMEOUT)
        if run is None:
            print(f"  scenario {name}: crashed unmutated; not used", flush=True)
            continue
        runs[name] = {f: set(lines) for f, lines in run["covered"].items()}
        baseline[name] = run["result"]["raised"]
        print(f"  scenario {name}: raised {baseline[name] or 'nothing'} unmutated; "
              f"{sum(map(len, runs[name].values()))} line(s) of {len(runs[name])} module(s)", flush=True)
    out: list[dict] = []
    for filename, module in files.items():
        if only and only not in module.path:
            continue
        source = Path(filename).read_text(encoding="utf-8")
        chosen = [m for m in candidates(source, module.path) if in_scope(m, source, module.lines)
                  and any(line in covered.get(filename, ()) for covered in runs.values() for line in m.lines)]
        random.Random(f"{seed}:{module.path}").shuffle(chosen)
        shapes: Counter[str] = Counter()
        tried = made = 0
        for mutant, mutated in compiling(chosen, source, per_module):
            tried += 1
            using = [n for n in runs if any(line in runs[n].get(filename, ()) for line in mutant.lines)]

            def work(mutated=mutated, using=using):
                _quiet()
                patch_module(filename, source, mutated)
                return [scenario(n) for n in using]
            results = run_forked(work, timeout=CHILD_TIMEOUT * len(using))
            if results is None:
                print(f"  {mutant.key}: crashed or hung", flush=True)
                continue
            kept = 0
            for name, result in zip(using, results):
                if kept >= PER_MUTANT or result["raised"] in ("", baseline[name], "ProbeFailure"):
                    continue
                excerpt = kept_excerpt(result, installed, shapes, PER_SHAPE)
                if excerpt is None:
                    continue
                kept += 1
                out.append(area_record(module.path, mutant, label_of(mutant, source), name, excerpt, version))
            made += kept
            print(f"  {mutant.key}: {[r['raised'] or 'ok' for r in results]}, {kept} kept", flush=True)
        print(f"{module.path}: {made} record(s) of {tried} mutant(s)", flush=True)
    return out


def area_record(path: str, mutant, category: str, scenario_name: str, excerpt: tuple[str, str], version: str) -> dict:
    return mutant_record("qnn_area_records", "gen-qnnarea", "QNN lowering path", path, mutant, scenario_name, version,
                         category, excerpt, f"the '{scenario_name}' flow (HTP, SM8650) raised this only on the mutant; "
                         "labelled by where the fault is")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-module", type=int, default=30, help="mutants tried per module")
    parser.add_argument("--module", help="only modules whose path contains this")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS, help="run only these flows (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if not os.environ.get("QNN_SDK_ROOT"):
        print("qnn_area_records: QNN_SDK_ROOT is not set (make install provisions .venv/qnn-sdk)", file=sys.stderr)
        return 2
    installed, version = load_executorch()
    records = area_records(args.per_module, args.seed, installed, version, args.module, args.scenario)
    kept = write_unseen(records, args.out)
    by = {c: sum(r["category"] == c for r in kept) for c in ("multi_method_lowering", "mutable_buffer")}
    print(f"{len(kept)} record(s) to {args.out}: {by}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
