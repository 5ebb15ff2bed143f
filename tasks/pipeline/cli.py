"""`etriage triage --repo DIR --base REV --head REV`: triage a change from the command line."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from tasks.devices import VARIABLES as device_variables
from tasks.pipeline.gitio import GitError
from tasks.pipeline.report import to_json, to_markdown
from tasks.pipeline.run import TriageOptions, triage
from tasks.pipeline.sandbox import Sandbox
from tasks.pipeline.tables import TableError

QUIET_ENV = ("QNN_SDK_ROOT", "ANDROID_NDK_ROOT")
# Device targets' settings (tasks/devices/connect.DeviceSettings): read by the target, never
# passed into a sandboxed run (sandbox.PASS_THROUGH does not list them).
DEVICE_ENV = device_variables


def add_arguments(parser) -> None:
    parser.add_argument("--repo", required=True, type=Path, help="ExecuTorch checkout (git)")
    parser.add_argument("--base", required=True, help="base revision (the PR's target branch)")
    parser.add_argument("--head", required=True, help="head revision (the change)")
    parser.add_argument("--target", action="append", dest="targets", metavar="NAME",
                        help="run on this target (repeatable; default: every configured target). Device "
                             "targets run only when named: ssh:<device>, emulated-arm64 (docs/DEVICES.md)")
    parser.add_argument("--devices", type=Path, metavar="FILE",
                        help="the lab's device inventory for device targets (default: $ETRIAGE_DEVICES)")
    parser.add_argument("--suite", action="append", dest="suites", metavar="NAME",
                        help="run only this suite (repeatable; default: what the plan picks)")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown")
    parser.add_argument("--out", type=Path, help="write the report here instead of stdout")
    parser.add_argument("--data-dir", type=Path, default=Path.home() / ".cache" / "etriage",
                        help="caches and per-run directories (default: ~/.cache/etriage)")
    parser.add_argument("--no-cache", action="store_true", help="ignore and do not write caches")
    parser.add_argument("--tables", type=Path, help="directory of areas/suites/recipes/targets YAML")
    parser.add_argument("--full-base", action="store_true",
                        help="run every suite in full at the merge base (slower; fills the cache, reports `fixed`)")
    parser.add_argument("--budget", type=float, metavar="SECONDS",
                        help="time budget of the tests selected for the change (default: the tables')")
    parser.add_argument("--select-all", action="store_true",
                        help="run every relevant test that can run here, not only the budget's")
    parser.add_argument("--keep-run-dir", action="store_true", help="keep overlays and logs for debugging")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="run the change's code without the sandbox: only for your own checkout "
                             "(the service never does this; see docs/SANDBOX.md)")


def run(args) -> int:
    def progress(message: str) -> None:
        if not args.quiet:
            print(f"etriage triage: {message}", file=sys.stderr, flush=True)

    options = TriageOptions(
        repo=args.repo, base=args.base, head=args.head, data_dir=args.data_dir,
        targets=args.targets, suites=args.suites, use_cache=not args.no_cache,
        tables_dir=args.tables, keep_run_dir=args.keep_run_dir, full_base=args.full_base,
        tool_env={k: os.environ[k] for k in QUIET_ENV + DEVICE_ENV if os.environ.get(k)}
        | ({"ETRIAGE_DEVICES": str(args.devices.resolve())} if args.devices else {}),
        sandbox=Sandbox(enabled=not args.no_sandbox), budget_seconds=args.budget, select_all=args.select_all)
    if args.no_sandbox:
        progress("--no-sandbox: the change's code runs with your own user's access")
    try:
        report = triage(options, progress=progress)
    except (GitError, TableError, ValueError) as exc:
        print(f"etriage triage: {exc}", file=sys.stderr)
        return 2
    text = to_json(report) if args.format == "json" else to_markdown(report)
    if args.out:
        args.out.write_text(text)
        progress(f"report written to {args.out}")
    else:
        sys.stdout.write(text)
    return 0
