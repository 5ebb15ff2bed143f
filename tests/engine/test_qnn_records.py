"""scripts/qnn_records.py: records from QNN's HTP simulator. What an excerpt keeps of QNN's
lines and the traceback, and, on the provisioned QNN libraries, a real mutant of an op builder
lowered to HTP and a real lowering against a broken copy of the SDK."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.qnn import sdk
from tests.engine.record_scripts import PROVISIONED_QNN, load_script, needs_provisioned_qnn
from triage_rules.corpus import EVAL_FILE, generated_files, load_corpus

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "qnn_records.py"


qnn_records = load_script("qnn_records")
INSTALLED = Path("/work/venv/lib/python3.11/site-packages/executorch")
SDK = "/work/venv/qnn-sdk"


def _traceback(frames: int, message: str = "ValueError: tuple.index(x): x not in tuple",
               installed: Path = INSTALLED) -> list[str]:
    lines = ["Traceback (most recent call last):",
             '  File "/work/etriage/lower.py", line 9, in <module>',
             "    lower(model)"]
    for i in range(frames):
        lines += [f'  File "{installed}/exir/backend/step{i}.py", line {i + 1}, in step{i}',
                  f"    step{i + 1}()"]
    lines += [f'  File "{installed}/backends/qualcomm/builders/op_cat.py", line 73, in define_node',
              "    axis = node.meta[QCOM_AXIS_ORDER].index(axis)", message]
    return lines


def test_an_excerpt_is_qnn_lines_then_the_traceback_from_executorch_with_general_paths():
    native = [f"[ERROR] [Qnn ExecuTorch]: QnnDsp <E> Failed to load {SDK}/lib/x86_64-linux-clang/libQnnHtp.so"] * 2
    text, line = qnn_records.excerpt_of(native, _traceback(2), INSTALLED, SDK)
    lines = text.splitlines()
    assert line == "ValueError: tuple.index(x): x not in tuple" and lines[-1] == line
    assert lines[0] == f"[ERROR] [Qnn ExecuTorch]: QnnDsp <E> Failed to load {qnn_records.SDK_PATH}/lib/x86_64-linux-clang/libQnnHtp.so"
    assert lines[1] == "Traceback (most recent call last):"  # the repeated QNN line once
    assert lines[2] == '  File "exir/backend/step0.py", line 1, in step0'  # the user's own frame left out
    assert "/work/" not in text


def test_a_long_traceback_keeps_its_tail_from_a_frame_and_fits_the_corpus_rule():
    text, line = qnn_records.excerpt_of(["<E> one", "<E> two"], _traceback(40), INSTALLED, SDK)
    lines = text.splitlines()
    assert 2 <= len(lines) <= 40 and lines[-1] == line
    assert lines[:3] == ["<E> one", "<E> two", "Traceback (most recent call last):"]
    assert lines[3].startswith('  File "') and "op_cat.py" in lines[-3]


@pytest.mark.parametrize("installed", [INSTALLED, Path(sys.prefix) / "lib/python3.11/site-packages/executorch"],
                         ids=["elsewhere", "in the venv"])
def test_the_frames_of_etriage_that_drove_the_lowering_are_left_out_of_a_chained_traceback(installed):
    """A chained exception's last traceback starts in the script and the probe that lowered the
    model; the excerpt keeps ExecuTorch's frames and the exceptions, never etriage's own. The
    venv, where ExecuTorch is installed, may lie inside the repository: its frames stay."""
    own = str(qnn_records.REPO)
    tb = _traceback(1, "KeyError: 'val'", installed) + [
        "During handling of the above exception, another exception occurred:",
        "Traceback (most recent call last):",
        f'  File "{own}/scripts/qnn_area_records.py", line 92, in scenario',
        "    flow()",
        f'  File "{own}/tasks/qnn/htp.py", line 50, in lower',
        "    return utils.to_edge_transform_and_lower_to_qnn(module, inputs, specs)",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        f'  File "{installed}/backends/qualcomm/qnn_preprocess.py", line 103, in _build_op_wrappers',
        "    raise RuntimeError(err_msg)",
        "RuntimeError: aten.view_copy.default is not supported in Qnn Delegate"]
    text, line = qnn_records.excerpt_of([], tb, installed, SDK)
    assert line == "RuntimeError: aten.view_copy.default is not supported in Qnn Delegate"
    assert "/etriage/" not in text and "flow()" not in text and "to_edge_transform_and_lower_to_qnn" not in text
    assert "KeyError: 'val'" in text and "During handling of the above exception" in text
    assert text.splitlines()[-3:] == ['  File "backends/qualcomm/qnn_preprocess.py", line 103, in _build_op_wrappers',
                                      "    raise RuntimeError(err_msg)", line]


@pytest.mark.parametrize("case", ["no exception line", "no executorch frame", "machine path left"])
def test_what_makes_no_excerpt(case):
    tb = _traceback(1)
    if case == "no exception line":
        tb[-1] = "    and the process went on"
    elif case == "no executorch frame":
        tb = [line for line in tb if str(INSTALLED) not in line]
    else:
        tb[-1] = "FileNotFoundError: /root/.cache/model.pte"
    assert qnn_records.excerpt_of([], tb, INSTALLED, SDK) is None


def test_a_builder_record_is_one_the_corpus_loader_accepts(tmp_path):
    mutant = qnn_records.candidates("def define_node(self, node):\n    axis = node.args[1]\n    return axis\n",
                                    "backends/qualcomm/builders/op_cat.py")[0]
    excerpt = qnn_records.excerpt_of([], _traceback(1), INSTALLED, SDK)
    record = qnn_records.builder_record("backends/qualcomm/builders/op_cat.py", mutant, "vision", "lower", excerpt,
                                        "1.4.1")
    out = tmp_path / "records.jsonl"
    qnn_records.write_records([record, dict(record)], out)  # the same id twice is written once
    [loaded] = load_corpus(out)
    assert loaded.category == "qnn_op_validation" and loaded.thread.endswith("backends/qualcomm/builders/op_cat.py")
    assert "op_cat.py" in record["note"] and "'vision' model" in record["note"]


def test_the_committed_simulator_records_load_and_stay_out_of_training_and_the_evaluation_split():
    records = load_corpus(qnn_records.OUT)
    assert {r.category for r in records} == {"qnn_op_validation", "qnn_sdk_or_toolchain"}
    assert qnn_records.OUT not in generated_files()  # not trained on: docs/ENGINE.md says why
    eval_threads = {r.thread for r in load_corpus(EVAL_FILE)}
    for record in records:
        assert record.thread not in eval_threads and record.note.startswith("scripts/qnn_records.py: ")
        assert "/work/" not in record.excerpt and "/tmp/" not in record.excerpt


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    out = tmp_path / "records.jsonl"
    env = {**os.environ, **sdk.find_sdk({}, PROVISIONED_QNN)[0].env(), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(SCRIPT), *args, "--out", str(out)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return done, records


@needs_provisioned_qnn
def test_a_mutant_of_an_op_builder_that_breaks_the_lowering_becomes_a_record(tmp_path):
    """Real: the 'image' model (its pixel_shuffle is op_depth_to_space.py's) lowers and runs
    unmutated; mutants of that builder are lowered to HTP in forked children, and a lowering
    that fails is a qnn_op_validation record ending in the builder's frame (about 30 s)."""
    done, records = _run(tmp_path, "--part", "builders", "--model", "image", "--module", "op_depth_to_space",
                         "--per-module", "3")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "model image: lowers and runs" in done.stdout
    assert records, done.stdout[-3000:]
    for record in records:
        assert record["category"] == "qnn_op_validation"
        assert record["source"].endswith("/backends/qualcomm/builders/op_depth_to_space.py")
        assert 'File "backends/qualcomm/builders/op_depth_to_space.py"' in record["excerpt"]
        assert "'image' model" in record["note"] and "it passes unmutated" in record["note"]
        assert "/work/" not in record["excerpt"] and str(REPO) not in record["excerpt"]


@needs_provisioned_qnn
def test_lowering_against_an_sdk_without_libqnnhtp_is_a_toolchain_record(tmp_path):
    """Real: a copy of the provisioned SDK less libQnnHtp.so (about 15 s)."""
    done, records = _run(tmp_path, "--part", "sdk", "--sdk-case", "htp-missing")
    assert done.returncode == 0, done.stderr[-3000:]
    [record] = records
    assert record["category"] == "qnn_sdk_or_toolchain" and record["id"] == "gen-qnn-sdk-htp-missing"
    assert "Failed to initialize QNN backend" in record["failure_line"]
    assert "[ERROR] [Qnn ExecuTorch]: Cannot Open QNN library libQnnHtp.so" in record["excerpt"]
    assert str(PROVISIONED_QNN) not in record["excerpt"] and "/work/" not in record["excerpt"]
