"""Suspects: which changed functions of the diff a failure points at, scored.

The diff's hunks (`git diff -U0`) are mapped to their enclosing def/class at head with
`ast`. A changed region scores when the failure's traceback runs through it (most), through
its file, when its name appears in the failure text, or when the failure's category points
at its path (areas.yaml `category_paths`).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

from tasks.pipeline import gitio
from tasks.pipeline.tables import Tables
from tasks.records import ChangedFile, Suspect

FRAME_PATTERNS = (
    re.compile(r'File "(?P<file>[^"]+\.py)", line (?P<line>\d+)'),
    re.compile(r"^(?P<file>[\w./-]+\.py):(?P<line>\d+):", re.M),
)
TOP = 5


@dataclass(frozen=True)
class ChangedRegion:
    path: str
    symbol: str  # Class.method, function, "<module>", or "" for non-Python files
    first: int
    last: int
    line: int | None = None  # first changed line inside the symbol at head (1-based)


def _symbols(source: bytes) -> list[tuple[str, int, int]]:
    """(qualified name, first line, last line) of every def/class, outermost first."""
    tree = ast.parse(source)
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{_display_name(child)}"
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                found.append((name, first, child.end_lineno or child.lineno))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def _display_name(node) -> str:
    """A def's name as a person looks for it: `singledispatch` overloads are all called `_`,
    so `@to_backend.register def _(...)` is shown as `to_backend[overload@LINE]`."""
    if node.name != "_":
        return node.name
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "register":
            return f"{ast.unparse(target.value)}[overload@{node.lineno}]"
    return node.name


def changed_regions(repo, merge_base: str, head: str, changes: list[ChangedFile]) -> list[ChangedRegion]:
    hunks = gitio.diff_hunks(repo, merge_base, head)
    regions: dict[tuple[str, str], ChangedRegion] = {}
    for change in changes:
        file_hunks = hunks.get(change.path, [])
        if change.status == "D" or not change.path.endswith(".py") or change.binary:
            first_line = file_hunks[0][0] if file_hunks and change.status != "D" else None
            regions[(change.path, "")] = ChangedRegion(change.path, "", 0, 0, first_line)
            continue
        try:
            symbols = _symbols(gitio.show(repo, head, change.path))
        except SyntaxError:
            symbols = []
        for first, last in file_hunks or [(0, 0)]:
            inner = [s for s in symbols if s[1] <= last and s[2] >= first]
            name, lo, hi = inner[-1] if inner else ("<module>", first, last)
            # the hunk may start before the symbol (a hunk spanning two defs): clamp into it
            line = max(first, lo) if first else None
            key = (change.path, name)
            old = regions.get(key)
            if old:
                regions[key] = ChangedRegion(change.path, name, min(lo, old.first), max(hi, old.last),
                                             min(filter(None, (old.line, line)), default=None))
            else:
                regions[key] = ChangedRegion(change.path, name, lo, hi, line)
    return list(regions.values())


def normalise(path: str) -> str:
    """An absolute frame path (site-packages, overlay) -> path relative to the package root."""
    marker = "/executorch/"
    if marker in path:
        return path.rsplit(marker, 1)[1]
    return path.lstrip("./")


def frames_of(text: str, failure) -> list[tuple[str, int]]:
    frames = [(normalise(f.file), f.line) for f in (failure.frames if failure else [])]
    for pattern in FRAME_PATTERNS:
        frames.extend((normalise(m["file"]), int(m["line"])) for m in pattern.finditer(text or ""))
    return frames


STOP_WORDS = {"self", "none", "true", "false", "test", "tests", "node", "nodes", "graph", "from",
              "with", "that", "this", "return", "module", "program", "first", "input", "output"}


def _words(text: str) -> set[str]:
    """Identifier pieces of four letters or more, singular: number_getitems -> {number, getitem}."""
    pieces = re.findall(r"[a-z][a-z0-9]{3,}", re.sub(r"([a-z])([A-Z])", r"\1_\2", text).lower().replace("_", " "))
    return {p.removesuffix("s") for p in pieces} - STOP_WORDS


def rank(regions: list[ChangedRegion], failure, text: str, category: str, tables: Tables) -> list[Suspect]:
    frames = frames_of(text, failure)
    failure_words = _words(text or "")
    hints = tables.category_paths.get(category, ())
    scored = []
    for region in regions:
        score, why = 0.0, []
        hits = [line for path, line in frames if path == region.path]
        inside = [line for line in hits if region.first <= line <= region.last]
        if inside:
            score += 5
            why.append(f"in the traceback (line {inside[-1]})")
        elif hits:
            score += 3
            why.append("its file is in the traceback")
        leaf = region.symbol.rsplit(".", 1)[-1]
        words = _words(region.symbol) & failure_words
        if len(leaf) >= 3 and leaf != "<module>" and re.search(rf"\b{re.escape(leaf)}\b", text or ""):
            score += 1.5
            why.append(f"{leaf} is named in the failure")
        elif words:
            score += 1
            why.append(f"its name shares {', '.join(sorted(words))} with the failure")
        if any(fnmatchcase(region.path, g) for g in hints):
            score += 2
            why.append(f"{category} points at {region.path.rsplit('/', 1)[0]}/")
        if "/test/" in region.path or region.path.rsplit("/", 1)[-1].startswith("test_"):
            score *= 0.5  # a changed test is more often the messenger than the cause
        if score:
            scored.append(Suspect(region.path, region.symbol, round(score, 2), "; ".join(why), region.line))
    if not scored:  # nothing points anywhere: every changed region, unranked
        scored = [Suspect(r.path, r.symbol, 0.1, "changed by this diff", r.line) for r in regions]
    scored.sort(key=lambda s: (-s.score, s.path, s.symbol))
    return scored[:TOP]
