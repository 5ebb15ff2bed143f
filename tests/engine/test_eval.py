"""`etriage eval`: the engine's categories measured on the corpus's evaluation part."""
from __future__ import annotations

import json
import subprocess
import sys

from triage_rules.corpus import EVAL_FILE

# Floors a little under what the engine reaches on the fixed evaluation part (README: "Failure
# categories on unseen failures"): a change that loses ground must say why. The goal is 0.90
# overall and per focus category; the README says where it is not reached.
ACCURACY_FLOOR = 0.74
FOCUS_FLOOR = 0.25


def eval_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "etriage.cli", "eval", *args], capture_output=True, text=True,
                          timeout=600, check=False)


def test_eval_on_the_held_out_part(match_report):
    result = eval_cli(str(EVAL_FILE), "--format", "json")  # trained as shipped: train.jsonl and generated/ less eval threads
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    match_report.append(f"held-out category accuracy: {summary['accuracy']:.1%} on {summary['records']} records "
                        f"(rules alone {summary['rules_only_accuracy']:.1%})")
    match_report.append("  focus: " + ", ".join(f"{c} {v:.0%}" for c, v in summary["focus_accuracy"].items()))
    assert summary["accuracy"] >= ACCURACY_FLOOR
    assert all(v >= FOCUS_FLOOR for v in summary["focus_accuracy"].values()), summary["focus_accuracy"]
    assert summary["trained_on"] > 400  # no eval thread leaked into training
    assert set(summary["per_category"]) >= {"multi_method_lowering", "mutable_buffer"}
    assert summary["decided_by_rule"] + summary["decided_by_model"] == 1.0
    matrix = summary["confusion"]
    assert sum(sum(row.values()) for row in matrix.values()) == summary["records"]


def test_text_report_has_the_confusion_matrix(tmp_path):
    small = tmp_path / "small.jsonl"
    small.write_text("".join(line + "\n" for line in EVAL_FILE.read_text().splitlines()[:15]))
    result = eval_cli(str(small))
    assert result.returncode == 0, result.stderr
    assert "confusion matrix" in result.stdout and "worst confusions" in result.stdout
    assert "accuracy:" in result.stdout


def test_a_bad_corpus_is_refused_with_its_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"source": "https://x.org/1", "excerpt": "a", "failure_line": "a", "category": "nope"}\n')
    result = eval_cli(str(bad))
    assert result.returncode == 2
    assert f"{bad}:1: unknown category 'nope'" in result.stderr


def test_cross_validation_pools_the_folds_records(tmp_path):
    """Every record counts once, as on the evaluation split: a category's figure is its records
    right over its records, never a mean of per-fold ratios of unequal folds."""
    from triage_rules.corpus import TRAIN_FILE

    lines = TRAIN_FILE.read_text().splitlines()
    part = tmp_path / "part.jsonl"
    part.write_text("".join(line + "\n" for line in lines[::6]))
    result = eval_cli(str(part), "--cv", "3", "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["records"] == len(lines[::6]) and len(summary["folds"]) == 3
    right = sum(row.get(category, 0) for category, row in summary["confusion"].items())
    assert summary["accuracy"] == round(right / summary["records"], 4)
    for category, value in summary["focus_accuracy"].items():
        assert value == summary["per_category"][category]["recall"]
