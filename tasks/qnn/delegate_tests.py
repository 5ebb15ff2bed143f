"""Run ExecuTorch's own `backends/qualcomm/tests/test_qnn_delegate.py` in its x86 mode.

`python -m tasks.qnn.delegate_tests <executorch package dir> -- <pytest args>`: copies the test
module and its conftest out of the package (the change's tree or overlay) into a temporary
directory (the sandbox's /tmp), with the `executorch.examples.models.*` imports guarded (they need torchvision,
torchsr, timm, torchaudio at import time; PyPI's torchvision is a CUDA build and must not enter
the venv), writes a launcher for the host stand-in runner (tasks/qnn/executor_runner.py) and
runs pytest there with the environment the tests' conftest reads. QNN_SDK_ROOT must be set.
Needs graphviz and pydot (imported by backends/qualcomm/debugger/utils.py).
"""
from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

EXAMPLE_IMPORT = re.compile(r"^from executorch\.examples\.models\.[\w.]+ import \w+\n", re.M)
OWN_ROOT = Path(__file__).resolve().parents[2]  # etriage's checkout: tasks.qnn.executor_runner


def guarded(source: str) -> str:
    """The test module with each example-model import wrapped: a missing one leaves its name None
    (only the model tests that use it fail, saying so), every other test is untouched."""
    def wrap(match: re.Match) -> str:
        line = match.group(0).rstrip("\n")
        name = line.rsplit(" ", 1)[1]
        return f"try:\n    {line}\nexcept ImportError:  # etriage: not installable here\n    {name} = None\n"
    return EXAMPLE_IMPORT.sub(wrap, source)


def prepare(package: Path, work: Path) -> Path:
    tests = package / "backends" / "qualcomm" / "tests"
    work.mkdir(parents=True, exist_ok=True)
    (work / "test_qnn_delegate.py").write_text(guarded((tests / "test_qnn_delegate.py").read_text()))
    conftest = (tests / "conftest.py").read_text()
    # the conftest imports setup_environment from the package's copy: point it at the guarded one
    (work / "conftest.py").write_text(conftest.replace(
        "from executorch.backends.qualcomm.tests.test_qnn_delegate import", "from test_qnn_delegate import"))
    runner = work / "qnn_executor_runner"
    runner.write_text(f"#!/bin/sh\nPYTHONPATH={OWN_ROOT}${{PYTHONPATH:+:$PYTHONPATH}} "
                      f"exec {sys.executable} -m tasks.qnn.executor_runner \"$@\"\n")
    runner.chmod(runner.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return runner


def environment(work: Path, runner: Path, executorch_root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"QNN_DELEGATE_TEST": "1", "QNN_SOC_MODEL": "SM8650", "QNN_BACKEND": "htp", "QNN_ENABLE_X86_64": "1",
                "QNN_EXECUTOR_RUNNER": str(runner), "EXECUTORCH_ROOT": str(executorch_root),
                "QNN_ARTIFACT_DIR": str(work / "artifacts"), "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def main(argv: list[str]) -> int:
    if "--" not in argv or len(argv[:argv.index("--")]) != 1:
        print("usage: python -m tasks.qnn.delegate_tests <executorch package dir> -- <pytest args>", file=sys.stderr)
        return 2
    package = Path(argv[0]).resolve()
    if not os.environ.get("QNN_SDK_ROOT"):
        print("QNN SDK unavailable (QNN_SDK_ROOT is not set for this run)", file=sys.stderr)
        return 2
    pytest_args = argv[argv.index("--") + 1:] or ["test_qnn_delegate.py"]
    with tempfile.TemporaryDirectory(prefix="qnn-delegate-tests-") as tmp:
        work = Path(tmp)
        runner = prepare(package, work)
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *pytest_args]
        return subprocess.run(cmd, cwd=work, env=environment(work, runner, package)).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
