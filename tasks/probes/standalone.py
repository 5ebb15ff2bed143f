"""A probe as one self-contained Python file: what a contributor runs in their own ExecuTorch.

`script(suite, probe)` returns the text of a .py file that holds the sources of the probe
modules it needs (the probe's own module, what that imports of tasks.probes, the runner and
its records), loads them from memory under a private package name and runs that one probe on
whatever `executorch` and `torch` the interpreter imports. Nothing of etriage needs to be
installed. Exit status: 0 the probe passed, 1 it failed (the failure reproduces), 2 it could
not run here (a backend or package is missing: nothing is proven either way), 3 the probe
raised something else (its traceback is printed).

The sources are embedded as they are, so the file reads as the probe reads in etriage; the
imports of `tasks.probes` are renamed to the private package, nothing else is changed.
"""
from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from tasks.probes.records import GROUPS, SUITES

HERE = Path(__file__).resolve().parent
PACKAGE = "etriage_probe"  # the embedded modules' package: no clash with anything installed
ALWAYS = ("__init__", "records", "runtime", "runner")  # what running a probe by name needs
_NAME = re.compile(r"[a-z][a-z0-9_]{0,79}")


class UnknownProbe(ValueError):
    """No such probe: `suite` or `probe` names nothing the registry holds."""


def probes_of(suite: str) -> tuple[str, ...]:
    """The probe names of one suite, read from its modules' PROBES lists (nothing imported)."""
    from tasks.probes.runner import SUITE_MODULES  # deferred: only the table; the runner imports no torch

    names = []
    for module in SUITE_MODULES.get(suite, (suite,)):
        tree = ast.parse(_source(module))
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "PROBES" for t in node.targets):
                names += [item.elts[0].value for item in node.value.elts
                          if isinstance(item, ast.Tuple) and isinstance(item.elts[0], ast.Constant)]
    return tuple(names)


def file_name(suite: str, probe: str) -> str:
    return f"etriage_probe_{suite}_{probe}.py"


def command(suite: str, probe: str) -> str:
    """How the comment says to run it."""
    return f"python {file_name(suite, probe)}"


@cache
def script(suite: str, probe: str) -> str:
    if suite not in SUITES or not _NAME.fullmatch(probe) or probe not in probes_of(suite):
        raise UnknownProbe(f"no probe {suite}/{probe}")
    from tasks.probes.runner import SUITE_MODULES  # deferred: as above

    modules = _closure([*ALWAYS, *SUITE_MODULES.get(suite, (suite,))])
    parts = [HEADER.format(suite=suite, probe=probe, file=file_name(suite, probe), package=PACKAGE)]
    parts.append("SOURCES = {}\n")
    for module in modules:
        parts.append(f"SOURCES[{module!r}] = {_literal(_renamed(_source(module)))}\n")
    parts.append(MAIN.format(suite=suite, probe=probe, package=PACKAGE))
    text = "\n".join(parts)
    compile(text, file_name(suite, probe), "exec")  # a script that does not parse is never served
    return text


def _source(module: str) -> str:
    return (HERE / f"{module}.py").read_text()


def _closure(roots: list[str]) -> list[str]:
    """The modules of tasks.probes that `roots` import, transitively, roots first."""
    seen: list[str] = []
    todo = list(roots)
    while todo:
        module = todo.pop(0)
        if module in seen:
            continue
        seen.append(module)
        for node in ast.walk(ast.parse(_source(module))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tasks.probes"):
                sub = node.module.removeprefix("tasks.probes").lstrip(".")
                todo += [sub] if sub else [a.name for a in node.names if (HERE / f"{a.name}.py").is_file()]
    if any(m in seen for m in ("cli", "junit", "standalone")):
        raise RuntimeError("a probe module imports the command line or this builder")
    return seen


def _renamed(source: str) -> str:
    return re.sub(r"\btasks\.probes\b", PACKAGE, source)


def _literal(source: str) -> str:
    """The source as a Python string literal that reads like the source (a raw triple-quoted
    string) when it can be one, else repr(); either evaluates back to exactly `source`."""
    literal = f"r'''{source}'''"
    try:
        if ast.literal_eval(literal) == source:
            return literal
    except (SyntaxError, ValueError):  # a quote or backslash a raw string cannot hold
        pass
    return repr(source)


HEADER = '''#!/usr/bin/env python3
"""etriage probe {suite}/{probe}, standalone: run it where your ExecuTorch is importable.

    python {file}

It lowers the probe's small reference program with the `executorch` this interpreter imports
(your checkout, e.g. after `pip install -e .`, or a PYTHONPATH to it) and checks what the
probe guards. Exit status: 0 passed, 1 failed (the failure reproduces), 2 could not run here
(a backend or package is missing), 3 the probe itself raised something else.

Generated by etriage from its probe sources (embedded below, imports of tasks.probes renamed
to `{package}`); it imports nothing of etriage, only the standard library, torch and executorch.
"""
import importlib.abc
import importlib.util
import sys
'''

MAIN = '''

class _Embedded(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports `{package}` and `{package}.<module>` from SOURCES."""

    def find_spec(self, name, path=None, target=None):
        if name == "{package}":
            return importlib.util.spec_from_loader(name, self, is_package=True)
        prefix, _, module = name.partition(".")
        if prefix == "{package}" and module in SOURCES:
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        key = module.__name__.partition(".")[2] or "__init__"
        code = compile(SOURCES[key], f"<etriage probe {{key}}>", "exec")
        if key == "__init__":
            module.__path__ = []
        exec(code, module.__dict__)


def main() -> int:
    sys.meta_path.insert(0, _Embedded())
    try:
        from {package}.runner import registry, run_one

        [probe] = [p for p in registry("{suite}") if p.name == "{probe}"]
    except ImportError as error:  # torch or executorch is not importable by this interpreter
        print(f"SKIPPED {suite}/{probe}: cannot run here: {{error}}")
        return 2
    result = run_one(probe)
    print(f"{{result.outcome.upper()}} {suite}/{probe} ({{result.duration:.1f}}s)")
    if result.outcome != "passed":
        print(result.diagnosis)
    return {{"passed": 0, "failed": 1, "skipped": 2}}.get(result.outcome, 3)


if __name__ == "__main__":
    sys.exit(main())
'''
