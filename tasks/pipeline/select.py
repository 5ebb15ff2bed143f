"""Test selection beyond the fixed suites: ExecuTorch tests the change can affect.

Relevance before cost. Candidates are ranked by their evidence, strongest first:
    1. a test file the change itself edits;
    2. a test file named after a changed module (`test_<module>.py`, `<module>_test.py`);
    3. test functions whose names mention a changed module or symbol (`test_constant_prop_pass_*`
       for a change to `constant_prop_pass.py` or to `constant_prop_pass()`);
    4. files that import a changed module directly, then by import-graph distance (a reverse
       import graph of the tree built with `ast`, cached per tree sha);
    5. a touched area's files whose names speak of the focus (buffers, multi-method, ...).
The budget is spent in that order. A file too big for what is left runs only its relevant
test functions (node ids), when it has any; the first candidate always runs, whatever its
estimate, so a budget never leaves a change untested. Costs are learned per file and per test
(durations.py); table estimates are for tests never run. The plan records what was left out
and why.
"""
from __future__ import annotations

import ast
import json
import math
import os
import re
from collections import deque
from fnmatch import fnmatchcase
from pathlib import Path

from tasks.pipeline import durations, gitio
from tasks.pipeline.overlay import PACKAGE, module_name
from tasks.pipeline.tables import Tables
from tasks.records import ChangedFile, SelectedTest

LEFT_OUT_LIMIT = 40
GRAPH_VERSION = 2  # the cached graph's shape; bump when build_import_graph adds a field
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def is_test_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _imports(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(PACKAGE + "."))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if not base.startswith(PACKAGE):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    # `import executorch.a.b` names a module that may be a package's child we know of
    return {m if m in known else m.rpartition(".")[0] for m in found} & known


def _test_ids(tree: ast.AST, path: str) -> list[str]:
    """pytest node ids of a file's tests: module-level `test*` functions and `test*` methods of
    its classes (unittest.TestCase or pytest `Test*` classes)."""
    ids = []
    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            ids.append(f"{path}::{node.name}")
        elif isinstance(node, ast.ClassDef):
            ids.extend(f"{path}::{node.name}::{item.name}" for item in node.body
                       if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"))
    return ids


def build_import_graph(repo, commit: str) -> dict:
    """{"imports": {module: [modules]}, "paths": {module: path}, "tests": {path: n_tests},
    "test_ids": {path: [node ids]}}"""
    blobs = {p: sha for p, sha in gitio.ls_tree(repo, commit).items() if p.endswith(".py")}
    paths = {module_name(p): p for p in blobs if module_name(p)}
    known = set(paths)
    contents = gitio.cat_blobs(repo, sorted(set(blobs.values())))
    imports, tests, test_ids = {}, {}, {}
    for module, path in paths.items():
        try:
            tree = ast.parse(contents.get(blobs[path], b""), filename=path)
        except (SyntaxError, ValueError):
            imports[module] = []  # the change's tests will show a syntax error themselves
            continue
        imports[module] = sorted(_imports(tree, module, path.endswith("__init__.py"), known))
        if is_test_file(path):
            tests[path] = sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                              and n.name.startswith("test") for n in ast.walk(tree))
            test_ids[path] = _test_ids(tree, path)
    return {"imports": imports, "paths": paths, "tests": tests, "test_ids": test_ids}


def import_graph(repo, commit: str, data_dir: Path, use_cache: bool = True) -> dict:
    cache = data_dir / "import-graph" / f"{gitio.tree_sha(repo, commit)}.v{GRAPH_VERSION}.json"
    if use_cache and cache.is_file():
        return json.loads(cache.read_text())
    graph = build_import_graph(repo, commit)
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(graph))
    os.replace(tmp, cache)  # atomic: concurrent runs see the old file or the new one
    return graph


def _importers(graph: dict, changed_modules: set[str], max_depth: int) -> dict[str, tuple[int, str]]:
    """module -> (distance, the changed module it reaches) over the reverse import graph."""
    reverse: dict[str, list[str]] = {}
    for module, imported in graph["imports"].items():
        for target in imported:
            reverse.setdefault(target, []).append(module)
    seen = {m: (0, m) for m in changed_modules}
    queue = deque(changed_modules)
    while queue:
        module = queue.popleft()
        dist, origin = seen[module]
        if dist >= max_depth:
            continue
        for importer in reverse.get(module, ()):
            if importer not in seen:
                seen[importer] = (dist + 1, origin)
                queue.append(importer)
    return seen


def _snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()


def _names_of_change(changes: list[ChangedFile], symbols: set[str]) -> set[str]:
    """Words a relevant test's name would carry: changed modules' stems (with and without a
    `_pass`/`_utils`-style suffix) and changed symbols' snake-cased names."""
    names = set()
    for change in changes:
        stem = change.path.rsplit("/", 1)[-1].removesuffix(".py")
        if change.path.endswith(".py") and stem != "__init__" and not is_test_file(change.path):
            names.add(stem)
            names.add(re.sub(r"_(pass|passes|utils?|helpers?|impl|lib)$", "", stem))
    for symbol in symbols:
        for part in symbol.replace("[", ".").split("."):
            part = _snake(part).strip("_")
            if len(part) >= 5 and part not in ("call", "forward", "module", "overload"):
                names.add(part)
    return {n for n in names if len(n) >= 5}


def select_tests(graph: dict, changes: list[ChangedFile], tables: Tables, fixed_paths: set[str],
                 learned: dict | None = None, symbols: set[str] = frozenset()
                 ) -> tuple[list[SelectedTest], list[SelectedTest]]:
    """Rank candidates by relevance (module docstring), then spend `budget_seconds` and
    `max_files` in that order; costs from `learned` (durations.load) where known, else the
    table's conservative estimate. `symbols`: the changed functions and classes."""
    rules, learned = tables.selection, learned or {}
    changed_paths = {f.path for f in changes if f.status != "D"}
    touched = {f.path for f in changes} | {f.old_path for f in changes if f.old_path}
    changed_modules = {m for m in map(module_name, touched) if m}
    reach = _importers(graph, changed_modules, rules.max_import_depth)
    areas = {"/".join(p.split("/")[:2]) for p in touched if p.count("/") >= 2}
    stems = {p.rsplit("/", 1)[-1].removesuffix(".py") for p in touched if p.endswith(".py")} - {"__init__"}
    names = _names_of_change(changes, set(symbols))
    test_ids = graph.get("test_ids", {})

    candidates: dict[str, tuple[float, str, list[str]]] = {}
    for path, n_tests in graph["tests"].items():
        if path in fixed_paths:
            continue
        module = module_name(path)
        file_name = path.rsplit("/", 1)[-1]
        words = [w for w in rules.focus_words if w in file_name.lower()]
        relevant = [t for t in test_ids.get(path, []) if any(n in t.rsplit("::", 1)[-1].lower() for n in names)]
        reasons, score = [], 0.0
        if path in changed_paths:
            reasons.append("test file changed by this change")
            score += 1000
        named = next((stem for stem in stems if file_name in (f"test_{stem}.py", f"{stem}_test.py")), None)
        if named:
            reasons.append(f"named after the changed module {named}")
            score += 500
        if relevant:
            reasons.append(f"{len(relevant)} test(s) named after the change")
            score += 300 + min(len(relevant), 20)
        if module in reach and reach[module][0] > 0:
            dist, origin = reach[module]
            reasons.append(f"imports {origin}" + (" directly" if dist == 1 else f" ({dist} hops)"))
            score += 200 / dist
        in_area = next((a for a in areas if path.startswith(a + "/")), None)
        if in_area and words:
            reasons.append(f"in touched area {in_area}, name mentions {', '.join(words)}")
            score += 30
        elif words and reasons:
            score += 10
        if reasons:
            candidates[path] = (score, "; ".join(reasons), relevant)

    selected, left_out, spent = [], [], 0.0
    for path, (score, reason, relevant) in sorted(candidates.items(), key=lambda kv: (-kv[1][0], kv[0])):
        cost, how = durations.estimate(learned, path, graph["tests"].get(path, 1), rules)
        item = SelectedTest(path=path, reason=f"{reason} (~{cost:.0f}s, {how})", estimated_seconds=round(cost, 1))
        excluded = next((g for g in rules.exclude if fnmatchcase(path, g)), None)
        left = rules.budget_seconds - spent
        if excluded:
            item.reason += f" -- left out: excluded by {excluded!r} (needs hardware/SDK or too long)"
            left_out.append(item)
            continue
        if len({s.path.split("::", 1)[0] for s in selected}) >= rules.max_files:  # files, not node ids
            item.reason += f" -- left out: over the budget of {rules.max_files} files"
            left_out.append(item)
            continue
        if cost > left and relevant and len(relevant) < graph["tests"].get(path, 0):
            part = durations.estimate_tests(learned, relevant, rules)
            if part <= left or not selected:
                selected += [SelectedTest(path=t, reason=f"{reason}; only its tests named after the change "
                                                         f"(the whole file ~{cost:.0f}s is over the budget)",
                                          estimated_seconds=math.floor(part / len(relevant) * 10) / 10)
                             for t in relevant]
                spent += part
                item.reason += f" -- partly run: {len(relevant)} of its tests, the rest is over the time budget"
                left_out.append(item)
                continue
        if cost <= left or not selected:
            if cost > left:
                item.reason += " (over the time budget, run anyway: nothing else was selected)"
            selected.append(item)
            spent += cost
        else:
            item.reason += (f" -- left out: over the time budget ({spent:.0f}s of {rules.budget_seconds:.0f}s "
                            f"already selected)")
            left_out.append(item)
    return selected, left_out[:LEFT_OUT_LIMIT] + (
        [SelectedTest(path=f"... {len(left_out) - LEFT_OUT_LIMIT} more", reason="left out: not listed here (listing limit)")]
        if len(left_out) > LEFT_OUT_LIMIT else [])
