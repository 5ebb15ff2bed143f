"""Wall time of a full `triage(...)`: cold (no caches) and with the merge base cached.

Builds a throwaway git repository from the installed executorch package, applies a real
regression patch as head, and triages it twice with the default plan (every suite the
plan picks for the change). Prints the numbers; asserts nothing about speed.

    .venv/bin/python bench/triage.py [--patch PATH] [--suite NAME ...] [--full-base] [--no-sandbox]

--no-sandbox measures the same triage with every command run bare (the sandbox's overhead).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tasks.pipeline.run import TriageOptions, triage  # noqa: E402
from tasks.pipeline.sandbox import Sandbox  # noqa: E402
from tasks.sample_repo import build_sample_repo  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patch", type=Path,
                        default=ROOT / "tasks/probes/regressions/multi_method_first_partitioner_for_all.patch")
    parser.add_argument("--suite", action="append", dest="suites")
    parser.add_argument("--full-base", action="store_true", help="first run with --full-base")
    parser.add_argument("--no-sandbox", action="store_true", help="run the change's code bare")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="etriage-bench-") as tmp:
        sample = build_sample_repo(Path(tmp) / "executorch")
        head = sample.branch("change", patch=args.patch)
        data_dir = Path(tmp) / "data"
        # cold: empty data dir; then again with the merge base's outcomes (and durations) cached;
        # --full-base: a first run that runs every suite in full at the merge base
        runs = [("full base", True), ("base cached", False)] if args.full_base else \
            [("cold", False), ("base cached", False)]
        for label, full_base in runs:
            start = time.monotonic()
            report = triage(TriageOptions(repo=sample.path, base="main", head=head, data_dir=data_dir,
                                          suites=args.suites, full_base=full_base,
                                          sandbox=Sandbox(enabled=not args.no_sandbox)),
                            progress=lambda m: print(f"  {m}", file=sys.stderr))
            took = time.monotonic() - start
            ran_at_base = sum(len(b.ran) for b in report.base_runs)
            print(f"triage {label:12s}{' (no sandbox)' if args.no_sandbox else ''}: {took:6.1f} s  suites={','.join(report.plan.suites)}  "
                  f"summary={report.summary}  base_cached={report.base_cached}  tests run at base={ran_at_base}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
