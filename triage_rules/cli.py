"""`etriage classify [--format text|json] [--failed] PATH...`: failures in CI or test logs.

Imports neither torch nor executorch. `--failed` says the job failed: then every log gives at
least one failure (its most error-like line, with a low confidence, when nothing matched).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from triage_rules.engine import classify_blocks, classify_file
from triage_rules.junit import JUnitError
from triage_rules.readers import LogReadError, iter_text_blocks
from triage_rules.records import Failure
from triage_rules.rules import RuleError

JSON_KEYS = ("category", "unsure", "decided_by", "confidence", "decision", "rule", "title", "test", "exception", "message", "line_no",
             "line", "fingerprint", "explanation", "suggestion", "owners", "environment", "error_not_in_log", "context", "frames",
             "looks_like")
_COLOURS = {"title": "\x1b[1;31m", "dim": "\x1b[2m", "key": "\x1b[36m", "reset": "\x1b[0m"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="log files, JUnit XML files, or - for stdin")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    parser.add_argument("--job", default=None, help="CI job name (some rules match on it)")
    parser.add_argument("--failed", action="store_true",
                        help="the job failed: always report at least one failure per log")


def run(args: argparse.Namespace) -> int:
    status = 0
    colour = args.format == "text" and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    for path in args.paths:
        try:
            failures = _classify(path, args.job, args.failed)
        except (LogReadError, JUnitError, OSError, RuleError) as exc:
            message = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            if not message.startswith(path):
                message = f"{path}: {message}"
            print(f"etriage classify: {message}", file=sys.stderr)
            status = 1
            continue
        if args.format == "json":
            print(json.dumps({"path": path, "failures": [_json(f) for f in failures]}), flush=True)
        else:
            print(_text(path, failures, colour), flush=True)
    return status


def _classify(path: str, job: str | None, failed: bool) -> list[Failure]:
    if path == "-":
        return classify_blocks(iter_text_blocks(sys.stdin.buffer), job_name=job, failed=failed)
    return classify_file(path, job_name=job, failed=failed)


def _json(failure: Failure) -> dict:
    data = failure.to_dict()
    return {key: data[key] for key in JSON_KEYS}


def _text(path: str, failures: list[Failure], colour: bool) -> str:
    def paint(kind: str, text: str) -> str:
        return f"{_COLOURS[kind]}{text}{_COLOURS['reset']}" if colour else text

    if not failures:
        return f"{path}: no failures found"
    blocks = [f"{path}: {len(failures)} failure(s)"]
    for number, failure in enumerate(failures, 1):
        env = " [environment]" if failure.environment else " [error not in this log]" if failure.error_not_in_log else ""
        category = " or ".join(failure.unsure) + ", unsure" if failure.unsure else failure.category
        lines = [
            paint("title", f"#{number} {failure.title}")
            + f"  ({category}, decided by {failure.decided_by}, confidence {failure.confidence:.2f}){env}",
            f"  {paint('key', 'line')} {failure.line_no}: {failure.line.strip()}",
        ]
        if failure.test:
            lines.append(f"  {paint('key', 'test')} {failure.test}")
        if failure.exception:
            lines.append(f"  {paint('key', 'error')} {failure.exception}: {failure.message}")
        lines.append(f"  {paint('key', 'why')}  {failure.explanation}")
        if failure.suggestion:
            lines.append(f"  {paint('key', 'next')} {failure.suggestion}")
        if failure.owners:
            lines.append(f"  {paint('key', 'cc')}   {' '.join(failure.owners)}")
        for reason in failure.decision:
            lines.append(f"  {paint('key', 'evidence')} {reason}")
        for similar in failure.looks_like:
            lines.append(f"  {paint('key', 'like')} {similar['category']} ({similar['similarity']:.2f}) "
                         f"{similar['source']}: {similar['line'][:100]}")
        lines.append(paint("dim", f"  fingerprint {failure.fingerprint}"))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
