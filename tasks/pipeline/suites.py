"""Stage 3, suites: a suite definition (suites.yaml) + a build -> a command, run, JUnit read.

Results come from the JUnit XML; a run that leaves none is reported as a crash, with
its log kept for the engine. Tests run from the change's own tree (the overlay's package
directory) so the change's test files are the ones collected.
"""
from __future__ import annotations

import json
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tasks.pipeline.sandbox import Sandbox, run_logged
from tasks.pipeline.tables import Suite
from tasks.records import BuildResult, SuiteResult, TestResult
from defusedxml import ElementTree as SafeET

from triage_rules.junit import MAX_BYTES, JUnitError, read_junit

TEXT_LIMIT = 12000
PLUGIN_DIR = Path(__file__).resolve().parent / "pytest_plugin"  # etriage_pytest.py
PLUGIN_CONFIG = "etriage-pytest.json"
RECORD = "etriage-record.json"  # the plugin's CPU seconds and lines per test
PYTEST_INI = "[pytest]\naddopts =\ntimeout = 600\njunit_logging = all\njunit_family = xunit1\n"


@dataclass
class SuiteRun:
    """One suite at one commit on one target: everything the command needs."""

    suite: Suite
    build: BuildResult
    target: str
    run_dir: Path
    python: str = sys.executable
    paths: tuple[str, ...] = ()  # overrides suite.paths (the `selected` suite)
    node_ids: tuple[str, ...] = ()  # only these tests (retries)
    leave_out: tuple[str, ...] = ()  # pytest: not these (learnt: they cannot run here)
    timeout: float = 1800
    values: dict[str, str] = field(default_factory=dict)  # extra command placeholders
    attempt: int = 0
    phase: str = "head"  # head | base | retry: keeps work directories apart
    budget_seconds: float | None = None  # pytest: the wall-clock safety net over `budget_paths`
    budget_paths: tuple[str, ...] = ()
    order: tuple[str, ...] = ()  # pytest: run in this order (the selection's rank: node ids, files)
    coverage: bool = False  # pytest: record each test's lines (coverage_map.py); CPU time always
    sandbox: Sandbox = field(default_factory=Sandbox)  # how the change's code runs

    @property
    def package_dir(self) -> Path:
        return Path(self.build.package_dir or "")

    def has_file(self, path: str) -> bool:
        return (self.package_dir / path).is_file()

    def readable(self) -> list[Path]:
        """What the run reads besides the interpreter: the overlay, native builds, its work dir."""
        paths = [Path(self.build.overlay_dir)] if self.build.overlay_dir else []
        return paths + [Path(p) for p in [*self.build.readable, *self.build.build_dirs.values()]] + [self.work_dir()]

    def pythonpath(self) -> list[str]:
        """The commit's environment: its laid tree, then what it adds (a pinned torch)."""
        return [self.build.overlay_dir or "", *self.build.pythonpath]

    def work_dir(self) -> Path:
        path = (self.run_dir / "suites"
                / f"{self.phase}-{self.suite.name}-{self.target}-{self.build.commit[:12]}-{self.attempt}")
        path.mkdir(parents=True, exist_ok=True)
        return path


def pytest_command(run: SuiteRun, junit: Path) -> list[str]:
    ini = junit.parent / "pytest.ini"  # beside the junit: the run reads only its own work dir
    ini.write_text(PYTEST_INI)
    config: dict = {}
    if run.node_ids:  # the plugin keeps only these: an id absent from this tree is no error
        targets = sorted({t.split("::", 1)[0] for t in run.node_ids if run.has_file(t.split("::", 1)[0])})
        config["only"] = sorted(run.node_ids)
    else:
        targets = list(run.paths or run.suite.paths)
    if run.budget_seconds is not None and run.budget_paths:
        config["budget"] = {"seconds": run.budget_seconds, "paths": list(run.budget_paths)}
    if run.order:
        config["order"] = list(run.order)
    if run.leave_out:
        config["leave_out"] = sorted(run.leave_out)
    (junit.parent / RECORD).unlink(missing_ok=True)  # not an earlier attempt's
    config["record"] = str(junit.parent / RECORD)
    config["coverage"] = run.coverage
    (junit.parent / PLUGIN_CONFIG).write_text(json.dumps(config))
    return [run.python, "-m", "pytest", "-p", "no:cacheprovider", "-p", "etriage_pytest", "-c", str(ini),
            "--rootdir", str(run.package_dir), "-q", "--junit-xml", str(junit),
            # one broken test file must not hide the results of the others
            "--continue-on-collection-errors",
            *run.suite.args, *targets]


def plugin_env(junit: Path) -> dict[str, str]:
    """Environment entries pytest_command's plugin needs (PYTHONPATH is added by the caller)."""
    return {"ETRIAGE_PYTEST_CONFIG": str(junit.parent / PLUGIN_CONFIG)}


def template_command(run: SuiteRun, junit: Path, **more: str) -> list[str]:
    values = {"python": run.python, "junit": str(junit), "executorch_root": str(run.package_dir),
              **run.values, **more}
    cmd = [arg.format(**values) for arg in run.suite.command]
    for test in run.node_ids if run.suite.select_args else ():
        cmd += [arg.format(**values, name=test.rsplit("::", 1)[-1]) for arg in run.suite.select_args]
    return cmd


def reproduce_command(suite: Suite, test: str) -> str:
    """What a developer types in a checkout to run this one test."""
    if suite.kind in ("pytest", "selected"):
        return f"python -m pytest {shlex.quote(test)}"
    if suite.kind == "probes" or "tasks.probes" in suite.command:  # the QNN probes are a qnn suite
        probe_suite, _, probe = test.partition("::")
        return f"python -m tasks.probes --suite {probe_suite}" + (f" --probe {probe}" if probe else "")
    return " ".join(suite.command).replace("{python}", "python").replace("{test}", test)


def node_id(classname: str, name: str, package_dir: Path) -> str:
    """JUnit classname + name -> pytest node id relative to the package root."""
    parts = classname.split(".") if classname else []
    if not parts and (package_dir / (name.replace(".", "/") + ".py")).is_file():
        return name.replace(".", "/") + ".py"  # a collection error: pytest names the module
    for i in range(len(parts), 0, -1):
        candidate = "/".join(parts[:i]) + ".py"
        if (package_dir / candidate).exists():
            return "::".join(filter(None, [candidate, *parts[i:], name]))
    return "::".join([*filter(None, [classname]), name])


def captured_output(junit: Path) -> dict[tuple[str, str], str]:
    """(classname, name) -> the case's captured stdout/stderr (junit_logging=all).

    The runtime's own log lines live there (e.g. "Backend X is not registered"), and the
    engine needs them to tell an environment failure from a regression.
    """
    captured = {}
    if junit.stat().st_size > MAX_BYTES:
        raise JUnitError(f"JUnit XML over the {MAX_BYTES >> 20} MiB that are read")
    try:
        root = SafeET.parse(junit, forbid_dtd=True).getroot()
    except SafeET.ParseError as exc:
        raise JUnitError(f"malformed JUnit XML: {exc}") from None
    except ValueError as exc:  # defusedxml's DTDForbidden, EntitiesForbidden, ...
        raise JUnitError(f"refused JUnit XML: {exc}") from None
    for case in root.iter("testcase"):
        parts = [el.text or "" for el in case if el.tag in ("system-out", "system-err")]
        if any(p.strip() for p in parts):
            captured[(case.get("classname", ""), case.get("name", ""))] = "\n".join(parts)
    return captured


def read_results(junit: Path, run: SuiteRun) -> list[TestResult]:
    """The run's test results from its JUnit file; JUnitError when the file cannot be read (too
    big, malformed, an entity declaration): the caller reports the suite crashed, saying why."""
    results = []
    cases = read_junit(junit)  # first: it names a malformed file's line and column
    captured = captured_output(junit)
    for case in cases:
        if run.suite.kind == "probes" or "tasks.probes" in run.suite.command:  # classname "probes.<probe suite>"
            test = f"{case.classname.removeprefix('probes.')}::{case.name}"
        else:
            test = node_id(case.classname, case.name, run.package_dir)
        results.append(TestResult(suite=run.suite.name, test=test, target=run.target,
                                  outcome=case.outcome, message=(case.message or "")[:500],
                                  text=_trim(case.text or "", captured.get((case.classname, case.name), ""))
                                  if case.outcome in ("failed", "error") else "",
                                  seconds=float(case.time or 0.0)))
    return results


def _trim(failure_text: str, captured: str) -> str:
    """Failure text first (the engine's best evidence), then the tail of the captured output."""
    room = max(TEXT_LIMIT - len(failure_text), 2000)
    return (failure_text[-TEXT_LIMIT:] + ("\n" + captured[-room:] if captured else ""))


def run_each(target, runs: list[SuiteRun]) -> list[tuple[list[SuiteResult], float, bool]]:
    """`run_many` of a target that starts a process per suite run (nothing shared between runs):
    each run on its own; (results, seconds, whole files) per run, as run_many answers."""
    done = []
    for run in runs:
        result = target.run(run)
        done.append(([result], result.seconds, not run.node_ids))
    return done


_BROKEN_CONFTEST = re.compile(r"ImportError while loading conftest '([^']+)'")
RECORD_MAX_BYTES = 64 * 1024 * 1024  # the plugin's record is the run's output: bounded like its JUnit


def broken_conftest(log_text: str, run: SuiteRun) -> str | None:
    """The package-relative directory of a conftest.py that failed to import, from pytest's
    log: pytest stops the whole session for it (--continue-on-collection-errors does not help),
    so the files below it are set apart and the others run again. None when there is none."""
    match = _BROKEN_CONFTEST.search(log_text)
    if not match:
        return None
    where = Path(match.group(1)).parent
    for root in (run.package_dir, run.package_dir.resolve()):
        try:
            relative = str(where.relative_to(root))
        except ValueError:
            continue
        return "" if relative == "." else relative
    return None


def under(path: str, directory: str) -> bool:
    file = path.split("::", 1)[0]
    return not directory or file.startswith(directory.rstrip("/") + "/")


def execute(run: SuiteRun, cmd: list[str], env: dict[str, str], junit: Path, readable=()) -> SuiteResult:
    """Run one command that writes `junit`; the result comes from that file. `readable`: more
    read-only paths than the run's own (a target's libraries)."""
    start = time.monotonic()
    log_path = junit.with_suffix(".log")
    record = junit.parent / RECORD
    done = run_logged(cmd, cwd=run.package_dir, env=env, log_path=log_path, timeout=run.timeout,
                      sandbox=run.sandbox, python=run.python, readable=[*run.readable(), *readable],
                      outputs=[junit, record] if run.suite.kind in ("pytest", "selected") else [junit])
    result = SuiteResult(suite=run.suite.name, target=run.target, commit=run.build.commit,
                         status="ran", command=cmd, seconds=round(time.monotonic() - start, 2))
    unreadable = ""
    try:
        tests = read_results(junit, run) if junit.is_file() and junit.stat().st_size else []
    except JUnitError as error:  # the run wrote it: its problem is this suite's, never the triage's
        tests, unreadable = [], str(error)
    if record.is_file() and 0 < record.stat().st_size <= RECORD_MAX_BYTES and not record.is_symlink():
        result.record_path = str(record)
        try:
            cpu = json.loads(record.read_text(errors="replace")).get("cpu", {})
        except (ValueError, AttributeError):
            cpu = {}
        for test in tests:
            if isinstance(cpu.get(test.test), (int, float)):
                test.cpu_seconds = float(cpu[test.test])
    if unreadable:
        result.status, result.reason = "crashed", f"unreadable JUnit results ({unreadable})"
        result.log_excerpt = done.tail()
    elif not tests:
        result.status = "crashed"
        why = "timed out" if done.returncode is None else f"exit code {done.returncode}"
        if done.limit:
            why = f"killed: the sandbox's {done.limit}" if done.returncode is None \
                else f"exit code {done.returncode}, at the sandbox's {done.limit}"
        result.reason = f"no JUnit results ({why})"
        result.log_excerpt = done.tail()
    else:
        result.tests = tests
    return result
