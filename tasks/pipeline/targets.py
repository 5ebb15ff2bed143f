"""Where suites run. One interface, one class per kind of target (targets.yaml picks).

    Target.available() -> (bool, reason)
    Target.run(run: SuiteRun) -> SuiteResult

`host` runs on this machine against the ExecuTorch Python bindings (portable kernels +
XNNPACK). `qnn-htp-sim` lowers to QNN HTP and runs on QAIRT's x86 simulator: without a QNN SDK
(QNN_SDK_ROOT, or the one `make install` provisions) it reports itself unavailable and nothing
imports executorch.backends.qualcomm. Device targets: device_target.py.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tasks.pipeline import suites as suite_runner
from tasks.pipeline.device_target import DeviceTarget
from tasks.pipeline.native_target import HostNativeTarget
from tasks.pipeline.sandbox import scrubbed_env
from tasks.pipeline.suites import SuiteRun
from tasks.pipeline.tables import Suite, TargetSpec
from tasks.qnn.sdk import find_sdk
from tasks.records import SuiteResult, TestResult


def not_run(run: SuiteRun, reason: str) -> SuiteResult:
    return SuiteResult(suite=run.suite.name, target=run.target, commit=run.build.commit,
                       status="not_run", reason=reason)


class HostTarget:
    # the suites run in ExecuTorch's Python runtime: the side's compiled parts execute them
    python_runtime = True

    def __init__(self, spec: TargetSpec, tool_env: dict[str, str]):
        self.spec, self.name, self.tool_env = spec, spec.name, tool_env

    def available(self) -> tuple[bool, str]:
        return True, ""

    def env_for(self, run: SuiteRun, extra: dict[str, str] | None = None) -> dict[str, str]:
        return scrubbed_env(run.work_dir(), sandbox=run.sandbox, python=run.python,
                            pythonpath=[*run.pythonpath(), str(suite_runner.PLUGIN_DIR)],
                            pass_through=self.tool_env, extra=extra)

    def run(self, run: SuiteRun) -> SuiteResult:
        if run.suite.kind not in self.spec.suite_kinds:
            return not_run(run, f"target {self.name} does not run {run.suite.kind} suites")
        work = run.work_dir()
        junit = work / "junit.xml"
        if run.suite.kind in ("pytest", "selected"):
            if run.node_ids and not any(run.has_file(t.split("::", 1)[0]) for t in run.node_ids):
                # none of the tests' files exist in this tree: nothing to run, all absent
                return SuiteResult(suite=run.suite.name, target=run.target, commit=run.build.commit,
                                   status="ran", reason="none of the test files exist here")
            return self._run_pytest(run, junit)
        cmd = suite_runner.template_command(run, junit)
        return suite_runner.execute(run, cmd, self.env_for(run), junit)

    def _run_pytest(self, run: SuiteRun, junit: Path, attempts: int = 6) -> SuiteResult:
        """One pytest process; when a conftest.py fails to import (pytest then stops the whole
        session, whatever the flags), the files below it are reported as collection errors
        with pytest's own text and the rest run again, so one uncollectable directory never
        hides the others' results."""
        contained: list[TestResult] = []
        for _ in range(attempts):
            cmd = suite_runner.pytest_command(run, junit)
            result = suite_runner.execute(run, cmd, self.env_for(run, suite_runner.plugin_env(junit)), junit)
            log = junit.with_suffix(".log")
            text = log.read_text(errors="replace") if result.status == "crashed" and log.is_file() else ""
            broken = suite_runner.broken_conftest(text, run) if text else None
            if broken is None:
                break
            inside = [p for p in (run.node_ids or run.paths or run.suite.paths) if suite_runner.under(p, broken)]
            if not inside:
                break
            excerpt = text[text.find("ImportError while loading conftest"):][:suite_runner.TEXT_LIMIT]
            contained += [TestResult(suite=run.suite.name, test=path, target=run.target, outcome="error",
                                     message=excerpt.splitlines()[0][:500], text=excerpt)
                          for path in dict.fromkeys(p.split("::", 1)[0] for p in inside)]
            if run.node_ids:
                run = replace(run, node_ids=tuple(t for t in run.node_ids if not suite_runner.under(t, broken)))
                rest = run.node_ids
            else:
                run = replace(run, paths=tuple(p for p in (run.paths or run.suite.paths)
                                               if not suite_runner.under(p, broken)))
                rest = run.paths
            if not rest:
                result = SuiteResult(suite=run.suite.name, target=run.target, commit=run.build.commit,
                                     status="ran", command=cmd, seconds=result.seconds)
                break
        if contained:
            result.tests = contained + result.tests
            if result.status == "crashed" and result.tests:
                result.status = "ran"
            result.reason = (result.reason + "; " if result.reason else "") + \
                f"{len(contained)} file(s) could not be collected (a conftest.py failed to import); the others ran"
        return result

    def run_many(self, runs: list[SuiteRun]) -> list[tuple[list[SuiteResult], float, bool]]:
        """Run several suites; pytest suites that share a build, arguments and mode (whole
        files or chosen tests) run in ONE pytest process: torch + executorch start-up
        (5-8 s) is paid once. Returns (results, process seconds, whole files) per process."""
        groups: dict[tuple, list[SuiteRun]] = {}
        for run in runs:
            if run.suite.kind in ("pytest", "selected"):
                key = ("pytest", run.build.commit, run.suite.args, bool(run.node_ids), run.attempt, run.phase)
            else:
                key = ("single", id(run))
            groups.setdefault(key, []).append(run)
        done = []
        for key, members in groups.items():
            if len(members) == 1:
                result = self.run(members[0])
                done.append(([result], result.seconds, not members[0].node_ids))
            else:
                combined = self.run(_combine(members))
                done.append((_split(combined, members), combined.seconds, not members[0].node_ids))
        return done


def _combine(runs: list[SuiteRun]) -> SuiteRun:
    """One pytest run standing for several: files in suite order (fixed suites first, the
    `selected` suite's budget-limited files last)."""
    paths = tuple(p for r in runs for p in (r.paths or r.suite.paths))
    node_ids = tuple(t for r in runs for t in r.node_ids)
    budget = next((r for r in runs if r.budget_seconds is not None), None)
    suite = Suite(name="+".join(r.suite.name for r in runs), kind="pytest", backends=(),
                  paths=paths, args=runs[0].suite.args)
    return replace(runs[0], suite=suite, paths=paths, node_ids=node_ids,
                   budget_seconds=budget.budget_seconds if budget else None,
                   budget_paths=budget.budget_paths if budget else (),
                   order=tuple(t for r in runs for t in r.order), coverage=any(r.coverage for r in runs))


def _split(combined: SuiteResult, runs: list[SuiteRun]) -> list[SuiteResult]:
    """The combined run's results, back to their suites by test file."""
    owner = {}
    for run in runs:
        for path in run.paths or run.suite.paths:  # a path may be a node id (test-level selection)
            owner.setdefault(path.split("::", 1)[0], run.suite.name)
        for test in run.node_ids:
            owner.setdefault(test.split("::", 1)[0], run.suite.name)
    results = []
    for run in runs:
        part = SuiteResult(suite=run.suite.name, target=combined.target, commit=combined.commit,
                           status=combined.status, reason=combined.reason, command=combined.command,
                           log_excerpt=combined.log_excerpt, record_path=combined.record_path)
        part.tests = [replace(t, suite=run.suite.name) for t in combined.tests
                      if owner.get(t.test.split("::", 1)[0], runs[0].suite.name) == run.suite.name]
        part.seconds = round(sum(t.seconds for t in part.tests), 2)
        if combined.status == "ran":
            part.reason = f"ran in one pytest process with {', '.join(r.suite.name for r in runs if r is not run)}"
        results.append(part)
    return results


class QnnHtpSimTarget(HostTarget):
    """QNN's HTP backend on x86: the change's Python lowers to HTP (QnnPartitioner) and the
    .pte runs on QAIRT's x86 HTP simulator through the ExecuTorch runtime, in the sandbox with
    the QNN libraries read-only. The SDK is a real one named by QNN_SDK_ROOT, else the one
    `make install` provisioned (tasks/qnn/sdk.py); only this target's runs are given it.

    Suites with a `command` run it and read its JUnit XML: the QNN probes, and the `tests` of
    ExecuTorch's test_qnn_delegate.py in its x86 mode (tasks/qnn/delegate_tests.py, with the
    host stand-in for `qnn_executor_runner`), given to pytest as node ids."""

    def sdk(self):
        return find_sdk(self.tool_env)

    def available(self) -> tuple[bool, str]:
        sdk, reason = self.sdk()
        return (True, "") if sdk else (False, reason)

    def run(self, run: SuiteRun) -> SuiteResult:
        sdk, reason = self.sdk()
        if sdk is None:
            return not_run(run, reason)
        if run.suite.kind not in self.spec.suite_kinds:
            return not_run(run, f"target {self.name} does not run {run.suite.kind} suites")
        if not run.suite.command:
            return not_run(run, f"target {self.name} runs only suites with a command; {run.suite.name} has none")
        junit = run.work_dir() / "junit.xml"
        cmd = suite_runner.template_command(run, junit)
        if run.suite.tests:  # test_qnn_delegate.py's: the chosen ones, or the ones retried
            cmd += [delegate_test_id(t) for t in run.node_ids or run.suite.tests]
        return suite_runner.execute(run, cmd, self.env_for(run, sdk.env()), junit, readable=[sdk.root])


def delegate_test_id(test: str) -> str:
    """A test_qnn_delegate.py test as a pytest node id of the copy delegate_tests runs: from the
    suite's `Class.test_name` or a result's `test_qnn_delegate.Class::test_name`."""
    head, _, name = test.rpartition("::") if "::" in test else test.rpartition(".")
    return f"test_qnn_delegate.py::{head.rsplit('.', 1)[-1]}::{name}"


KINDS = {"host": HostTarget, "qnn-htp-sim": QnnHtpSimTarget, "host-native": HostNativeTarget,
         "ssh": DeviceTarget, "emulated": DeviceTarget, "android": DeviceTarget}  # device targets: tasks/pipeline/device_target.py


def make_target(spec: TargetSpec, tool_env: dict[str, str]):
    if spec.kind not in KINDS:
        raise ValueError(f"target {spec.name}: unknown kind {spec.kind!r} (known: {', '.join(KINDS)})")
    return KINDS[spec.kind](spec, tool_env)
