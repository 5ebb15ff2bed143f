"""Real training records from upstream bug fixes, reversed: each ExecuTorch commit that fixed a
bug in an area's code (before the installed release, so the release carries the fix) is undone
on the installed package, the tests that commit added or changed run on it, and every test that
fails only with the fix undone becomes a corpus record of what pytest printed.

    .venv/bin/python scripts/reversed_fix_records.py --repo PATH/TO/executorch.git
        [--since v0.6.0] [--until v1.4.1] [--out tests/engine/corpus/generated/reversed_fixes_of_executorch.jsonl]

`--repo` is a clone of pytorch/executorch (only this script reads it; nothing else needs it).
A commit counts as a fix by its subject (fix, bug, wrong, crash ...; not a revert, typo, lint or
build fix), and belongs to an area by the files it changed: `exir/backend/` and the lowered
module are multi-method lowering's, the write-back and mutable-buffer passes the mutable
buffer's, and the rest of the lowering path (program, emitter, memory planning, passes) is the
area its subject names, or none. Its label is where the fault was, as for the mutants
(scripts/mutant_records.py). Undoing it is `git apply -R --reject` of its diff on the installed
file: the hunks that still apply are undone, and the tests decide whether that brought the bug
back (a test counts only when it passes with the fix and fails without it). The undone functions are swapped into a running process as the mutants are
(`mutant_records.patch_module`), so a fix that changed only a module's top-level statements
cannot be undone this way and makes no record.

The record's source is the fix's pull request (or its commit). A fix whose pull request or
commit the evaluation split mentions anywhere (a record of its commit message, a cherry-pick of
it) makes no record: the split stays unseen.

    .venv/bin/python scripts/reversed_fix_records.py --repo PATH --later [--since v1.4.1] [--until main]

`--later`: the fixes made after the installed release, which the release still lacks. Their
tests, as the fix commit has them, are written over the installed test files for the run (and
put back after it); the release as installed is the broken side, and the fix applied to it (the
hunks that apply, swapped in the same way) the fixed side. A test counts when it fails as
installed and passes with the fix: the release's own bug, shown by the upstream test that
caught it. A test that needs more of the later tree than the fix fails on both sides and counts
for nothing. Written to generated/later_fixes_of_executorch.jsonl.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from mutant_records import (AREAS, excerpt_of, in_child_pytest, load_executorch, patch_module,  # noqa: E402
                            pytest_args, run_forked, sections_of, write_records)
from triage_rules.roots import shape  # noqa: E402

OUT = REPO / "tests" / "engine" / "corpus" / "generated" / "reversed_fixes_of_executorch.jsonl"
LATER_OUT = REPO / "tests" / "engine" / "corpus" / "generated" / "later_fixes_of_executorch.jsonl"
EVAL = REPO / "tests" / "engine" / "corpus" / "eval.jsonl"
PER_COMMIT = 3  # records of one fix at most, each a different message shape
CHILD_TIMEOUT = 600
_FIX = re.compile(r"(?i)\b(fix(e[sd])?|bug|wrong|incorrect|crash\w*|broken|regression|mismatch)\b")
# not a fault of lowering: reverts, housekeeping, and the devtools' records (etrecord)
_NOT_A_FIX = re.compile(r"(?i)\b(revert|typo|lint|pyre|buck|docs?|forward fix|spelling|import|etrecord)\b")
_TEST_PATH = re.compile(r"(^|/)tests?/|(^|/)test_\w+\.py$")
_PR = re.compile(r"\(#(\d+)\)\s*$")
_ADDED_TEST = re.compile(r"^\+\s*def (test_\w+)\(", re.M)
_HUNK_TEST = re.compile(r"^@@ [^@]* @@.*\bdef (test_\w+)\(", re.M)


@dataclass(frozen=True)
class Fix:
    sha: str
    subject: str
    category: str
    sources: tuple[str, ...]  # package-relative area modules it changed
    tests: tuple[str, ...]  # package-relative test files it changed that the wheel carries
    names: tuple[str, ...]  # test functions it added or changed (empty: the whole files)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


# Modules that are one area's by themselves; the rest of the lowering path (the program, the
# emitter, memory planning, the passes ...) is generic, and a fix there is the area's only when
# its subject says so.
_LOWERING_PATHS = ("exir/backend/", "exir/lowered_backend_module.py", "exir/passes/", "exir/program/", "exir/emit/",
                   "exir/memory_planning.py", "backends/xnnpack/partition/xnnpack_partitioner.py", "backends/transforms/")
_MULTI_METHOD_PATH = re.compile(r"^exir/backend/|^exir/lowered_backend_module\.py$|/xnnpack_partitioner\.py$")
_MUTABLE_PATH = re.compile(r"^exir/passes/(insert_write_back_for_buffers_pass|init_mutable_pass)\.py$")
_MUTABLE_WORDS = re.compile(r"(?i)mutab|buffers?\b|write.?back|kv.?cache")
_MULTI_METHOD_WORDS = re.compile(r"(?i)to_backend|partitioners?\b|delegat|lowered|multi.?method|backends?\b")


def area_of(path: str, subject: str) -> str | None:
    """The area a fix of `path` is: by the module where it is one area's, else by the fix's
    subject on the rest of the lowering path; else None."""
    if _MULTI_METHOD_PATH.search(path):
        return "multi_method_lowering"
    if _MUTABLE_PATH.search(path):
        return "mutable_buffer"
    if not path.endswith(".py") or not any(path.startswith(p) for p in _LOWERING_PATHS):
        return None
    if _MUTABLE_WORDS.search(subject):
        return "mutable_buffer"
    return "multi_method_lowering" if _MULTI_METHOD_WORDS.search(subject) else None


def fixes(repo: Path, since: str, until: str, installed: Path) -> list[Fix]:
    paths = sorted(set(_LOWERING_PATHS) | {m.path for area in AREAS.values() for m in area.modules})
    out = []
    for line in git(repo, "log", "--no-merges", "--format=%H%x09%s", f"{since}..{until}", "--", *paths).splitlines():
        sha, subject = line.split("\t", 1)
        if not _FIX.search(subject) or _NOT_A_FIX.search(subject):
            continue
        changed = git(repo, "diff", "--name-only", f"{sha}^", sha).split()
        tests = tuple(p for p in changed if _TEST_PATH.search(p) and p.endswith(".py") and (installed / p).exists())
        sources = tuple(p for p in changed if not _TEST_PATH.search(p) and area_of(p, subject)
                        and (installed / p).exists())
        areas = {area_of(p, subject) for p in sources}
        if len(areas) != 1 or not tests:
            continue  # no area, two areas (no single label), or no test of it in the wheel
        diff = git(repo, "diff", f"{sha}^", sha, "--", *tests)
        names = tuple(sorted(set(_ADDED_TEST.findall(diff)) | set(_HUNK_TEST.findall(diff))))
        out.append(Fix(sha, subject, areas.pop(), sources, tests, names))
    return out


def undone(repo: Path, fix: Fix, installed: Path, scratch: Path) -> dict[str, str]:
    """{package-relative path: the installed source with what still applies of the fix's diff
    reversed}, for each of its area modules where any hunk of it does."""
    return _patched(repo, fix, installed, scratch, reverse=True)


def applied(repo: Path, fix: Fix, installed: Path, scratch: Path) -> dict[str, str]:
    """{package-relative path: the installed source with what applies of a later fix's diff
    applied}, for each of its area modules where any hunk of it does."""
    return _patched(repo, fix, installed, scratch, reverse=False)


def _patched(repo: Path, fix: Fix, installed: Path, scratch: Path, *, reverse: bool) -> dict[str, str]:
    out = {}
    for path in fix.sources:
        work = scratch / ("undo" if reverse else "apply")
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        original = (installed / path).read_text(encoding="utf-8")
        (work / path).write_text(original, encoding="utf-8")
        patch = scratch / "fix.patch"
        patch.write_text(git(repo, "diff", f"{fix.sha}^", fix.sha, "--", path), encoding="utf-8")
        # the hunks that still apply (--reject leaves the rest): the run decides whether that
        # brought the bug back, or fixed it (a test that passes with the fix, fails without)
        subprocess.run(["git", "apply", *(["-R"] if reverse else []), "--recount", "--reject", "-C1", str(patch)],
                       cwd=work, capture_output=True, text=True)
        if not (work / path).exists():
            continue  # the fix created or deleted the module: nothing to swap
        if (work / path).read_text(encoding="utf-8") != original:
            out[path] = (work / path).read_text(encoding="utf-8")
    return out


@contextlib.contextmanager
def tests_of(repo: Path, fix: Fix, installed: Path):
    """The fix's test files as its commit has them, written over the installed ones for the
    duration (a later fix's tests are not in the release), put back afterwards whatever happens."""
    saved = {path: (installed / path).read_bytes() for path in fix.tests}
    try:
        for path in fix.tests:
            shown = subprocess.run(["git", "-C", str(repo), "show", f"{fix.sha}:{path}"], capture_output=True)
            if shown.returncode == 0:  # a test file the fix deleted stays as installed
                (installed / path).write_bytes(shown.stdout)
        yield
    finally:
        for path, data in saved.items():
            (installed / path).write_bytes(data)


def define_missing(module, filename: str, source: str) -> int:
    """Define in `module` the top-level functions and classes of `source` it lacks (a later fix's
    new helpers, which the swapped functions call by name); how many."""
    added = 0
    for statement in ast.parse(source, filename).body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and statement.name not in vars(module):
            exec(compile(ast.Module([statement], type_ignores=[]), filename, "exec"), vars(module))  # noqa: S102
            added += 1
    return added


def failures(fix: Fix, files: dict[str, str], installed: Path, scratch: Path, define_new: bool = False) -> dict | None:
    """Run the fix's tests with `files` swapped in (none: the release as installed); with
    `define_new`, the top-level functions and classes the installed modules lack defined first."""
    def work():
        for p, text in files.items() if define_new else ():
            define_missing(sys.modules["executorch." + p[:-3].replace("/", ".")], str(installed / p), text)
        swapped = sum(patch_module(str(installed / p), (installed / p).read_text(encoding="utf-8"), text)
                      for p, text in files.items())
        if files and not swapped:
            return {"swapped": 0, "failed": []}
        log = scratch / "run.log"
        args = pytest_args(scratch, installed) + list(fix.tests)
        if fix.names:
            args += ["-k", " or ".join(fix.names)]
        found = in_child_pytest(args, installed, log, [])
        sections = sections_of(log)
        for failure in found.failed:
            at = next((i for i, (head, _) in enumerate(sections) if head == failure["head"]), None)
            failure["section"] = sections.pop(at)[1] if at is not None else []
        return {"swapped": swapped, "failed": found.failed}
    return run_forked(work, timeout=CHILD_TIMEOUT)


def source_of(fix: Fix) -> str:
    pr = _PR.search(fix.subject)
    return (f"https://github.com/pytorch/executorch/pull/{pr.group(1)}" if pr
            else f"https://github.com/pytorch/executorch/commit/{fix.sha}")


def in_evaluation_split(fix: Fix, split: str) -> bool:
    pr = _PR.search(fix.subject)
    return fix.sha[:10] in split or bool(pr and re.search(rf"(#|/pull/){pr.group(1)}\b", split))


def records_of(repo: Path, fix: Fix, installed: Path, version: str, later: bool = False) -> tuple[list[dict], str]:
    if in_evaluation_split(fix, EVAL.read_text(encoding="utf-8")):
        return [], "the evaluation split holds its thread"
    with tempfile.TemporaryDirectory(prefix="etriage-reversed-") as scratch_dir:
        scratch = Path(scratch_dir)
        files = (applied if later else undone)(repo, fix, installed, scratch)
        if not files:
            return [], "none of its hunks applies" + ("" if later else " any more")
        for path in files:  # the parent holds every module the child will swap
            import_module("executorch." + path[:-3].replace("/", "."))
        with tests_of(repo, fix, installed) if later else contextlib.nullcontext():
            as_installed = failures(fix, {}, installed, scratch)
            swapped = failures(fix, files, installed, scratch, define_new=later)
    if as_installed is None or swapped is None:
        return [], "a run crashed or hung"
    if not swapped["swapped"]:
        return [], "no function changed (top-level statements only)"
    # the broken side's failures that the fixed side does not have
    broken, fixed = (as_installed, swapped) if later else (swapped, as_installed)
    failing = {f["nodeid"] for f in fixed["failed"]}
    out, shapes = [], set()
    for failure in broken["failed"]:
        if failure["nodeid"] in failing or len(out) >= PER_COMMIT:
            continue
        excerpt = excerpt_of(failure, installed)
        if excerpt is None or shape(excerpt[1]) in shapes:
            continue
        shapes.add(shape(excerpt[1]))
        test = failure["nodeid"].rsplit("::", 1)[-1]
        if later:
            origin = "generated: ExecuTorch's own tests of a later upstream fix, on the release before it"
            how = (f"commit {fix.sha[:12]} \"{fix.subject}\", later than the installed executorch {version}: "
                   f"its tests run on that release, {failure['nodeid']} failed so (it passes with the fix applied "
                   f"to executorch/{', executorch/'.join(files)}; --later)")
        else:
            origin = "generated: ExecuTorch's own tests with an upstream fix undone"
            how = (f"commit {fix.sha[:12]} \"{fix.subject}\" reversed on "
                   f"executorch/{', executorch/'.join(files)} of the installed executorch {version}; "
                   f"{failure['nodeid']} failed so (it passes with the fix)")
        out.append({
            "id": f"gen-{'later' if later else 'reversed'}-{fix.sha[:10]}-{test}"[:120],
            "source": source_of(fix), "origin": origin,
            "excerpt": excerpt[0], "failure_line": excerpt[1], "category": fix.category,
            "note": f"scripts/reversed_fix_records.py: {how}",
        })
    return out, (f"{len(broken['failed'])} failed on the broken side, {len(fixed['failed'])} on the fixed side")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="a clone of pytorch/executorch")
    parser.add_argument("--later", action="store_true",
                        help="the fixes after the installed release: their tests on the release as installed")
    parser.add_argument("--since", default=None, help="default: v0.6.0 (with --later: the installed release's tag)")
    parser.add_argument("--until", default=None, help="default: the installed release's tag (with --later: main)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    installed, version = load_executorch()
    release = f"v{version.split('+')[0]}"
    since = args.since or (release if args.later else "v0.6.0")
    until = args.until or ("main" if args.later else release)
    records: list[dict] = []
    found = fixes(args.repo, since, until, installed)
    print(f"{len(found)} fix(es) in {since}..{until} with an area and a test in the wheel", flush=True)
    for fix in found:
        made, why = records_of(args.repo, fix, installed, version, later=args.later)
        print(f"  {fix.sha[:10]} {fix.category:22} {len(made)} record(s): {why} | {fix.subject[:70]}", flush=True)
        records += made
    write_records(records, args.out or (LATER_OUT if args.later else OUT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
