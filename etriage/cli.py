"""`etriage` command line: one subcommand per door into the pipeline.

Each subcommand lives in the module that owns its feature and exposes
`add_arguments(parser)` and `run(args) -> int`. Modules are imported only when their
subcommand is chosen, so `etriage classify` never pays for torch or the service stack.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help). Order is the order `etriage --help` shows.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "classify": ("triage_rules.cli", "classify failures in CI or test logs"),
    "eval": ("triage_rules.evaluate", "measure the engine's categories on a labelled corpus"),
    "triage": ("tasks.pipeline.cli", "triage a change (base..head) of an ExecuTorch checkout"),
    "coverage-map": ("tasks.pipeline.coverage_build", "build the coverage map of a trunk commit (resumable)"),
    "probe": ("tasks.probes.cli", "run the multi-method / mutable-buffer probes here"),
    "serve": ("etriage.serve", "run web + worker locally (embedded Redis and SQLite by default)"),
    "replay": ("etriage.replay", "sign and send a webhook payload to a running etriage"),
    "demo": ("etriage.demo", "serve, replay a pull_request, print the resulting PR comment"),
    "dashboard": ("etriage.dashboard", "serve the maintainer dashboard (--demo: on a seeded database)"),
    "config": ("etriage.config_check", "check a .github/etriage.yml before pushing it (config check FILE)"),
    "app-manifest": ("etriage.app_manifest", "the GitHub App manifest with this deployment's URLs (docs/INSTALL.md)"),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="etriage", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in SUBCOMMANDS:
        parser = _parser()
        if not argv or argv[0] in ("-h", "--help"):
            parser.print_help()
            return 0 if argv else 2
        parser.error(f"unknown command {argv[0]!r}")
    name, rest = argv[0], argv[1:]
    module_name, help_text = SUBCOMMANDS[name]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"etriage {name}", description=help_text)
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        print(f"etriage {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
