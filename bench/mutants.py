"""Mutants of one Python module: one small change each, inside a function body.

    candidates(source, path) -> [Mutant]   every mutation point, in source order
    mutant.apply(source) -> str            the mutated module (only the edited bytes change)

Operators: negate an `if`/`while` condition, drop a simple statement (`pass` in its place),
swap two adjacent positional arguments of a call, insert an early `return` before a
statement, flip a comparison operator, swap a constant (True<->False, 0<->1).
Module-level code, decorators, default values, annotations and f-strings are never
mutated. `Mutant.lines` are the lines of which at least one must have run for the mutated
code to run: what a test's line coverage is checked against.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

OPERATORS = ("negate_condition", "drop_statement", "swap_arguments", "early_return",
             "flip_comparison", "swap_constant")
FLIPPED = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE,
           ast.LtE: ast.Gt, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
DROPPABLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return, ast.Raise, ast.Delete,
             ast.Break, ast.Continue)
Edit = tuple[int, int, int, int, str]  # first line, first col, last line, end col (UTF-8 bytes), new text


@dataclass(frozen=True)
class Mutant:
    path: str
    operator: str
    function: str  # qualified name of the enclosing def
    line: int  # first line of the mutated statement
    lines: tuple[int, ...]
    description: str
    edits: tuple[Edit, ...]

    @property
    def key(self) -> str:
        """Stable and unique within the module: where the first edit is, and the operator."""
        return f"{self.path}:{self.edits[0][0]}:{self.edits[0][1]}:{self.operator}"

    def apply(self, source: str) -> str:
        """The module with this mutant's edits (UTF-8 byte columns, as `ast` gives them)."""
        lines = source.encode().splitlines(keepends=True)
        for first, first_col, last, end_col, text in sorted(self.edits, reverse=True):
            head, tail = lines[first - 1][:first_col], lines[last - 1][end_col:]
            lines[first - 1:last] = [head + text.encode() + tail]
        return b"".join(lines).decode()

    def mutated(self, source: str) -> str | None:
        """`apply`, or None when the result does not compile or changes nothing."""
        result = self.apply(source)
        try:
            compile(result, self.path, "exec")
        except (SyntaxError, ValueError):
            return None
        return result if result != source else None


def candidates(source: str, path: str) -> list[Mutant]:
    """Every mutation point of the module's function bodies, in source order (whether one
    compiles is checked when it is used: `Mutant.mutated`)."""
    tree = ast.parse(source)
    found: list[Mutant] = []
    text_lines = source.encode().splitlines(keepends=True)

    def segment(node) -> str:
        return ast.get_source_segment(source, node) or ast.unparse(node)

    def span(node) -> tuple[int, int, int, int]:
        return node.lineno, node.col_offset, node.end_lineno, node.end_col_offset

    def add(operator, function, stmt, node, description, edits):
        lines = tuple(sorted({stmt.lineno, *range(node.lineno, node.end_lineno + 1)}))
        found.append(Mutant(path, operator, function, stmt.lineno, lines, f"line {stmt.lineno}: {description}",
                            tuple(edits)))

    def expressions(stmt, function):
        """Mutation points in the expressions a statement evaluates (not nested bodies)."""
        skip = set()
        for field in ("annotation", "returns"):
            if getattr(stmt, field, None) is not None:
                skip.update(map(id, ast.walk(getattr(stmt, field))))
        roots = [v for name, v in ast.iter_fields(stmt)
                 if name not in ("body", "orelse", "finalbody", "handlers", "cases")]
        for root in roots:
            for node in (n for r in (root if isinstance(root, list) else [root]) if isinstance(r, ast.AST)
                         for n in ast.walk(r)):
                if id(node) in skip or isinstance(node, (ast.Lambda, ast.JoinedStr)):
                    skip.update(map(id, ast.walk(node)))
                    continue
                if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in FLIPPED:
                    flipped = ast.Compare(node.left, [FLIPPED[type(node.ops[0])]()], node.comparators)
                    add("flip_comparison", function, stmt, node,
                        f"`{_short(segment(node))}` -> `{_short(ast.unparse(flipped))}`",
                        [(*span(node), f"({ast.unparse(flipped)})")])
                elif isinstance(node, ast.Constant) and (isinstance(node.value, bool)
                                                         or (type(node.value) is int and node.value in (0, 1))):
                    new = str(not node.value) if isinstance(node.value, bool) else str(1 - node.value)
                    add("swap_constant", function, stmt, node, f"{node.value!r} -> {new}", [(*span(node), new)])
                elif isinstance(node, ast.Call):
                    args = node.args
                    for i in range(len(args) - 1):
                        a, b = args[i], args[i + 1]
                        if isinstance(a, ast.Starred) or isinstance(b, ast.Starred) or ast.dump(a) == ast.dump(b):
                            continue
                        add("swap_arguments", function, stmt, node,
                            f"`{_short(segment(node.func))}(...)` arguments {i + 1} and {i + 2} swapped",
                            [(*span(a), segment(b)), (*span(b), segment(a))])

    def statements(body, function, in_function):
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{function}.{stmt.name}" if function else stmt.name
                statements(stmt.body, name, in_function or not isinstance(stmt, ast.ClassDef))
                continue
            if not in_function:  # module level, or a class body outside any function: runs at import
                statements([s for s in ast.iter_child_nodes(stmt) if isinstance(s, ast.stmt)], function, False)
                continue
            docstring = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
            starts_line = text_lines[stmt.lineno - 1][:stmt.col_offset].strip() == b""
            if not docstring and starts_line and not getattr(stmt, "decorator_list", None):
                indent = text_lines[stmt.lineno - 1][:stmt.col_offset].decode()
                add("early_return", function, stmt, stmt, f"`return` inserted before `{_short(segment(stmt))}`",
                    [(stmt.lineno, 0, stmt.lineno, 0, f"{indent}return\n")])
            if isinstance(stmt, DROPPABLE) and not docstring:
                add("drop_statement", function, stmt, stmt, f"`{_short(segment(stmt))}` dropped",
                    [(*span(stmt), "pass")])
            if isinstance(stmt, (ast.If, ast.While)):
                test = stmt.test
                add("negate_condition", function, stmt, test, f"`{_short(segment(test))}` negated",
                    [(*span(test), f"not ({segment(test)})")])
            expressions(stmt, function)
            for field in ("body", "orelse", "finalbody"):
                statements(getattr(stmt, field, None) or [], function, True)
            for handler in getattr(stmt, "handlers", None) or []:
                statements(handler.body, function, True)
            for case in getattr(stmt, "cases", None) or []:
                statements(case.body, function, True)

    statements(tree.body, "", False)
    return found


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
