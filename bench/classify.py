"""Benchmark: engine throughput (MB/s) on a realistic 100 MB job log, against ripgrep.

The log mixes real lines of the marked PyTorch CI logs and the ExecuTorch fixtures with build
noise (ninja progress, compiler invocations, passing tests). ripgrep searches the same file
for the engine's prefilter literals in the same run; the ratio says how close the engine
(a multi-literal prefilter in C over whole blocks, then Python on the hit lines only) comes to
a C regex scan. Each side is timed --runs times and its best run kept (the machine's other work
only ever adds time). The engine runs rules only: the learned model reads the few failures
found, not the log, so its cost does not grow with the log's size (printed apart).

    .venv/bin/python bench/classify.py [--size-mb 100] [--runs 5] [--keep PATH]
"""
from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from triage_rules.engine import add_opinions, classify_file  # noqa: E402
from triage_rules.extract import _PREFILTER  # noqa: E402
from triage_rules.linekinds import PREFILTER_LITERALS  # noqa: E402

SHARED_LOGS = REPO.parent / "shared" / "fixtures" / "logs" / "pytorch-log-classifier"
ET_LOGS = REPO / "tests" / "engine" / "fixtures" / "executorch"


def real_lines() -> list[str]:
    lines: list[str] = []
    for path in sorted(SHARED_LOGS.glob("*.txt")) + sorted(ET_LOGS.glob("*.log")):
        for line in path.read_text(encoding="utf-8").split("\n"):
            if line.startswith(("#=SOURCE=#", "#|")):
                continue
            lines.append(line.replace("#=MATCH=# ", "").replace("‹", "").replace("›", ""))
    return lines


def noise_line(rng: random.Random, i: int) -> str:
    kind = rng.random()
    if kind < 0.5:
        return f"2026-07-30T13:21:{i % 60:02d}.{i % 10**7:07d}Z [{i}/90000] Building CXX object kernels/portable/CMakeFiles/portable_kernels.dir/cpu/op_{i % 977}.cpp.o"
    if kind < 0.8:
        return f"2026-07-30T13:21:{i % 60:02d}.{i % 10**7:07d}Z exir/tests/test_passes.py::TestPasses::test_case_{i % 5000} PASSED [0.{i % 97:02d}s] [ {i % 100}%]"
    if kind < 0.95:
        return (f"2026-07-30T13:21:{i % 60:02d}.{i % 10**7:07d}Z /usr/bin/c++ -DEXECUTORCH_BUILD -I/__w/executorch/executorch "
                f"-O2 -std=c++17 -fPIC -o CMakeFiles/x.dir/f{i % 400}.cpp.o -c /__w/executorch/executorch/runtime/f{i % 400}.cpp")
    return f"2026-07-30T13:21:{i % 60:02d}.{i % 10**7:07d}Z I 00:00:{i % 60:02d}.000{i % 1000:03d} executorch:runner.cpp:60] creating module: model_path=model_{i % 9}.pte"


def build_log(path: Path, size_mb: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    fixtures = real_lines()
    target = size_mb * 1024 * 1024
    written = i = 0
    with path.open("w", encoding="utf-8") as out:
        while written < target:
            chunk = []
            for _ in range(1000):
                i += 1
                # ~3% real CI lines (errors, tracebacks, summaries and their surroundings)
                chunk.append(rng.choice(fixtures) if rng.random() < 0.03 else noise_line(rng, i))
            text = "\n".join(chunk) + "\n"
            out.write(text)
            written += len(text.encode("utf-8"))


def time_engine(path: Path) -> tuple[float, list]:
    start = time.perf_counter()
    failures = classify_file(path, use_model=False)
    return time.perf_counter() - start, failures


def time_ripgrep(path: Path) -> float | None:
    rg = shutil.which("rg")
    if rg is None:
        return None
    start = time.perf_counter()
    patterns = [arg for literal in PREFILTER_LITERALS for arg in ("-e", literal)]
    subprocess.run([rg, "-c", "--no-config", "-j1", "-F", *patterns, str(path)], stdout=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="write the generated log here and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "job.log"
        if not (args.keep and path.exists() and path.stat().st_size >= args.size_mb * 1024 * 1024):
            build_log(path, args.size_mb)
        size = path.stat().st_size / (1024 * 1024)
        time_engine(path)  # warm the page cache and the compiled rules
        engine_s, failures = min((time_engine(path) for _ in range(args.runs)), key=lambda pair: pair[0])
        rg_runs = [time_ripgrep(path) for _ in range(args.runs)]
        rg_s = None if rg_runs[0] is None else min(rg_runs)
        add_opinions(failures[:1])  # load (or train) the model outside the timing
        start = time.perf_counter()
        add_opinions(failures)
        model_s = time.perf_counter() - start
    print(f"log: {size:.1f} MB, {len(failures)} failures reported; prefilter: {_PREFILTER.engine}, "
          f"{len(PREFILTER_LITERALS)} literals; best of {args.runs} runs each")
    print(f"engine: {engine_s:.3f} s = {size / engine_s:.1f} MB/s (one core)")
    print(f"model's opinion on the {len(failures)} failures: {model_s * 1000:.0f} ms (independent of the log's size)")
    if rg_s is None:
        print("ripgrep: not installed (apt-get install -y ripgrep)")
    else:
        print(f"ripgrep (same prefilter patterns, -j1): {rg_s:.3f} s = {size / rg_s:.1f} MB/s")
        print(f"ratio engine/ripgrep: {rg_s / engine_s:.2f} (1.0 = as fast as ripgrep)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
