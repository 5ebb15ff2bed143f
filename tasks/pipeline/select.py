"""Test selection beyond the fixed suites: ExecuTorch tests the change can affect.

Relevance before cost. The merge base's coverage map (coverage_map.py), when it has the
changed files, comes first: the tests that execute a changed line (or function), by node id,
by changed lines per learned CPU second (docs/SELECTION.md). What the map does not cover is
ranked by the rest of the evidence, strongest first:
    1. a test file the change itself edits (always run, whatever the budget);
    2. a test file named after a changed module (`test_<module>.py`, `<module>_test.py`);
    3. test functions whose names mention a changed module or symbol (`test_constant_prop_pass_*`
       for a change to `constant_prop_pass.py` or to `constant_prop_pass()`);
    4. files that import a changed module directly, then by import-graph distance (a reverse
       import graph of the tree built with `ast`, cached per tree sha);
    5. a touched area's files whose names speak of the focus (buffers, multi-method, ...);
    conventions of the repository weigh in between: `test/ops/test_<op>.py` for a backend's
    operator, the `test/` directory beside the changed module.
The budget is spent in that order. A file too big for what is left runs only its relevant
test functions (node ids), when it has any; the first candidate always runs, whatever its
estimate, so a budget never leaves a change untested. Costs are learned per file and per test
(durations.py); table estimates are for tests never run.

No backend is excluded by its path. Whether a test file can run on this worker is read from
what importing it runs for certain (unmet_needs): a package the worker's Python lacks
(`tosa_serializer` for Arm, `coremltools`, ...) or the QNN SDK leaves it out, at no cost, as
"needs ...". What slips through fails at collection and is an environment verdict when the
merge base fails the same way (compare.py). What no import says (a backend the runtime does not
register, a compiled module the environment lacks) the worker learns from its own runs
(unrunnable.py): a test that failed for the environment, or a file that could not be collected at
either side, is left out of later selections on the same compiled parts for a week, and the
other tests of its file run by node id.

Every candidate names the changed file it is relevant to; the plan keeps every left-out one
with why (needs, excluded, files, budget), and the report lists them per changed file.
"""
from __future__ import annotations

import ast
import functools
import importlib.util
import json
import math
import os
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable
from fnmatch import fnmatchcase
from pathlib import Path

from tasks.pipeline import durations, gitio
from tasks.pipeline.overlay import PACKAGE, module_name
from tasks.pipeline.tables import Tables
from tasks.records import ChangedFile, SelectedTest

GRAPH_VERSION = 3  # the cached graph's shape; bump when build_import_graph adds a field
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def is_test_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _resolve(node: ast.Import | ast.ImportFrom, package: str, known: set[str]) -> tuple[set[str], set[str]]:
    """(the package's modules this import statement names, other top-level names it imports)."""
    internal, external = set(), set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            (internal if alias.name.startswith(PACKAGE + ".") else external).add(alias.name)
    else:
        if node.level:
            base_parts = package.split(".")
            base_parts = base_parts[: len(base_parts) - (node.level - 1)]
            base = ".".join(base_parts + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        if base.startswith(PACKAGE):
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                internal.add(sub if sub in known else base)
        elif base:
            external.add(base)
    # `import executorch.a.b` names a module that may be a package's child we know of
    internal = {m if m in known else m.rpartition(".")[0] for m in internal} & known
    external = {name.split(".", 1)[0] for name in external} - {"__future__", PACKAGE}
    return internal, external


def _imports(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """Every module of the package this module imports, anywhere in it (lazy ones too)."""
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in _statements(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= _resolve(node, package, known)[0]
    return found


_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _statements(tree: ast.AST):
    """Every statement of a module, nested ones too (in functions, classes, branches, `try`,
    `with`, `match`), without the expressions `ast.walk` also visits: an import or a `def` is a
    statement, found only there (the same set; main's tree's graph builds in 5.5 s, not 8.5 s)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.stmt):
            yield node
        for name in _BODIES:
            children = getattr(node, name, None)
            if children:
                stack.extend(reversed(children))


def _eager_imports(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> dict[str, list[str]]:
    """What importing the module imports for certain: statements at module level (also inside
    `if`, `with` and class bodies), not inside functions (lazy) or `try` blocks (optional),
    nor under `if TYPE_CHECKING`. {"internal": [modules], "external": [top-level names]}"""
    package = module if is_package else module.rpartition(".")[0]
    internal, external = set(), set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found = _resolve(node, package, known)
                internal.update(found[0])
                external.update(found[1])
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                    visit(node.orelse)
            elif isinstance(node, (ast.With, ast.ClassDef)):
                visit(node.body)

    visit(getattr(tree, "body", []))
    return {"internal": sorted(internal - {module}), "external": sorted(external)}


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
    "test_ids": {path: [node ids]}, "eager": {module: {"internal": [...], "external": [...]}}}"""
    blobs = {p: sha for p, sha in gitio.ls_tree(repo, commit).items() if p.endswith(".py")}
    paths = {module_name(p): p for p in blobs if module_name(p)}
    known = set(paths)
    contents = gitio.cat_blobs(repo, sorted(set(blobs.values())))
    imports, tests, test_ids, eager = {}, {}, {}, {}
    for module, path in paths.items():
        try:
            tree = ast.parse(contents.get(blobs[path], b""), filename=path)
        except (SyntaxError, ValueError):
            imports[module] = []  # the change's tests will show a syntax error themselves
            continue
        imports[module] = sorted(_imports(tree, module, path.endswith("__init__.py"), known))
        eager[module] = _eager_imports(tree, module, path.endswith("__init__.py"), known)
        if is_test_file(path):
            tests[path] = sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                              and n.name.startswith("test") for n in _statements(tree))
            test_ids[path] = _test_ids(tree, path)
    return {"imports": imports, "paths": paths, "tests": tests, "test_ids": test_ids, "eager": eager}


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


QNN_PACKAGE = f"{PACKAGE}.backends.qualcomm"  # importing it without QNN_SDK_ROOT downloads the SDK


@dataclass(frozen=True)
class Host:
    """What the worker that runs the tests offers: which top-level modules its Python can
    import, and whether a QNN SDK is configured. Decides, per test file, whether it can run."""
    qnn_sdk: bool = False
    has_module: Callable[[str], bool] = field(default=lambda name: _installed(name))
    # test file or node id -> why this worker cannot run it, learnt from its own runs (unrunnable.py)
    cannot_run: dict[str, str] = field(default_factory=dict)


def local_names(graph: dict) -> set[str]:
    """Names a test may import from its own directory or the tree's root (`import test_utils`):
    never reported as missing packages."""
    names = set()
    for path in graph["paths"].values():
        parts = path.removesuffix(".py").split("/")
        names.update(p for p in parts if p != "__init__")
    return names


def unmet_needs(graph: dict, path: str, host: Host, local: set[str] = frozenset()) -> list[str]:
    """What the test file needs that the host lacks, from what importing it runs for certain:
    the file, the conftest.py files above it, every module they import at module level, and
    their parent packages. [] when it can run here."""
    eager, modules = graph.get("eager", {}), graph["paths"]
    conftests = {p for p in modules.values() if p.rsplit("/", 1)[-1] == "conftest.py"}
    start = [module_name(path)]
    parts = path.split("/")[:-1]
    start += [module_name(f"{'/'.join(parts[:i])}/conftest.py".lstrip("/")) for i in range(len(parts) + 1)
              if f"{'/'.join(parts[:i])}/conftest.py".lstrip("/") in conftests]
    seen, queue, external = set(), deque(m for m in start if m), set()
    while queue:
        module = queue.popleft()
        if module in seen:
            continue
        seen.add(module)
        entry = eager.get(module, {})
        external.update(entry.get("external", ()))
        parent = module.rpartition(".")[0]
        queue.extend([*entry.get("internal", ()), *([parent] if parent in eager else [])])
    needs = []
    if not host.qnn_sdk and any(m == QNN_PACKAGE or m.startswith(QNN_PACKAGE + ".") for m in seen):
        needs.append("the QNN SDK (QNN_SDK_ROOT is not set; etriage never downloads it)")
    needs += [f"`{name}` (not installed)" for name in sorted(external - local) if not _has(host, name)]
    return needs


def why_not_here(graph: dict, path: str, host: Host, local: set[str] = frozenset(),
                 changed_paths: set[str] = frozenset()) -> str:
    """Why this worker cannot run the test file, "" when it can: what importing it needs that the
    host lacks, else what its earlier runs taught: the file, or every test of it, cannot run here
    (host.cannot_run; never said of a file the change edits)."""
    needs = unmet_needs(graph, path, host, local)
    if needs:
        return f"needs {', '.join(needs)}"
    if path in changed_paths:
        return ""
    ids = graph.get("test_ids", {}).get(path, [])
    learnt = [host.cannot_run[t] for t in [path, *ids] if t in host.cannot_run]
    return learnt[0] if path in host.cannot_run or (ids and len(learnt) == len(ids)) else ""


@functools.lru_cache(maxsize=None)
def _installed(name: str) -> bool:
    """Can this interpreter import the top-level module `name`? (found, never imported)"""
    return importlib.util.find_spec(name) is not None


def _has(host: Host, name: str) -> bool:
    try:
        return bool(host.has_module(name))
    except (ImportError, ValueError):
        return False


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


def _names_of_change(changes: list[ChangedFile], symbols: dict[str, str]) -> dict[str, str]:
    """Words a relevant test's name would carry, each with the changed path it comes from:
    changed modules' stems (with and without a `_pass`/`_utils`-style suffix) and changed
    symbols' snake-cased names."""
    names = {}
    for change in changes:
        stem = change.path.rsplit("/", 1)[-1].removesuffix(".py")
        if change.path.endswith(".py") and stem != "__init__" and not is_test_file(change.path):
            names.setdefault(stem, change.path)
            names.setdefault(re.sub(r"_(pass|passes|utils?|helpers?|impl|lib)$", "", stem), change.path)
    for symbol, path in symbols.items():
        for part in symbol.replace("[", ".").split("."):
            part = _snake(part).strip("_")
            if len(part) >= 5 and part not in ("call", "forward", "module", "overload"):
                names.setdefault(part, path)
    return {n: p for n, p in names.items() if len(n) >= 5}


def _home(path: str) -> str:
    """The part of the tree a file belongs to: its backend (`backends/arm`) or its top-level
    directory (`exir`)."""
    parts = path.split("/")
    return "/".join(parts[:2]) if parts[0] == "backends" and len(parts) > 2 else parts[0]


def _squash(name: str) -> str:
    """An operator's name for matching `op_avg_pooling2d` with `test_avgpool2d`."""
    return name.lower().replace("_", "").replace("ing", "")


def _operator_names(changes: list[ChangedFile], symbols: dict[str, str]) -> dict[str, str]:
    """Operator names a backend change speaks of -> the changed path: an operator module's
    stem (`operators/op_add.py`) and the configs or visitors it changes (`AddConfig`)."""
    names = {}
    for change in changes:
        stem = change.path.rsplit("/", 1)[-1].removesuffix(".py")
        if change.path.startswith("backends/") and stem.startswith("op_"):
            names.setdefault(_squash(stem.removeprefix("op_")), change.path)
    for symbol, path in symbols.items():
        if not path.startswith("backends/"):
            continue
        for part in symbol.replace("[", ".").split("."):
            snake = _snake(part)
            for suffix in ("_config", "_visitor", "_pattern", "_quantizer"):
                if snake.endswith(suffix) and len(snake) > len(suffix) + 2:
                    names.setdefault(_squash(snake.removesuffix(suffix)), path)
    return names


def _convention(path: str, changes: list[ChangedFile], operators: dict[str, str]) -> tuple[str, float, str]:
    """(reason, score, the changed path) when a repository convention says this test file is
    the change's: `test/ops/test_<op>.py` of the operator's backend, or a test file in the
    `test/`/`tests/` directory beside the changed module (or beside its package)."""
    parts = path.split("/")
    if len(parts) >= 4 and parts[-2] == "ops" and parts[-3] in ("test", "tests"):
        op = _squash(parts[-1].removeprefix("test_").removesuffix(".py"))
        backend = "/".join(parts[:-3])
        exact = [o for o in operators if o == op and operators[o].startswith(backend + "/")]
        near = [o for o in operators if len(o) >= 3 and (o.startswith(op) or op.startswith(o))
                and operators[o].startswith(backend + "/")]
        if exact or near:
            return f"the operator's tests ({'/'.join(parts[-3:])})", 600 if exact else 450, operators[(exact or near)[0]]
    test_dir = "/".join(parts[:-1])
    for change in changes:
        if is_test_file(change.path) or not change.path.endswith(".py"):
            continue
        home = change.path.rsplit("/", 1)[0] if "/" in change.path else ""
        for beside in (home, home.rpartition("/")[0]):
            if beside and any(test_dir == f"{beside}/{d}" or test_dir.startswith(f"{beside}/{d}/")
                              for d in ("test", "tests")):
                return f"in the test directory beside the changed module ({test_dir}/)", \
                    260 if beside == home else 150, change.path
    return "", 0.0, ""


def _left(item: SelectedTest, why: str, text: str) -> SelectedTest:
    item.why = why
    item.reason += f" -- {text}"
    return item


def select_tests(graph: dict, changes: list[ChangedFile], tables: Tables, fixed_paths: set[str],
                 learned: dict | None = None, symbols: Iterable[str] | dict[str, str] = (),
                 host: Host | None = None, evidence=None) -> tuple[list[SelectedTest], list[SelectedTest]]:
    """Rank candidates by relevance (module docstring), then spend `budget_seconds` and
    `max_files` in that order; costs from `learned` (durations.load) where known, else the
    table's conservative estimate. `symbols`: the changed functions and classes (a dict maps
    each to its file). A test file that needs what `host` lacks (unmet_needs), or that this
    worker's earlier runs showed it cannot run (host.cannot_run), is not run and costs nothing.
    Every item names the changed `module` it is relevant to; a left-out one says `why`: needs,
    excluded, files, budget.

    `evidence` (coverage_map.Evidence): the merge base's coverage map. Its tests that execute a
    changed line (or function) come first, by node id, ranked by changed lines executed per
    learned second; the ranking above is the fallback for what the map does not cover, and a
    file whose tests the map already chose is not run again whole."""
    rules, learned, host = tables.selection, learned or {}, host or Host()
    changed_paths = {f.path for f in changes if f.status != "D"}
    touched = {f.path for f in changes} | {f.old_path for f in changes if f.old_path}
    module_paths = {module_name(p): p for p in sorted(touched) if module_name(p)}
    reach = _importers(graph, set(module_paths), rules.max_import_depth)
    areas = {"/".join(p.split("/")[:2]) for p in touched if p.count("/") >= 2}
    stems = {p.rsplit("/", 1)[-1].removesuffix(".py"): p for p in sorted(touched) if p.endswith(".py")}
    stems.pop("__init__", None)
    symbols = symbols if isinstance(symbols, dict) else dict.fromkeys(symbols, "")
    names = _names_of_change(changes, symbols)
    test_ids = graph.get("test_ids", {})
    local = local_names(graph)
    operators = _operator_names(changes, symbols)

    candidates: dict[str, tuple[float, str, list[str], str]] = {}
    for path, n_tests in graph["tests"].items():
        if path in fixed_paths:
            continue
        module = module_name(path)
        file_name = path.rsplit("/", 1)[-1]
        words = [w for w in rules.focus_words if w in file_name.lower()]
        matched = {n: o for n, o in names.items()
                   if any(n in t.rsplit("::", 1)[-1].lower() for t in test_ids.get(path, []))}
        relevant = [t for t in test_ids.get(path, []) if any(n in t.rsplit("::", 1)[-1].lower() for n in matched)]
        reasons, score, origins = [], 0.0, []
        if path in changed_paths:
            reasons.append("test file changed by this change")
            score += 1000
            origins.append(path)
        named = next((stem for stem in stems  # a private module (`_program.py`) is named without its `_`
                      if file_name in (f"test_{stem}.py", f"{stem}_test.py", f"test_{stem.lstrip('_')}.py")), None)
        if named and (_home(path) == _home(stems[named]) or module in reach):
            reasons.append(f"named after the changed module {named}")
            score += 500
            origins.append(stems[named])
        elif named:  # a common stem (`partitioner`) elsewhere in the tree: a weak hint
            reasons.append(f"named like the changed module {named}, in another part of the tree")
            score += 40
            origins.append(stems[named])
        near = module in reach or any(_home(path) == _home(o) for o in matched.values() if o)
        if relevant and near:
            reasons.append(f"{len(relevant)} test(s) named after the change")
            score += 300 + min(len(relevant), 20)
            origins += [o for o in matched.values() if o]
        elif relevant:  # a common word in tests that neither import the change nor sit beside it
            reasons.append(f"{len(relevant)} test(s) named like the change, in another part of the tree")
            score += 20
            origins += [o for o in matched.values() if o]
        if module in reach and reach[module][0] > 0:
            dist, origin = reach[module]
            reasons.append(f"imports {origin}" + (" directly" if dist == 1 else f" ({dist} hops)"))
            score += 200 / dist
            origins.append(module_paths[origin])
        convention, points, convention_origin = _convention(path, changes, operators)
        if convention and not named:
            reasons.append(convention)
            score += points
            origins.append(convention_origin)
        in_area = next((a for a in areas if path.startswith(a + "/")), None)
        if in_area and words:
            reasons.append(f"in touched area {in_area}, name mentions {', '.join(words)}")
            score += 30
            origins.append(next(p for p in sorted(touched) if p.startswith(in_area + "/")))
        elif words and reasons:
            score += 10
        if reasons:
            candidates[path] = (score, "; ".join(reasons), relevant, origins[0] if origins else "")

    selected, left_out, spent = [], [], 0.0
    if evidence is not None and evidence.hits:
        spent = _from_the_map(evidence, graph, rules, learned, host, local, changed_paths, selected, left_out)
    by_map = {s.path.split("::", 1)[0] for s in selected}
    for path, (score, reason, relevant, origin) in sorted(candidates.items(), key=lambda kv: (-kv[1][0], kv[0])):
        if path in by_map:
            continue  # the map chose the tests of it that execute the change
        cost, how = durations.estimate(learned, path, graph["tests"].get(path, 1), rules)
        item = SelectedTest(path=path, reason=f"{reason} (~{cost:.0f}s, {how})", estimated_seconds=round(cost, 1),
                            module=origin)
        excluded = next((g for g in rules.exclude if fnmatchcase(path, g)), None)
        left = rules.budget_seconds - spent
        if excluded:
            left_out.append(_left(item, "excluded", f"left out: excluded by {excluded!r} in the tables "
                                                    "(too long for a pull request)"))
            continue
        why = why_not_here(graph, path, host, local, changed_paths)
        if why:
            left_out.append(_left(item, "needs", f"not run on this worker: {why}"))
            continue
        if len({s.path.split("::", 1)[0] for s in selected} - by_map) >= rules.max_files:  # files, not node ids
            left_out.append(_left(item, "files", f"left out: over the budget of {rules.max_files} files"))
            continue
        unrunnable = [] if path in changed_paths else [t for t in test_ids.get(path, []) if t in host.cannot_run]
        if unrunnable:  # some of its tests cannot run here (learnt): the others run, by node id
            rest = [t for t in test_ids[path] if t not in host.cannot_run]
            part = durations.estimate_tests(learned, rest, rules)
            if part > left and relevant:  # over the budget: its tests named after the change, as below
                rest = [t for t in relevant if t not in host.cannot_run]
                part = durations.estimate_tests(learned, rest, rules)
            if rest and (part <= left or not selected):
                selected += _by_node_id(rest, f"{reason}; not its {len(unrunnable)} test(s) that cannot run here",
                                        part, origin)
                spent += part
                left_out.append(_left(item, "needs", f"partly run: {len(unrunnable)} of its tests not run on "
                                                     f"this worker: {host.cannot_run[unrunnable[0]]}"))
            else:
                left_out.append(_left(item, "budget", f"left out: over the time budget ({spent:.0f}s of "
                                                      f"{rules.budget_seconds:.0f}s already selected; "
                                                      f"{len(unrunnable)} of its tests cannot run on this worker)"))
            continue
        if cost > left and relevant and len(relevant) < graph["tests"].get(path, 0):
            part = durations.estimate_tests(learned, relevant, rules)
            if part <= left or not selected:
                selected += _by_node_id(relevant, f"{reason}; only its tests named after the change "
                                                  f"(the whole file ~{cost:.0f}s is over the budget)", part, origin)
                spent += part
                left_out.append(_left(item, "budget", f"partly run: {len(relevant)} of its tests, the rest "
                                                      "is over the time budget"))
                continue
        if cost <= left or not selected or path in changed_paths:  # a changed test file always runs
            if cost > left:
                item.reason += " (over the time budget, run anyway: nothing else was selected)"
            selected.append(item)
            spent += cost
        else:
            left_out.append(_left(item, "budget", f"left out: over the time budget ({spent:.0f}s of "
                                                  f"{rules.budget_seconds:.0f}s already selected)"))
    return selected, left_out


def _by_node_id(node_ids: list[str], reason: str, seconds: float, origin: str) -> list[SelectedTest]:
    """Some tests of one file, selected by node id: their estimate shared among them."""
    return [SelectedTest(path=t, reason=reason, estimated_seconds=math.floor(seconds / len(node_ids) * 10) / 10,
                         module=origin) for t in node_ids]


def _from_the_map(evidence, graph: dict, rules, learned: dict, host: Host, local: set[str],
                  changed_paths: set[str], selected: list, left_out: list) -> float:
    """Spend the budget on the map's tests, best value first: changed lines executed (a changed
    function's other lines count a fifth) per learned second, a file's collection paid once.
    Returns the seconds spent. A changed test file runs whole (the ranking's first rule)."""
    def value(hit):
        return (hit.lines + 0.2 * hit.functions) / max(durations.estimate_tests(learned, [hit.test], rules)
                                                       - rules.seconds_per_file, 0.05)

    files_paid, spent, blocked = set(), 0.0, {}
    for hit in sorted(evidence.hits.values(), key=lambda h: (-value(h), h.test)):
        path = hit.test.split("::", 1)[0]
        if path in changed_paths or path not in graph["tests"]:
            continue  # runs whole, or no longer a test file of this tree
        if path not in blocked:
            blocked[path] = why_not_here(graph, path, host, local)
        what = (f"executes {hit.lines} changed line(s)" if hit.lines else
                f"executes {hit.functions} changed function(s) (not the changed lines themselves)")
        cost = durations.estimate_tests(learned, [hit.test], rules) - rules.seconds_per_file
        cost += 0 if path in files_paid else rules.seconds_per_file
        item = SelectedTest(path=hit.test, reason=f"the merge base's coverage map: {what} (~{cost:.1f}s)",
                            estimated_seconds=round(cost, 2), module=hit.module)
        why = blocked[path] or host.cannot_run.get(hit.test, "")
        if why:
            left_out.append(_left(item, "needs", f"not run on this worker: {why}"))
        elif spent + cost <= rules.budget_seconds or not selected:
            selected.append(item)
            spent += cost
            files_paid.add(path)
        else:
            left_out.append(_left(item, "budget", f"left out: over the budget ({spent:.0f}s of "
                                                  f"{rules.budget_seconds:.0f}s of learned CPU time)"))
    return spent
