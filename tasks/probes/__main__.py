"""`python -m tasks.probes [--suite ...] [--format text|json] [--junit-xml PATH]`."""
from __future__ import annotations

import argparse
import sys

from tasks.probes import cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.probes", description=__doc__.strip("`"))
    cli.add_arguments(parser)
    return cli.run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
