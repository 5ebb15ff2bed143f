"""Where suites run. One interface, one class per kind of target (targets.yaml picks).

    Target.available() -> (bool, reason)
    Target.run(run: SuiteRun) -> SuiteResult

`host` runs on this machine against the ExecuTorch Python bindings (portable kernels +
XNNPACK). `qnn-sim` needs the proprietary QNN SDK: without QNN_SDK_ROOT it reports itself
unavailable and never imports executorch.backends.qualcomm. Android/ssh targets slot in
beside these later.
"""
from __future__ import annotations

import re
from pathlib import Path

from tasks.pipeline import suites as suite_runner
from tasks.pipeline.sandbox import run_logged, scrubbed_env
from tasks.pipeline.suites import SuiteRun
from tasks.pipeline.tables import TargetSpec
from tasks.records import SuiteResult, TestResult


def not_run(run: SuiteRun, reason: str) -> SuiteResult:
    return SuiteResult(suite=run.suite.name, target=run.target, commit=run.build.commit,
                       status="not_run", reason=reason)


class HostTarget:
    def __init__(self, spec: TargetSpec, tool_env: dict[str, str]):
        self.spec, self.name, self.tool_env = spec, spec.name, tool_env

    def available(self) -> tuple[bool, str]:
        return True, ""

    def env_for(self, run: SuiteRun) -> dict[str, str]:
        return scrubbed_env(run.work_dir(), pythonpath=[run.build.overlay_dir or ""],
                            pass_through=self.tool_env)

    def run(self, run: SuiteRun) -> SuiteResult:
        if run.suite.kind not in self.spec.suite_kinds:
            return not_run(run, f"target {self.name} does not run {run.suite.kind} suites")
        work = run.work_dir()
        junit = work / "junit.xml"
        if run.suite.kind in ("pytest", "selected"):
            cmd = suite_runner.pytest_command(run, junit)
        else:
            cmd = suite_runner.template_command(run, junit)
        return suite_runner.execute(run, cmd, self.env_for(run), junit)


class QnnSimTarget(HostTarget):
    """QNN HTP simulator on x86. test_qnn_delegate.py is a unittest script with its own
    argument parser, so each test runs as its own command; its unittest summary is read.
    Untested here: no QNN SDK on these machines."""

    def available(self) -> tuple[bool, str]:
        sdk = self.tool_env.get(self.spec.requires_env or "QNN_SDK_ROOT", "")
        if not sdk:
            return False, "QNN SDK unavailable (QNN_SDK_ROOT is not set on this worker)"
        if not Path(sdk).is_dir():
            return False, f"QNN SDK unavailable (QNN_SDK_ROOT={sdk} does not exist)"
        return True, ""

    def run(self, run: SuiteRun) -> SuiteResult:
        ok, reason = self.available()
        if not ok:
            return not_run(run, reason)
        if run.suite.kind not in self.spec.suite_kinds:
            return not_run(run, f"target {self.name} does not run {run.suite.kind} suites")
        result = SuiteResult(suite=run.suite.name, target=self.name, commit=run.build.commit, status="ran")
        env = self.env_for(run)
        for test in run.node_ids or run.suite.tests:
            work = run.work_dir()
            cmd = suite_runner.template_command(
                run, work / "junit.xml", test=test, device="", host="",
                build_folder=run.values.get("build_folder", str(run.package_dir / "build-x86")),
                artifact_dir=str(work / "artifacts"))
            done = run_logged(cmd, cwd=run.package_dir, env=env, log_path=work / f"{test}.log",
                              timeout=run.timeout)
            log = done.log_path.read_text(errors="replace")
            outcome = "passed" if re.search(r"^OK\b", log, re.M) else "error" if done.returncode is None else "failed"
            result.tests.append(TestResult(suite=run.suite.name, test=test, target=self.name,
                                           outcome=outcome, text=log[-suite_runner.TEXT_LIMIT:],
                                           seconds=round(done.seconds, 2)))
            result.command = cmd
        return result


KINDS = {"host": HostTarget, "qnn-sim": QnnSimTarget}


def make_target(spec: TargetSpec, tool_env: dict[str, str]):
    if spec.kind not in KINDS:
        raise ValueError(f"target {spec.name}: unknown kind {spec.kind!r} (known: {', '.join(KINDS)})")
    return KINDS[spec.kind](spec, tool_env)
