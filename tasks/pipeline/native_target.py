"""Target `host-native`: the change's own native build runs the probes' programs.

The change's Python (the overlay) makes the programs and eager's outputs
(`python -m tasks.pipeline.programs export`, in the sandbox); the executor_runner rebuilt
from the change's tree (tasks/pipeline/native.py, the recipe with the most backends that
was rebuilt) runs every method of every program, step by step on one Method
(`--server_mode`), in the sandbox; programs.judge compares with eager. Each program is one
test, `<probe suite>::<program>`, so a kernel bug is a `new` failure at the change's .cpp.
"""
from __future__ import annotations

import time
from pathlib import Path

from tasks.pipeline import cxx_tests, programs
from tasks.pipeline.sandbox import LOG_READ, run_logged, scrubbed_env
from tasks.pipeline.suites import SuiteRun, run_each
from tasks.pipeline.tables import TargetSpec
from tasks.records import SuiteResult, TestResult

PIPELINE_DIR = Path(__file__).resolve().parent
# what the sandboxed export imports of etriage besides tasks.probes (bound by the sandbox)
EXPORT_CODE = (PIPELINE_DIR / "__init__.py", PIPELINE_DIR / "programs.py")
RUNNER = "executor_runner"
# a rebuilt recipe -> the backends its runner has; the first one built wins
RECIPE_BACKENDS = {"xnnpack": ("portable", "xnnpack"), "portable": ("portable",)}


def not_run(run: SuiteRun, target: str, reason: str) -> SuiteResult:
    return SuiteResult(suite=run.suite.name, target=target, commit=run.build.commit, status="not_run", reason=reason)


class HostNativeTarget:
    """The registry (tasks/pipeline/targets.py KINDS) builds it from targets.yaml's entry."""

    runner_prefix: tuple[str, ...] = ()  # how to start the runner here: directly
    # the change's programs run on the runner its cmake recipe rebuilt; Python only exports them
    python_runtime = False

    def __init__(self, spec: TargetSpec, tool_env: dict[str, str]):
        self.spec, self.name, self.tool_env = spec, spec.name, tool_env

    def available(self) -> tuple[bool, str]:
        return True, ""

    def run_many(self, runs: list[SuiteRun]) -> list[tuple[list[SuiteResult], float, bool]]:
        return run_each(self, runs)

    def run(self, run: SuiteRun) -> SuiteResult:
        if run.suite.kind not in self.spec.suite_kinds:
            return not_run(run, self.name, f"target {self.name} runs only the probes' programs and C++ tests")
        if run.suite.kind == "cxx":  # ExecuTorch's googletest binaries of the cxx_tests recipe
            return cxx_tests.run_suite(run, self.name)
        recipe = next((r for r in RECIPE_BACKENDS if (Path(run.build.build_dirs.get(r, "")) / RUNNER).is_file()),
                      None)
        if recipe is None:
            return not_run(run, self.name, "no executor_runner was rebuilt for this change (no native change, or its "
                                "recipe has no runner here)")
        start = time.monotonic()
        runner = Path(run.build.build_dirs[recipe]) / RUNNER
        work = run.work_dir()
        bundle, out_dir = work / "bundle", work / "out"
        for path in (bundle, out_dir):
            path.mkdir(exist_ok=True)
        result = SuiteResult(suite=run.suite.name, target=self.name, commit=run.build.commit, status="ran")
        backends = RECIPE_BACKENDS[recipe]
        result.command = [run.python, "-m", "tasks.pipeline.programs", "export", "--out", str(bundle),
                          "--backends", ",".join(backends)]
        env = scrubbed_env(work, sandbox=run.sandbox, python=run.python, pythonpath=run.pythonpath(),
                           pass_through=self.tool_env)
        done = run_logged(result.command, cwd=work, env=env, log_path=work / "export.log",
                          timeout=run.timeout, sandbox=run.sandbox, python=run.python,
                          readable=[*run.readable(), *EXPORT_CODE], writable=[bundle])
        if done.returncode != 0:
            result.status = "crashed"
            result.reason = f"the change's Python could not make the programs (exit code {done.returncode})"
            result.log_excerpt = done.tail()
            return result

        env = scrubbed_env(work, sandbox=run.sandbox, python=run.python)  # the runner needs no Python

        def execute(argv: list[str], log_path: Path):
            ran = run_logged(argv, cwd=work, env=env, log_path=log_path, timeout=min(run.timeout, 300),
                             sandbox=run.sandbox, python=run.python, readable=[runner.parent, bundle],
                             writable=[out_dir])
            return ran.returncode, ran.seconds, ran.tail(LOG_READ)

        runs = programs.run_bundle(bundle, [*self.runner_prefix, str(runner)], out_dir, execute)
        wanted = set(run.node_ids)
        for outcome in programs.judge(bundle, out_dir, runs, set(backends)):
            test = outcome.program.test_id
            if wanted and test not in wanted:
                continue
            result.tests.append(TestResult(suite=run.suite.name, test=test, target=self.name,
                                           outcome=outcome.outcome, message=outcome.message[:500],
                                           text=outcome.log if outcome.outcome == "failed" else "",
                                           seconds=outcome.seconds))
        result.reason = f"executor_runner of the {recipe} recipe, rebuilt at {run.build.commit[:12]}"
        result.seconds = round(time.monotonic() - start, 2)
        return result
