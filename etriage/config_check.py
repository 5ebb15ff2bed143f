"""`etriage config check FILE`: every mistake of a `.github/etriage.yml`, before it is pushed.

The same validator the bot runs on the default branch's file (and on a pull request that edits
it, whose check run fails when the file is invalid) reads FILE and prints each problem as
`FILE: line N: key.path: what is wrong`, all of them in one pass.

Exit status: 0 the file is valid (an empty file is valid and turns every feature off: said so),
1 it has mistakes (all listed), 2 it cannot be checked: missing, a directory, unreadable, binary or
not UTF-8, or not YAML at all (one line on stderr, no traceback).
"""
from __future__ import annotations

import sys
from pathlib import Path

from bot import repo_config
from triage_rules import yamlmodel as ym


def add_arguments(parser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = actions.add_parser("check", help="validate a .github/etriage.yml (exit 0 valid, 1 mistakes, 2 unreadable)",
                               description=__doc__.splitlines()[0])
    check.add_argument("file", help="the file to check ('-': standard input)")


def run(args) -> int:
    name = "<stdin>" if args.file == "-" else args.file
    try:
        text = read_text(args.file)
    except CannotCheck as error:
        return _unusable(name, str(error))
    try:
        ym.read(text)
    except ym.YamlSyntaxError as error:
        where = f"line {error.line}: " if error.line else ""
        return _unusable(name, f"{where}not valid YAML: {error.message}")
    errors = repo_config.validate_repo_config(text)
    for error in errors:
        print(f"{name}: {error}")
    if errors:
        print(f"{name}: {len(errors)} mistake{'s' if len(errors) != 1 else ''}; the bot would switch "
              "this repository's triage off until they are fixed", file=sys.stderr)
        return 1
    config = repo_config.load(text)
    on = [section for section in repo_config.SECTIONS if getattr(config, section) is not None]
    print(f"{name}: valid; sections on: {', '.join(on) or 'none (an empty file turns every feature off)'}")
    return 0


class CannotCheck(Exception):
    pass


def read_text(file: str) -> str:
    """The file's text, or CannotCheck saying why it cannot be read as text."""
    try:
        data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except IsADirectoryError:
        raise CannotCheck("is a directory, not a file") from None
    except FileNotFoundError:
        raise CannotCheck("no such file") from None
    except OSError as error:
        raise CannotCheck(f"cannot read it: {error.strerror or error}") from None
    if b"\0" in data:
        raise CannotCheck("is binary, not a YAML text") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CannotCheck(f"is not UTF-8 text (byte {error.start})") from None


def _unusable(name: str, why: str) -> int:
    print(f"etriage config check: {name}: {why}", file=sys.stderr)
    return 2
