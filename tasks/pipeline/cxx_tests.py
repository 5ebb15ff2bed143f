"""Suite kind `cxx`: ExecuTorch's own C++ tests (googletest) under the directories a change touched.

The `cxx_tests` recipe (recipes.yaml) builds the test binaries from the change's tree with
`-DEXECUTORCH_BUILD_TESTS=ON`, incrementally, in the sandbox, with the shared compiler cache
(googletest from Debian's sources: tasks/pipeline/native.py provide_googletest). This module
picks, from the changed paths, which binaries run and which of their tests (the suite's
`tests:` lines, `<glob> <binary>`, first match wins): a changed kernel `op_<name>.cpp` (or its
test `op_<name>_test.cpp`) runs only the test suites of that operator (`OpAddOutKernelTest`,
`OpAddScalarOutKernelTest` for op_add, found with --gtest_list_tests), any other path the whole
binary of its directory. Each binary runs in the sandbox with `--gtest_output=xml:...`; the
JUnit XML becomes TestResults like pytest's, so the merge base comparison, retries and suspects
apply. A failed case's text starts with `<file>:<line>: Failure` (gtest's own console form,
repository-relative): the engine's primary line (triage_rules/rules/22-gtest.yaml).
"""
from __future__ import annotations

import re
import time
from fnmatch import fnmatchcase
from pathlib import Path

from tasks.pipeline.sandbox import LOG_READ, run_logged, scrubbed_env
from tasks.pipeline.suites import SuiteRun
from tasks.records import SuiteResult, TestResult
from triage_rules.junit import JUnitError, read_junit

RECIPE = "cxx_tests"
TEXT_LIMIT = 8000
_OP = re.compile(r"^op_(\w+?)(?:_test)?\.(?:cpp|cc|h)$")
_SRC_PREFIX = re.compile(r"(?<![\w.])(?:/[^\s:]*?/|(?:\.\./)+)src/executorch/")
_LOCATION = re.compile(r"^(\S+?\.(?:cpp|cc|cxx|h|hpp)):(\d+)$", re.M)


def table(run: SuiteRun) -> list[tuple[str, str]]:
    """The suite's `tests:` lines as (glob, binary)."""
    out = []
    for line in run.suite.tests:
        glob, _, binary = line.rpartition(" ")
        out.append((glob.strip(), binary.strip()))
    return out


def op_prefix(path: str) -> str:
    """kernels/portable/cpu/op_add.cpp -> "OpAdd" (gtest suites OpAdd<Upper>...); "" for others."""
    m = _OP.match(Path(path).name)
    return "Op" + "".join(p[:1].upper() + p[1:] for p in m.group(1).split("_") if p) if m else ""


def plan_binaries(paths: list[str], rows: list[tuple[str, str]]) -> dict[str, set[str] | None]:
    """binary -> the operator prefixes whose suites run, or None: the whole binary."""
    chosen: dict[str, set[str] | None] = {}
    for path in paths:
        binary = next((b for glob, b in rows if fnmatchcase(path, glob)), None)
        if binary is None:
            continue
        prefix = op_prefix(path)
        if not prefix or chosen.get(binary, set()) is None:
            chosen[binary] = None
        else:
            chosen.setdefault(binary, set()).add(prefix)
    return chosen


def suites_of(listing: str, prefixes: set[str]) -> list[str]:
    """Suites of a --gtest_list_tests output that belong to the operators (OpAdd: OpAddOut...,
    not OpAddmm...: the character after the prefix starts a new word)."""
    names = [line.split()[0].rstrip(".") for line in listing.splitlines() if line and not line[0].isspace()
             and line.rstrip().endswith(".")]
    return [n for n in names if any(n.startswith(p) and n[len(p):len(p) + 1].isupper() for p in prefixes)]


def gtest_text(text: str) -> str:
    """A <failure>'s text as gtest prints it: `<file>:<line>: Failure`, paths repository-relative."""
    text = _SRC_PREFIX.sub("", text)
    return _LOCATION.sub(r"\1:\2: Failure", text)[:TEXT_LIMIT]


def not_run(run: SuiteRun, target: str, reason: str) -> SuiteResult:
    return SuiteResult(suite=run.suite.name, target=target, commit=run.build.commit, status="not_run", reason=reason)


def run_suite(run: SuiteRun, target: str) -> SuiteResult:
    built = run.build.build_dirs.get(RECIPE, "")
    if not built:
        why = next((p.strip() for p in (run.build.reason or "").split(";") if p.strip().startswith(RECIPE)), "")
        return not_run(run, target, f"the C++ test binaries were not built ({why or 'no cxx_tests build'})")
    wanted = plan_binaries(list(run.paths), table(run))
    if run.node_ids:  # a retry: only these tests, `<binary>::<Suite>.<test>`
        wanted = {}
        for test in run.node_ids:
            binary, _, name = test.partition("::")
            wanted.setdefault(binary, set()).add(name)
    if not wanted:
        return not_run(run, target, "no C++ test covers the changed paths")
    start = time.monotonic()
    work = run.work_dir()
    env = scrubbed_env(work, sandbox=run.sandbox, python=run.python)  # the binaries need no Python
    result = SuiteResult(suite=run.suite.name, target=target, commit=run.build.commit, status="ran")
    for binary, select in sorted(wanted.items()):
        exe = Path(built) / binary
        if not exe.is_file():
            result.tests.append(_died(run, target, binary, f"etriage: gtest binary {binary} was not built"))
            continue
        argv = [str(exe)]
        if run.node_ids:
            argv.append("--gtest_filter=" + ":".join(sorted(select)))
        elif select:
            listed = run_logged([str(exe), "--gtest_list_tests"], cwd=work, env=env, log_path=work / f"{binary}.list",
                                timeout=120, sandbox=run.sandbox, python=run.python, readable=[exe.parent, work])
            suites = suites_of(listed.tail(LOG_READ), select)
            if not suites:  # no suite of that operator: the directory's whole binary
                suites = ["*"]
            argv.append("--gtest_filter=" + ":".join(f"{s}.*" for s in suites))
        junit = work / f"{binary}.xml"
        argv.append(f"--gtest_output=xml:{junit}")
        done = run_logged(argv, cwd=work, env=env, log_path=work / f"{binary}.log", timeout=run.timeout,
                          sandbox=run.sandbox, python=run.python, readable=[exe.parent, work], outputs=[junit])
        result.command = argv
        try:
            cases = read_junit(junit) if junit.stat().st_size else []
        except (OSError, JUnitError):
            cases = []
        for case in cases:
            result.tests.append(TestResult(suite=run.suite.name, test=f"{binary}::{case.classname}.{case.name}",
                                           target=target, outcome=case.outcome,
                                           message=gtest_text(case.message or "").splitlines()[0][:500]
                                           if case.message else "",
                                           text=gtest_text(case.text or case.message or "")
                                           if case.outcome in ("failed", "error") else "",
                                           seconds=float(case.time or 0.0)))
        if done.returncode not in (0, 1) or (done.returncode == 1 and not any(
                c.outcome in ("failed", "error") for c in cases)):
            why = "timed out" if done.returncode is None else f"exit code {done.returncode}"
            result.tests.append(_died(run, target, binary, f"etriage: gtest binary {binary} died ({why})",
                                      done.tail()))
    result.reason = (f"{len(wanted)} C++ test binar{'y' if len(wanted) == 1 else 'ies'} of the {RECIPE} recipe, "
                     f"rebuilt at {run.build.commit[:12]}: {', '.join(sorted(wanted))}")
    result.seconds = round(time.monotonic() - start, 2)
    return result


def _died(run: SuiteRun, target: str, binary: str, line: str, tail: str = "") -> TestResult:
    return TestResult(suite=run.suite.name, test=f"{binary}::(binary)", target=target, outcome="failed",
                      message=line, text=f"{line}\n{gtest_text(tail)}")
