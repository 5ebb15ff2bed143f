"""`python -m tasks.qnn provision [--root DIR] [--wheel FILE]` (what `make install` runs) and
`python -m tasks.qnn status`: the QNN environment this worker would use, or why there is none."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from tasks.qnn.sdk import ProvisionError, default_root, find_sdk, provision, read_record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.qnn")
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("provision", help="download the pinned onnxruntime-qnn wheel and lay out QNN_SDK_ROOT")
    make.add_argument("--root", type=Path, default=default_root(), help="default: <venv>/qnn-sdk")
    make.add_argument("--wheel", type=Path, help="use this already-downloaded wheel (its sha256 is checked)")
    show = sub.add_parser("status", help="which QNN SDK a worker would use")
    show.add_argument("--root", type=Path, default=default_root())
    args = parser.parse_args(argv)
    if args.command == "status":
        sdk, reason = find_sdk(root=args.root)
        record = read_record(args.root)
        print(json.dumps({"sdk": str(sdk.root) if sdk else None, "source": sdk.source if sdk else None,
                          "reason": reason, "record": asdict(record) if record else None}, indent=2))
        return 0 if sdk else 1
    try:
        record = provision(args.root, wheel=args.wheel, log=lambda m: print(m, file=sys.stderr, flush=True))
    except (ProvisionError, OSError) as error:
        print(f"qnn: not provisioned: {error}", file=sys.stderr)
        return 1
    if not record.usable:
        print(f"qnn: {record.root}: QAIRT {record.qairt or '?'} failed its check ({record.layout}): "
              f"{record.check.get('error', '')}", file=sys.stderr)
        return 1
    check = record.check
    print(f"qnn: {record.root} ready: {record.package}, QAIRT {record.qairt}, {record.bytes / 2**20:.0f} MiB; "
          f"HTP lowering {check.get('lower_seconds')} s, run {check.get('run_seconds')} s, "
          f"max abs diff {check.get('max_abs_diff'):.2g}; seconds {record.seconds}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
