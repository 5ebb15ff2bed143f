"""scripts/qnn_area_records.py: multi-method and mutable-buffer records from mutants of the QNN
backend's lowering path. Which mutants are in scope and how they are labelled, the committed
records, and, on the provisioned QNN libraries, a real mutant run through the two-method flow."""
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
SCRIPT = REPO / "scripts" / "qnn_area_records.py"


area = load_script("qnn_area_records")
VISITOR = '''\
def get_tensor_name(self, node, wrapper_idx):
    tensor_name = node.name
    if is_mutable_buffer_input(node, self.edge_program):
        fqn = self.edge_program.graph_signature.inputs_to_buffers[node.target]
        tensor_name = f"mutbuf_{fqn}"
    spec = self.compile_spec_buffer
    return tensor_name
'''


def _mutant_at(source: str, line: int, operator: str):
    return next(m for m in area.candidates(source, "backends/qualcomm/builders/node_visitor.py")
                if m.line == line and m.operator == operator)


@pytest.mark.parametrize(("line", "operator", "category"), [
    (3, "negate_condition", "mutable_buffer"),  # the test of a mutable buffer input
    (5, "drop_statement", "mutable_buffer"),  # the `mutbuf_` name the runtime maps I/O by
    (2, "drop_statement", "multi_method_lowering"),  # any other line of the lowering path
    (6, "drop_statement", "multi_method_lowering"),  # a compile spec's buffer is not a mutable buffer
])
def test_a_mutant_is_labelled_by_what_its_own_lines_handle(line, operator, category):
    assert area.label_of(_mutant_at(VISITOR, line, operator), VISITOR) == category


def test_a_generic_module_gives_only_its_mutable_buffer_lines():
    pattern = area.Module("x.py", area._BUFFER_LINE.pattern).lines
    assert area.in_scope(_mutant_at(VISITOR, 3, "negate_condition"), VISITOR, pattern)
    assert not area.in_scope(_mutant_at(VISITOR, 6, "drop_statement"), VISITOR, pattern)
    assert area.in_scope(_mutant_at(VISITOR, 6, "drop_statement"), VISITOR, "")  # a module of the area: all


def test_a_record_is_one_the_corpus_loader_accepts(tmp_path):
    excerpt = ('Traceback (most recent call last):\n  File "backends/qualcomm/builders/node_visitor.py", line 445, '
               'in get_tensor_name\n    tensor_name = f"input_{str(self.external_ids[node])}_{tensor_name}"\n'
               "KeyError: k", "KeyError: k")
    record = area.area_record("backends/qualcomm/builders/node_visitor.py", _mutant_at(VISITOR, 3, "negate_condition"),
                              "mutable_buffer", "two_methods", excerpt, "1.4.1")
    out = tmp_path / "records.jsonl"
    load_script("mutant_records").write_records([record, dict(record)], out)  # the same id twice is written once
    [loaded] = load_corpus(out)
    assert loaded.category == "mutable_buffer" and loaded.generated
    assert loaded.thread.endswith("backends/qualcomm/builders/node_visitor.py")
    assert "'two_methods' flow" in record["note"] and "only on the mutant" in record["note"]


def test_the_committed_records_load_and_stay_out_of_training_and_the_evaluation_split():
    records = load_corpus(area.OUT)
    assert area.OUT not in generated_files()  # not trained on: docs/ENGINE.md says why
    assert {r.category for r in records} == {"multi_method_lowering", "mutable_buffer"}
    eval_threads = {r.thread for r in load_corpus(EVAL_FILE)}
    for record in records:
        assert record.thread not in eval_threads and record.note.startswith("scripts/qnn_area_records.py: ")
        assert not [p for p in ("/work/", "/tmp/", "/root/", "/etriage/") if p in record.excerpt]


@needs_provisioned_qnn
def test_a_mutant_of_the_mutable_buffer_mapping_breaks_the_two_method_lowering_into_a_record(tmp_path):
    """Real: the two-method flow lowers and runs on the HTP simulator unmutated; mutants of
    node_visitor_manager.py's mutable-buffer line are swapped in, in forked children, and what
    ExecuTorch raised is a mutable_buffer record (about 40 s)."""
    out = tmp_path / "records.jsonl"
    env = {**os.environ, **sdk.find_sdk({}, PROVISIONED_QNN)[0].env(), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(SCRIPT), "--module", "node_visitor_manager", "--scenario", "two_methods",
                           "--per-module", "3", "--out", str(out)], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "scenario two_methods: raised nothing unmutated" in done.stdout
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records, done.stdout[-3000:]
    for record in records:
        assert record["category"] == "mutable_buffer"
        assert record["source"].endswith("/backends/qualcomm/builders/node_visitor_manager.py")
        assert 'File "backends/qualcomm/' in record["excerpt"]
        assert "/work/" not in record["excerpt"] and str(REPO) not in record["excerpt"]
