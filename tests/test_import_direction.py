"""Imports point one way: triage_rules <- bot <- tasks <- etriage (the command line on top).

Read from the sources with `ast`, so the test fails the moment an upward import, an import
cycle or an unexplained function-local import of the project's own code comes back.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"triage_rules": 0, "bot": 1, "tasks": 2, "etriage": 3}  # a package may import its own layer and below
DEFERRED = "# deferred:"  # a function-local import of our own code says why, on its line or the one above


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, Path]:
    return {_module_of(p): p for package in LAYERS for p in sorted((ROOT / package).rglob("*.py"))}


MODULES = _sources()


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The project's modules an import statement loads (for `from a import b`: `a.b` when that
    is a module, else `a`)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
    return [n for n in names if n.split(".")[0] in LAYERS]


def _imports() -> list[tuple[str, int, str, bool, str]]:
    """(module, line, imported module, inside a function, the source lines around it)."""
    found = []
    for module, path in MODULES.items():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text, filename=str(path))

        def visit(node, in_function):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    visit(child, True)
                elif isinstance(child, (ast.Import, ast.ImportFrom)):
                    around = "\n".join(lines[max(child.lineno - 2, 0):child.lineno])
                    for target in _targets(child, module, path.name == "__init__.py"):
                        found.append((module, child.lineno, target, in_function, around))
                elif not (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)):
                    visit(child, in_function)

        visit(tree, False)
    return found


IMPORTS = _imports()


def test_the_sources_are_found():
    assert {"bot.app", "bot.publisher", "tasks.service", "triage_rules.engine", "etriage.cli"} <= set(MODULES)
    assert len(IMPORTS) > 100


def test_no_package_imports_a_layer_above_it():
    upward = [f"{m}:{line} imports {target}" for m, line, target, _, _ in IMPORTS
              if LAYERS[target.split(".")[0]] > LAYERS[m.split(".")[0]]]
    assert not upward, "imports must point triage_rules <- bot <- tasks <- etriage:\n" + "\n".join(upward)


def test_function_local_imports_of_our_own_code_say_why():
    unexplained = [f"{m}:{line} imports {target} inside a function" for m, line, target, local, around in IMPORTS
                   if local and DEFERRED not in around]
    assert not unexplained, (f"import at module level, or say why it is deferred with `{DEFERRED} ...`:\n"
                             + "\n".join(unexplained))


def test_no_import_cycles_among_our_modules():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, _, target, local, _ in IMPORTS:
        if not local and target != module:
            graph[module].add(target)
    cycles, state = [], {}

    def walk(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                walk(nxt, stack)
        stack.pop()
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            walk(module, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("source, target", [("bot.app", "tasks.service"), ("triage_rules.engine", "bot.store")])
def test_the_check_itself_sees_an_upward_import(source, target):
    """The rule above on a made-up import, so the test cannot pass by reading nothing."""
    assert LAYERS[target.split(".")[0]] > LAYERS[source.split(".")[0]]
    node = ast.parse(f"import {target}").body[0]
    assert _targets(node, source, False) == [target]
