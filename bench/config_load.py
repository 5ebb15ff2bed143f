"""Benchmark: how long reading and validating etriage's YAML data takes, cold (no caches).

What it loads: every rule file (triage_rules/rules/*.yaml), the tables
(tasks.pipeline.tables.load_tables), the catalogue (triage_rules.catalogue) and a full
`.github/etriage.yml` (bot.repo_config.load). A process does each once at start, so this is
start-up cost, not a per-request one. Prints the median and best of --repeat runs; asserts nothing.

    .venv/bin/python bench/config_load.py [--repeat 20]
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot import repo_config  # noqa: E402
from tasks.pipeline.tables import load_tables  # noqa: E402
from triage_rules import catalogue  # noqa: E402
from triage_rules.rules import load_rules  # noqa: E402

REPO_CONFIG = """\
triage:
  suites: [multi_method, my_suite]
  targets: [host, android-sm8750-lab]
  paths: {"third-party/qnn/**": qualcomm}
  trusted: [octocat]
  budget_seconds: 120
commands: {}
labels: {multi_method_lowering: "qnn: multi-method"}
ci_logs: {workflows: [pull, trunk], max_bytes: 1048576}
devices: {targets: [android-sm8750-lab]}
suites:
  my_suite: {description: "the lab's own", tests: ["a/test_x.py::T"]}
targets:
  android-sm8750-lab: {kind: device, soc: SM8750}
"""


def catalogue_cold() -> None:
    for read in (catalogue.suites, catalogue.targets, catalogue.labels, catalogue.backends):
        read.cache_clear()
        read()


def rules_cold() -> None:
    re.purge()  # the regexes are compiled anew, as in a fresh process
    load_rules()


STEPS = {
    "rules (all files)": rules_cold,
    "tables": lambda: load_tables(),
    "catalogue": catalogue_cold,
    "repo config": lambda: repo_config.load(REPO_CONFIG),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    totals = []
    for name, step in STEPS.items():
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        totals.append(statistics.median(times))
        print(f"{name:18s} median {statistics.median(times) * 1000:7.1f} ms   best {min(times) * 1000:7.1f} ms")
    print(f"{'rules + tables':18s} median {(totals[0] + totals[1]) * 1000:7.1f} ms")
    print(f"{'all four':18s} median {sum(totals) * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
