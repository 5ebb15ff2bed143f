"""Test selection beyond the fixed suites: ExecuTorch tests the change can affect.

Two reasons to pick a test file: it imports a changed module (directly or through modules
that do; a reverse import graph of the tree built with `ast`, cached per tree sha), or it
sits in a touched area and its name speaks of the focus (mutable buffers, multi-method,
delegation, ...). Picks are ranked and cut to a time budget; the plan records what was
left out and why.
"""
from __future__ import annotations

import ast
import json
import os
from collections import deque
from fnmatch import fnmatchcase
from pathlib import Path

from tasks.pipeline import durations, gitio
from tasks.pipeline.overlay import PACKAGE, module_name
from tasks.pipeline.tables import Tables
from tasks.records import ChangedFile, SelectedTest

LEFT_OUT_LIMIT = 40


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


def build_import_graph(repo, commit: str) -> dict:
    """{"imports": {module: [modules]}, "paths": {module: path}, "tests": {path: n_tests}}"""
    blobs = {p: sha for p, sha in gitio.ls_tree(repo, commit).items() if p.endswith(".py")}
    paths = {module_name(p): p for p in blobs if module_name(p)}
    known = set(paths)
    contents = gitio.cat_blobs(repo, sorted(set(blobs.values())))
    imports, tests = {}, {}
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
    return {"imports": imports, "paths": paths, "tests": tests}


def import_graph(repo, commit: str, data_dir: Path, use_cache: bool = True) -> dict:
    cache = data_dir / "import-graph" / f"{gitio.tree_sha(repo, commit)}.json"
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


def select_tests(graph: dict, changes: list[ChangedFile], tables: Tables, fixed_paths: set[str],
                 learned: dict | None = None) -> tuple[list[SelectedTest], list[SelectedTest]]:
    """Rank candidates, keep them while they fit `max_files` and `budget_seconds`; costs come
    from `learned` (durations.load) where known, else the table's conservative estimate."""
    rules = tables.selection
    changed_paths = {f.path for f in changes if f.status != "D"}
    touched = {f.path for f in changes} | {f.old_path for f in changes if f.old_path}
    changed_modules = {m for m in map(module_name, touched) if m}
    reach = _importers(graph, changed_modules, rules.max_import_depth)
    areas = {"/".join(p.split("/")[:2]) for p in touched if p.count("/") >= 2}

    candidates: dict[str, tuple[float, str]] = {}
    for path, n_tests in graph["tests"].items():
        if path in fixed_paths:
            continue
        module = module_name(path)
        words = [w for w in rules.focus_words if w in path.rsplit("/", 1)[-1].lower()]
        reasons, score = [], 0.0
        if path in changed_paths:
            reasons.append("test file changed by this change")
            score += 100
        if module in reach and reach[module][0] > 0:
            dist, origin = reach[module]
            reasons.append(f"imports {origin}" + (" directly" if dist == 1 else f" ({dist} hops)"))
            score += 40 / dist
        in_area = next((a for a in areas if path.startswith(a + "/")), None)
        if in_area and words:
            reasons.append(f"in touched area {in_area}, name mentions {', '.join(words)}")
            score += 30
        elif words and reasons:
            score += 10
        if reasons:
            candidates[path] = (score, "; ".join(reasons))

    selected, left_out, spent = [], [], 0.0
    for path, (score, reason) in sorted(candidates.items(), key=lambda kv: (-kv[1][0], kv[0])):
        cost, how = durations.estimate(learned or {}, path, graph["tests"].get(path, 1), rules)
        item = SelectedTest(path=path, reason=f"{reason} (~{cost:.0f}s, {how})", estimated_seconds=round(cost, 1))
        excluded = next((g for g in rules.exclude if fnmatchcase(path, g)), None)
        if excluded:
            item.reason += f" -- left out: excluded by {excluded!r} (needs hardware/SDK or too long)"
            left_out.append(item)
        elif len(selected) >= rules.max_files:
            item.reason += f" -- left out: over the budget of {rules.max_files} files"
            left_out.append(item)
        elif spent + cost > rules.budget_seconds:
            item.reason += (f" -- left out: over the time budget ({spent:.0f}s of {rules.budget_seconds:.0f}s "
                            f"already selected)")
            left_out.append(item)
        else:
            selected.append(item)
            spent += cost
    return selected, left_out[:LEFT_OUT_LIMIT] + (
        [SelectedTest(path=f"... {len(left_out) - LEFT_OUT_LIMIT} more", reason="left out: not listed here (listing limit)")]
        if len(left_out) > LEFT_OUT_LIMIT else [])
