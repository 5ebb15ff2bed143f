"""The host stand-in for qnn_executor_runner and the harness that runs test_qnn_delegate.py
with it: a real HTP program run through the runner's command line, its bad inputs, and (slow)
one of ExecuTorch's own QNN tests passing in x86 mode."""
from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import torch

from tasks.pipeline.overlay import installed_package_dir
from tasks.pipeline.targets import delegate_test_id
from tasks.qnn import sdk
from tasks.qnn.delegate_tests import guarded

ROOT = Path(__file__).resolve().parents[2]
SDK = sdk.find_sdk({}, sdk.default_root(sys.prefix))[0]
needs_sdk = pytest.mark.skipif(SDK is None, reason="QNN not provisioned (make install)")

LOWER = """
import sys, torch
from tasks.qnn import htp
from tasks.qnn.check import AddRelu
from tasks.probes.runtime import to_pte
_, pte = to_pte(htp.lower(AddRelu().eval(), (torch.zeros(1, 8, 16), torch.zeros(1, 8, 16))))
open(sys.argv[1], "wb").write(pte)
"""


def qnn_env() -> dict[str, str]:
    return {**os.environ, **SDK.env(), "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def pte(tmp_path_factory) -> Path:
    """relu(x + y) * 2 lowered to HTP in a fresh interpreter given the SDK (this one has none)."""
    path = tmp_path_factory.mktemp("pte") / "add_relu.pte"
    subprocess.run([sys.executable, "-c", LOWER, str(path)], env=qnn_env(), check=True, capture_output=True)
    return path


def runner(pte: Path, cwd: Path, lines: list[str], *extra: str) -> subprocess.CompletedProcess:
    (cwd / "input_list.txt").write_text("".join(f"{line}\n" for line in lines))
    return subprocess.run([sys.executable, "-m", "tasks.qnn.executor_runner", "--model_path", str(pte),
                           "--input_list_path", "input_list.txt", "--output_folder_path", "out", *extra],
                          cwd=cwd, env=qnn_env(), capture_output=True, text=True, timeout=300)


# Each run of the runner loads the ExecuTorch runtime and the HTP program: 10-40 s on a loaded
# 2-core machine, so the runs are behind --run-slow; what needs no run stays on.
@pytest.mark.slow
@needs_sdk
def test_the_runner_runs_each_input_line_on_htp_and_writes_the_c_runners_output_files(pte, tmp_path):
    inputs = [[torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(s)) for s in seeds]
              for seeds in ((0, 1), (2, 3))]
    lines = []
    for i, tensors in enumerate(inputs):
        for j, t in enumerate(tensors):
            t.numpy().tofile(tmp_path / f"input_{i}_{j}.raw")
        lines.append(f"input_{i}_0.raw input_{i}_1.raw")
    proc = runner(pte, tmp_path, lines, "--method_index", "0", "--warm_up", "1")  # unknown flags ignored
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["output_0_0.raw", "output_1_0.raw"]
    for i, (x, y) in enumerate(inputs):
        got = torch.from_numpy(np.fromfile(tmp_path / "out" / f"output_{i}_0.raw", dtype=np.float32))
        assert float((got.reshape(1, 8, 16) - (x + y).relu() * 2).abs().max()) < 1e-2
    assert "forward inference 1: 1 outputs" in proc.stdout


@pytest.mark.slow
@needs_sdk
@pytest.mark.parametrize("extra,lines,message", [
    (["--method_index", "3"], ["a.raw b.raw"], "--method_index 3 out of range (1 methods)"),
    ([], ["only_one.raw"], "1 input files for 2 inputs"),
], ids=["method-index", "input-count"])
def test_what_the_runner_cannot_do_is_a_failed_run_saying_why(pte, tmp_path, extra, lines, message):
    for name in ("a.raw", "b.raw", "only_one.raw"):
        torch.zeros(1, 8, 16).numpy().tofile(tmp_path / name)
    proc = runner(pte, tmp_path, lines, *extra)
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr


@pytest.mark.parametrize("flag", ["--dump_intermediate_outputs", "--performance_output_path=x", "--shared_buffer"])
def test_a_runner_feature_not_emulated_fails_before_loading_anything(tmp_path, flag):
    proc = subprocess.run([sys.executable, "-m", "tasks.qnn.executor_runner", "--model_path", "absent.pte",
                           "--output_folder_path", "out", flag], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.returncode == 2 and f"{flag.split('=')[0]} not emulated" in proc.stdout
    assert not (tmp_path / "out").exists()


def test_example_model_imports_are_guarded_and_nothing_else_changes():
    source = ("import torch\nfrom executorch.examples.models.edsr import EdsrModel\n"
              "from os import path\n"
              "from executorch.examples.models.torchvision_vit.model import TorchVisionViTModel\n")
    out = guarded(source)
    assert "try:\n    from executorch.examples.models.edsr import EdsrModel\nexcept ImportError:" in out
    assert "    TorchVisionViTModel = None\n" in out
    assert "import torch\n" in out and "\nfrom os import path\n" in out
    namespace: dict = {}
    exec(compile(out.replace("executorch.examples.models", "no_such_package"), "guarded", "exec"), namespace)
    assert namespace["EdsrModel"] is None and namespace["TorchVisionViTModel"] is None


@pytest.mark.parametrize("test,node", [
    ("TestQNNQuantizedOperator.test_qnn_backend_index_copy",
     "test_qnn_delegate.py::TestQNNQuantizedOperator::test_qnn_backend_index_copy"),
    ("test_qnn_delegate.TestQNNFloatingPointOperator::test_qnn_backend_relu",  # a result, retried
     "test_qnn_delegate.py::TestQNNFloatingPointOperator::test_qnn_backend_relu"),
])
def test_suite_tests_and_results_become_node_ids_of_the_copy(test, node):
    assert delegate_test_id(test) == node


@pytest.mark.slow
@needs_sdk
def test_executorchs_own_qnn_test_passes_in_x86_mode_with_the_stand_in(tmp_path):
    """TestQNNFloatingPointOperator.test_qnn_backend_relu: lowered, run by the stand-in, compared
    by the test itself (about a minute)."""
    junit = tmp_path / "qnn.xml"
    proc = subprocess.run([sys.executable, "-m", "tasks.qnn.delegate_tests", str(installed_package_dir(sys.executable)),
                           "--", "-q", "--junit-xml", str(junit),
                           "test_qnn_delegate.py::TestQNNFloatingPointOperator::test_qnn_backend_relu"],
                          env=qnn_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:]
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    assert [c.get("name") for c in cases] == ["test_qnn_backend_relu"]
    assert not [child.tag for c in cases for child in c if child.tag in ("failure", "error", "skipped")]


@pytest.mark.slow
@needs_sdk
def test_the_qnn_suite_runs_on_the_target_in_the_sandbox(tmp_path):
    """qnn-htp-sim runs a test_qnn_delegate.py test of the installed package in the sandbox, the
    SDK read-only, and reads the result from its JUnit XML (about a minute)."""
    from tasks.records import BuildResult
    from tasks.pipeline.suites import SuiteRun
    from tasks.pipeline.tables import load_tables
    from tasks.pipeline.targets import make_target

    tables = load_tables()
    package = installed_package_dir(sys.executable)
    build = BuildResult(status="ok", kind="overlay", commit="0" * 40, package_dir=str(package))
    tmp_path.chmod(0o755)  # the sandbox's user writes the JUnit XML under it
    run = SuiteRun(tables.suites["qnn"], build, "qnn-htp-sim", tmp_path,
                   node_ids=("TestQNNFloatingPointOperator.test_qnn_backend_relu",))
    result = make_target(tables.targets["qnn-htp-sim"], {}).run(run)
    assert result.status == "ran", (result.reason, result.log_excerpt)
    assert [(t.test.rsplit("::", 1)[-1], t.outcome) for t in result.tests] == [("test_qnn_backend_relu", "passed")]
    assert "test_qnn_delegate.py::TestQNNFloatingPointOperator::test_qnn_backend_relu" in result.command
