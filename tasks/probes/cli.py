"""`etriage probe` (in-process) and `python -m tasks.probes` (the pipeline's subprocess)."""
from __future__ import annotations

import json
import sys

from tasks.probes import run_probes
from tasks.probes.junit import write_junit
from tasks.probes.records import GROUPS, SUITES


def add_arguments(parser) -> None:
    parser.add_argument("--suite", default="all", choices=(*GROUPS, *SUITES), help="which probes to run")
    parser.add_argument("--probe", action="append", metavar="NAME", help="run only this probe (repeatable)")
    parser.add_argument("--format", default="text", choices=("text", "json"))
    parser.add_argument("--junit-xml", metavar="PATH", help="also write JUnit XML here")


def render_text(results) -> str:
    lines = []
    for r in results:
        lines.append(f"{r.outcome.upper():8} {r.suite}/{r.name} ({r.duration:.1f}s)")
        if r.outcome != "passed":
            lines.extend("    " + line for line in r.diagnosis.splitlines())
    counts = {o: sum(r.outcome == o for r in results) for o in ("passed", "failed", "error", "skipped")}
    lines.append(", ".join(f"{n} {o}" for o, n in counts.items()))
    return "\n".join(lines)


def run(args) -> int:
    try:
        results = run_probes(args.suite, args.probe)
    except ValueError as exc:  # unknown probe name: a user error, one line
        print(f"etriage probe: {exc}", file=sys.stderr)
        return 2
    if args.junit_xml:
        write_junit(results, args.junit_xml)
    if args.format == "json":
        print(json.dumps({"results": [r.to_dict() for r in results]}, indent=2))
    else:
        print(render_text(results))
    return 0 if all(r.outcome in ("passed", "skipped") for r in results) else 1
