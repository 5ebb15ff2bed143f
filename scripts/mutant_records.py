"""Real training records from mutants of ExecuTorch's lowering code: each mutant (one small
change inside one function of an area's module: bench/mutants.py) runs the area's own
ExecuTorch tests on the installed package, and every test that fails on the mutant but passes
unmutated becomes a corpus record of what pytest printed, labelled with the area's category.

    .venv/bin/python scripts/mutant_records.py [--area multi_method_lowering|mutable_buffer ...]
        [--per-module 40] [--seed 0] [--out tests/engine/corpus/generated/mutants_of_executorch.jsonl]

The label comes from where the fault is, not from the words of its symptom: a mutant of
`exir/backend/backend_api.py` that fails a multi-method test with a bare AssertionError is a
multi-method failure, which is what a text classifier must learn to see through. Only tests of
the area run (by per-test line coverage: those that execute the mutated lines), so a failure
is the area's by what broke and by what it broke.

How: the parent imports torch, ExecuTorch and pytest once; each mutant runs in a forked child
that swaps the module's function code objects for the mutated module's (`patch_module`: every
reference, `from x import f` included, sees the mutant) and runs pytest in-process from the
package's top, as ExecuTorch's CI runs it from its repository's (node ids and traceback paths
repository-relative). A child that hangs is killed with its process group. An excerpt is what
pytest printed for the test, verbatim: the test's header line and its short traceback (only its
tail, from a frame's line, when longer than MAX_LINES), with this machine's paths made general;
a failure outside the test's call (setup, collection) or an import error is no record. The
per-test coverage of the unmutated run is cached under ~/.cache/etriage. Records' sources are
the mutated ExecuTorch files, never a thread of the evaluation split; a record's note names
this script, bench/mutants.py (which made the mutant) and the test that failed.
"""
from __future__ import annotations

import argparse
import gc
import json
import linecache
import os
import random
import re
import signal
import sys
import tempfile
import types
import warnings
from dataclasses import dataclass
from importlib import import_module, metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench.mutants import Mutant, candidates  # noqa: E402
from triage_rules.roots import shape  # noqa: E402

OUT = REPO / "tests" / "engine" / "corpus" / "generated" / "mutants_of_executorch.jsonl"
MAX_LINES = 38  # an excerpt is 2 to 40 lines (the corpus's rule)
PER_MUTANT = 2  # records of one mutant at most, each a different message shape
MAX_TESTS = 12  # tests a mutant runs at most (those covering its lines)
CHILD_TIMEOUT = 120  # seconds a mutant's tests may take before the child is killed
_EXCEPTION_LINE = re.compile(r"^E\s+(?:[\w.]+\.)?\w*(?:Error|Exception|Violation\w*|Failure)\b|^E\s+assert\s")


@dataclass(frozen=True)
class Module:
    path: str  # package-relative (executorch/...)
    functions: str = ""  # only functions whose source matches this (a generic module's area part)


@dataclass(frozen=True)
class Area:
    category: str
    modules: tuple[Module, ...]
    tests: tuple[tuple[str, str], ...]  # (package-relative test file, -k expression)


# What each category's code is, and the ExecuTorch tests that guard it.
AREAS = {
    "multi_method_lowering": Area("multi_method_lowering", (
        Module("exir/backend/backend_api.py"),
        Module("exir/backend/utils.py"),
        Module("exir/lowered_backend_module.py"),
        Module("exir/backend/canonical_partitioners/duplicate_constant_node_pass.py"),
        Module("exir/backend/canonical_partitioners/pattern_op_partitioner.py"),
        Module("backends/xnnpack/partition/xnnpack_partitioner.py"),
        Module("backends/xnnpack/partition/config/xnnpack_config.py"),
        Module("backends/xnnpack/partition/config/generic_node_configs.py"),
        Module("backends/xnnpack/xnnpack_preprocess.py"),
        Module("exir/program/_program.py", r"to_backend|partition|delegat|lowered"),
    ), (
        ("exir/backend/test/test_to_backend_multi_method.py", ""),
        ("exir/backend/test/test_partitioner.py", ""),
        ("exir/backend/test/test_backends_lifted.py", ""),
        ("exir/backend/test/test_utils.py", ""),
        ("exir/backend/test/test_lowered_backend_module.py", ""),
        ("backends/xnnpack/test/test_xnnpack_partitioner.py", ""),
        ("backends/xnnpack/test/ops/test_add.py", ""),
        ("backends/xnnpack/test/ops/test_maxpool2d.py", ""),
        ("backends/xnnpack/test/ops/test_batch_norm.py", ""),
    )),
    "mutable_buffer": Area("mutable_buffer", (
        Module("exir/passes/insert_write_back_for_buffers_pass.py"),
        Module("exir/passes/init_mutable_pass.py"),
        # generic modules: only functions that handle buffers' state (in memory planning, the
        # emitter and the program, "buffer" is also the planned memory or the .pte's bytes)
        Module("exir/passes/constant_prop_pass.py", r"buffer|mutat"),
        Module("exir/passes/reinplace.py"),
        Module("exir/memory_planning.py", r"mutable|mutat"),
        Module("exir/emit/_emitter.py", r"mutable|mutat"),
        Module("exir/program/_program.py", r"mutable|mutat|write_back"),
        Module("exir/passes/spec_prop_pass.py", r"mutable|mutat|buffer|copy_"),
    ), (
        ("exir/tests/test_passes.py", "mutable or constant_prop or write_back or buffer"),
        ("exir/tests/test_memory_planning.py", "mutable or buffer or kv or multi_state"),
        ("exir/emit/test/test_emit.py", "mutable or buffer or state"),
        ("exir/tests/test_reinplace_pass.py", ""),
        ("exir/backend/test/test_partitioner.py", "buffer or mutable"),
        ("backends/transforms/test/test_create_mutable_buffer.py", ""),
    )),
}


# -- swapping a module's code in a running process ------------------------------------------
def _code_objects(code: types.CodeType) -> list[types.CodeType]:
    found = [code]
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            found.extend(_code_objects(constant))
    return found


def _by_name(code: types.CodeType) -> dict[str, list[types.CodeType]]:
    """qualified name -> the code objects of that name, in source order."""
    out: dict[str, list[types.CodeType]] = {}
    for c in sorted(_code_objects(code)[1:], key=lambda c: c.co_firstlineno):
        out.setdefault(c.co_qualname, []).append(c)
    return out


def patch_module(filename: str, original: str, mutated: str) -> int:
    """Give every live function defined in `filename` its code from `mutated` (the same
    functions, one changed), and show the mutated lines in tracebacks. Returns how many
    functions were swapped."""
    before, after = _by_name(compile(original, filename, "exec")), _by_name(compile(mutated, filename, "exec"))
    swapped = 0
    warnings.simplefilter("ignore")  # gc's objects include deprecated module proxies
    for obj in gc.get_objects():
        if not isinstance(obj, types.FunctionType) or obj.__code__.co_filename != filename:
            continue
        code = obj.__code__
        same = before.get(code.co_qualname, [])
        index = next((i for i, c in enumerate(same) if c.co_firstlineno == code.co_firstlineno), None)
        new = after.get(code.co_qualname, [])
        if index is None or index >= len(new):
            continue
        try:
            obj.__code__ = new[index]
            swapped += 1
        except ValueError:  # free variables differ: that function keeps its code
            continue
    lines = mutated.splitlines(keepends=True)
    linecache.cache[filename] = (len(mutated), None, lines, filename)  # mtime None: never re-read
    return swapped


# -- running tests in a forked child --------------------------------------------------------
def run_forked(function, timeout: float = CHILD_TIMEOUT):
    """Call `function()` in a forked child (its own process group); its JSON result, or None
    when it crashed or hung (then the whole group is killed)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the parent's code
        os.close(read)
        status = 0
        try:
            os.setpgid(0, 0)
            result = function()
            with os.fdopen(write, "w") as out:
                json.dump(result, out)
        except BaseException:  # noqa: BLE001 - the child reports nothing; the parent sees None
            status = 1
        finally:
            os._exit(status)
    os.close(write)

    def kill(*_):
        for target in (-pid, pid):
            try:
                os.kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    previous = signal.signal(signal.SIGALRM, kill)
    signal.alarm(max(1, int(timeout)))
    try:
        with os.fdopen(read) as inp:
            data = inp.read()
        os.waitpid(pid, 0)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    try:
        return json.loads(data) if data else None
    except json.JSONDecodeError:
        return None


def pytest_args(scratch: Path, installed: Path) -> list[str]:
    """pytest as ExecuTorch's CI runs it from its repository's top (node ids and traceback paths
    repository-relative), with no ini file or conftest of this checkout."""
    ini = scratch / "pytest.ini"
    # executorch is a namespace package: without this, pytest imports a test of backends/xnnpack/
    # as `backends.xnnpack.test...`, and the package's relative imports load a second copy of
    # its modules (`backends.xnnpack.xnnpack_preprocess`) that the mutant's swap never reaches
    ini.write_text("[pytest]\nconsider_namespace_packages = true\n", encoding="utf-8")
    return ["-q", "-p", "no:cacheprovider", "--tb=short", "-c", str(ini), f"--rootdir={installed}",
            "-W", "ignore", "--show-capture=no"]


class Failures:
    """pytest plugin: the tests that failed in their call (not in setup or collection), in
    report order, with the header pytest prints above each one's traceback."""

    def __init__(self):
        self.failed: list[dict] = []

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed.append({"nodeid": report.nodeid, "when": report.when, "head": report.head_line or "",
                                "text": report.longreprtext})


def in_child_pytest(args: list[str], installed: Path, log: Path, plugins: list) -> Failures:
    """Run pytest in this (forked) process from the package's top, its output into `log`."""
    import pytest

    failures = Failures()
    os.chdir(installed)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    sys.stdout, sys.stderr = os.fdopen(1, "w", closefd=False), os.fdopen(2, "w", closefd=False)
    pytest.main(args, plugins=[failures, *plugins])
    sys.stdout.flush()
    sys.stderr.flush()
    return failures


# a test's header: "____ TestX.test_y ____", down to "_ TestX.test_y _" for a long name
_HEADER = re.compile(r"^_+ (.+?) _+$")
_SECTION_END = re.compile(r"^(?:_+ .+ _+|-+ .* -+|=+.*=+)$")


def sections_of(log: Path) -> list[tuple[str, list[str]]]:
    """(header text, lines) of each failure pytest printed: its header line, then its traceback
    up to the next header or section rule, exactly as printed."""
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    out: list[tuple[str, list[str]]] = []
    for index, line in enumerate(lines):
        match = _HEADER.match(line)
        if not match:
            continue
        end = next((j for j in range(index + 1, len(lines)) if _SECTION_END.match(lines[j])), len(lines))
        out.append((match.group(1), lines[index:end]))
    return out


def baseline(files: list[str], installed: Path, tests: list[str], keyword: str, scratch: Path) -> dict:
    """The unmutated run: the tests that fail anyway, and per module line the tests running it."""
    def work():
        import coverage

        cov = coverage.Coverage(include=files, data_file=None)

        class Contexts:
            def pytest_runtest_setup(self, item):
                cov.switch_context(item.nodeid)

        cov.start()
        failures = in_child_pytest(pytest_args(scratch, installed) + tests + (["-k", keyword] if keyword else []),
                                   installed, scratch / "baseline.log", [Contexts()])
        cov.stop()
        data = cov.get_data()
        covered = {}
        for path in data.measured_files():
            for line, contexts in (data.contexts_by_lineno(path) or {}).items():
                covered.setdefault(path, {})[str(line)] = sorted(c for c in contexts if c)
        return {"failed": sorted({f["nodeid"] for f in failures.failed}), "covered": covered}
    return run_forked(work, timeout=3600) or {"failed": [], "covered": {}}


def mutant_failures(filename: str, original: str, mutated: str, nodeids: list[str], installed: Path,
                    scratch: Path) -> dict | None:
    """{"swapped": functions given the mutant's code, "failed": [{nodeid, when, head, text,
    section}]}; None when the child crashed or hung."""
    def work():
        swapped = patch_module(filename, original, mutated)
        if not swapped:
            return {"swapped": 0, "failed": []}
        log = scratch / "mutant.log"
        failures = in_child_pytest(pytest_args(scratch, installed) + ["--maxfail=4"] + nodeids, installed, log, [])
        sections = sections_of(log)
        for failure in failures.failed:  # the printed sections come in report order
            at = next((i for i, (head, _) in enumerate(sections) if head == failure["head"]), None)
            failure["section"] = sections.pop(at)[1] if at is not None else []
        copies = [name for name, m in list(sys.modules.items()) if getattr(m, "__file__", None) == filename]
        return {"swapped": swapped, "failed": failures.failed, "copies": len(copies)}
    return run_forked(work)


# -- records --------------------------------------------------------------------------------
def general(line: str, installed: Path) -> str:
    """A line as ExecuTorch's CI prints it: the package's files relative to the repository's
    top, other installed files under a generic site-packages, no path of this machine."""
    site = "/opt/conda/lib/python3.11/site-packages"
    line = re.sub(r"^\.\./(?=\w)", site + "/", line)  # pytest's path relative to the package's top
    line = line.replace(str(installed) + "/", "").replace(str(installed.parent), site)
    line = line.replace(str(REPO), "/etriage")
    line = re.sub(r"/root/\.pyenv/versions/[\d.]+/lib/", "/opt/conda/lib/", line)  # the standard library
    return re.sub(r"/(?:root|tmp)/[^\s\"']*?/(?=[\w.]+\.py)", "/opt/conda/lib/", line)


_FRAME = re.compile(r"^\S.*:\d+: in \S+$")  # a frame's line in pytest's short traceback
_MACHINE_PATH = re.compile(r"/(?:work|root|tmp)/")
_NOT_THE_AREA = re.compile(r"^E\s+(?:[\w.]+\.)?(?:ImportError|ModuleNotFoundError)\b")


def excerpt_of(failure: dict, installed: Path) -> tuple[str, str] | None:
    """(excerpt, failure line) as a CI log shows a failed test: pytest's header of the test and
    its short traceback as printed (only its tail when longer than MAX_LINES), with this
    machine's paths made general; None when no exception line shows, when the failure is an
    import error (not the area's), or when a path of this machine is left."""
    if failure.get("when") != "call" or not failure.get("section"):
        return None
    lines = [general(line.rstrip(), installed) for line in failure["section"]]
    while lines and not lines[-1].strip():
        lines.pop()
    exceptions = [line for line in lines if _EXCEPTION_LINE.match(line)]
    if not exceptions or any(_NOT_THE_AREA.match(line) for line in exceptions):
        return None
    exception = exceptions[-1]
    if len(lines) > MAX_LINES:  # the tail, from a frame's first line
        lines = lines[-MAX_LINES:]
        while lines and not _FRAME.match(lines[0]):
            lines.pop(0)
    text = "\n".join(lines)
    if exception not in lines or _MACHINE_PATH.search(text) or len(lines) < 2:
        return None
    return text, exception


def pick_tests(ids: set[str], order: list[str]) -> list[str]:
    """At most MAX_TESTS of the tests running a mutant's lines, taken in turn from each test
    file (in the area's order of its test files: the most specific first)."""
    by_file: dict[str, list[str]] = {}
    for nodeid in sorted(ids):
        by_file.setdefault(nodeid.split("::", 1)[0], []).append(nodeid)
    files = sorted(by_file, key=lambda f: order.index(f) if f in order else len(order))
    picked: list[str] = []
    while len(picked) < MAX_TESTS and any(by_file.values()):
        for f in files:
            if by_file[f] and len(picked) < MAX_TESTS:
                picked.append(by_file[f].pop(0))
    return picked


def area_records(area: Area, per_module: int, seed: int, installed: Path, version: str,
                 only: str | None = None) -> list[dict]:
    files = {m.path: str(installed / m.path) for m in area.modules if (installed / m.path).exists()}
    for path in files:  # the parent holds every module the children will swap
        import_module("executorch." + path[:-3].replace("/", "."))
    out: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="etriage-mutants-") as scratch_dir:
        scratch = Path(scratch_dir)
        test_files = [path for path, _ in area.tests if (installed / path).exists()]
        keywords = dict(area.tests)
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "etriage" / (
            f"mutant-baseline-v3-{area.category}-{version}.json")
        if cache.exists():
            covered, failing = (lambda d: (d["covered"], set(d["failing"])))(json.loads(cache.read_text()))
        else:
            covered, failing = {}, set()
            for test in test_files:
                base = baseline(list(files.values()), installed, [test], keywords.get(test, ""), scratch)
                print(f"  baseline {test}: {len(base['failed'])} failing", flush=True)
                failing |= set(base["failed"])
                for path, lines in base["covered"].items():
                    for line, ids in lines.items():
                        covered.setdefault(path, {}).setdefault(line, []).extend(ids)
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps({"covered": covered, "failing": sorted(failing)}))
        print(f"{area.category}: baseline {len(failing)} failing; coverage of {len(covered)} module(s)", flush=True)
        rng = random.Random(seed)
        for module in area.modules:
            if module.path not in files or (only and only not in module.path):
                continue
            filename = files[module.path]
            source = Path(filename).read_text(encoding="utf-8")
            lines_run = covered.get(filename, {})
            chosen = [m for m in candidates(source, module.path)
                      if any(str(line) in lines_run for line in m.lines) and _in_scope(m, source, module.functions)]
            rng.shuffle(chosen)
            shapes: set[str] = set()
            made = tried = 0
            for mutant, mutated in compiling(chosen, source, per_module):
                tried += 1
                nodeids = pick_tests({i for line in mutant.lines for i in lines_run.get(str(line), [])}, test_files)
                result = mutant_failures(filename, source, mutated, nodeids, installed, scratch)
                if result is None:
                    print(f"  {mutant.key}: crashed or hung", flush=True)
                    continue
                kept = 0
                for failure in result["failed"]:
                    if failure["nodeid"] in failing or kept >= PER_MUTANT:
                        continue
                    excerpt = excerpt_of(failure, installed)
                    if excerpt is None or shape(excerpt[1]) in shapes:
                        continue
                    shapes.add(shape(excerpt[1]))
                    kept += 1
                    out.append(record(area, module, mutant, failure["nodeid"], excerpt, version))
                made += kept
                copies = "" if result.get("copies", 1) <= 1 else f" (WARNING: {result['copies']} copies of the module)"
                print(f"  {mutant.key}: {result['swapped']} swapped, {len(nodeids)} run, "
                      f"{len(result['failed'])} failed, {kept} kept{copies}", flush=True)
            print(f"{area.category} {module.path}: {made} record(s) of {tried} mutant(s)", flush=True)
    return out


def compiling(chosen: list[Mutant], source: str, limit: int):
    """(mutant, mutated module) of the first `limit` mutants in `chosen` whose module compiles."""
    taken = 0
    for mutant in chosen:
        if taken >= limit:
            return
        mutated = mutant.mutated(source)
        if mutated is not None:
            taken += 1
            yield mutant, mutated


def _in_scope(mutant: Mutant, source: str, functions: str) -> bool:
    """Whether the mutant's function belongs to the area (a generic module's part)."""
    if not functions:
        return True
    import ast

    tree = ast.parse(source)
    top = mutant.function.split(".")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in top:
            if node.lineno <= mutant.line <= (node.end_lineno or node.lineno):
                return bool(re.search(functions, ast.get_source_segment(source, node) or ""))
    return False


def record(area: Area, module: Module, mutant: Mutant, test: str, excerpt: tuple[str, str], version: str) -> dict:
    stem = Path(module.path).stem
    first, column = mutant.edits[0][:2]
    return {
        "id": f"gen-mutant-{stem}-{first}-{column}-{mutant.operator}-{test.rsplit('::', 1)[-1]}"[:120],
        "source": f"https://github.com/pytorch/executorch/blob/v{version}/{module.path}",
        "origin": "generated: ExecuTorch's own tests on a mutant of ExecuTorch",
        "excerpt": excerpt[0], "failure_line": excerpt[1], "category": area.category,
        "note": (f"scripts/mutant_records.py: bench/mutants.py {mutant.operator} mutant of executorch/{module.path} "
                 f"{mutant.description} (in {mutant.function}) on the installed executorch {version}; "
                 f"{test} failed so (it passes unmutated)"),
    }


class _NoQualcomm:
    """Refuses `executorch.backends.qualcomm` without QNN_SDK_ROOT: importing it would try to
    download the SDK, and no test of these areas needs it."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "executorch.backends.qualcomm" or name.startswith("executorch.backends.qualcomm."):
            raise ImportError(f"{name}: not imported without QNN_SDK_ROOT (scripts/mutant_records.py)")
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--area", action="append", choices=sorted(AREAS), help="default: every area")
    parser.add_argument("--module", help="only modules whose path contains this")
    parser.add_argument("--per-module", type=int, default=40, help="mutants tried per module")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    installed, version = load_executorch()
    records: list[dict] = []
    for name in args.area or sorted(AREAS):
        records += area_records(AREAS[name], args.per_module, args.seed, installed, version, args.module)
    write_records(records, args.out)
    return 0


def load_executorch() -> tuple[Path, str]:
    """Import torch and ExecuTorch once in this (parent) process, every child forks from here:
    (the installed package's folder, its version). Never the Qualcomm backend without an SDK."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not os.environ.get("QNN_SDK_ROOT"):
        sys.meta_path.insert(0, _NoQualcomm())
    import torch

    torch.set_num_threads(1)
    import executorch

    installed = Path(next(iter(executorch.__path__))).resolve()  # a namespace package: no __file__
    return installed, metadata.version("executorch")


def write_records(records: list[dict], out: Path) -> None:
    """The records, each id once, to `out` as JSON lines, checked by the corpus loader."""
    ids: set[str] = set()
    unique = [r for r in records if not (r["id"] in ids or ids.add(r["id"]))]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in unique), encoding="utf-8")
    from triage_rules.corpus import load_corpus

    load_corpus(out)  # the corpus loader's checks hold
    print(f"{len(unique)} record(s) in {out}")


if __name__ == "__main__":
    sys.exit(main())
