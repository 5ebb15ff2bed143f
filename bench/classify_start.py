"""Benchmark: how long `etriage classify` takes to answer a small log, from a warm model cache.

Each run is a fresh process (`etriage classify` on a 147-byte real log), timed end to end; the
best and median of --runs are printed, with whether scikit-learn or scipy were imported (they
must not be: the fitted model is scored from numpy arrays). The first run trains the model if
the cache is cold and is not counted.

    .venv/bin/python bench/classify_start.py [--runs 7]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOG = REPO / "tests" / "engine" / "fixtures" / "executorch" / "kernel_not_found.log"
PROBE = ("import sys\nfrom etriage.cli import main\nsys.argv = ['etriage', 'classify', sys.argv[1]]\nmain()\n"
         "print('imported:', sorted(m for m in ('sklearn', 'scipy') if m in sys.modules) or 'neither')")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    command = [str(REPO / ".venv" / "bin" / "etriage"), "classify", str(LOG)]
    subprocess.run(command, capture_output=True, check=True)  # warms the model cache
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    imported = subprocess.run([sys.executable, "-c", PROBE, str(LOG)], capture_output=True, text=True, check=True)
    print(f"etriage classify, {LOG.stat().st_size}-byte log: best {min(times):.2f} s, "
          f"median {statistics.median(times):.2f} s over {args.runs} runs")
    print(imported.stdout.strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
