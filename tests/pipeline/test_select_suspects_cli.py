"""Test selection over the real ExecuTorch import graph, suspect ranking, and the CLI door."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.pipeline import select, suspects
from tasks.pipeline.tables import load_tables
from tasks.records import ChangedFile
from triage_rules.records import Failure, Frame

ETRIAGE = [sys.executable, "-m", "bot.cli", "triage"]


def test_selection_follows_imports_and_focus_words_within_budget(et_repo, data_dir):
    graph = select.import_graph(et_repo.path, et_repo.base, data_dir)
    assert Path(data_dir / "import-graph").glob("*.json")
    change = [ChangedFile("exir/passes/insert_write_back_for_buffers_pass.py", "M")]
    tables = load_tables()
    selected, left_out = select.select_tests(graph, change, tables, fixed_paths=set())

    assert 0 < len(selected) <= tables.selection.max_files
    assert sum(s.estimated_seconds for s in selected) <= tables.selection.budget_seconds
    reasons = {s.path: s.reason for s in selected + left_out}
    # exir/tests/test_passes.py imports the pass directly
    assert "imports executorch.exir.passes.insert_write_back_for_buffers_pass directly" in \
        reasons["exir/tests/test_passes.py"]
    assert all("left out" in s.reason for s in left_out)
    assert not any(s.path.startswith("backends/qualcomm/") for s in selected)


def test_changed_regions_name_the_enclosing_function(gitkit, tmp_path):
    repo = gitkit.init_repo(tmp_path / "r")
    src = "class Lowering:\n    def run(self):\n        return 1\n\n\ndef helper():\n    return 2\n"
    (repo / "m.py").write_text(src)
    gitkit.commit_all(repo, "base")
    (repo / "m.py").write_text(src.replace("return 1", "return -1"))
    head = gitkit.commit_all(repo, "head")
    base = gitkit.git(repo, "rev-parse", "HEAD~1").strip()
    regions = suspects.changed_regions(repo, base, head, [ChangedFile("m.py", "M")])
    assert [(r.path, r.symbol) for r in regions] == [("m.py", "Lowering.run")]


REGIONS = [suspects.ChangedRegion("exir/backend/backend_api.py", "_insert_lowered_submodule", 198, 260),
           suspects.ChangedRegion("exir/passes/spec_prop_pass.py", "SpecPropPass.call", 10, 40),
           suspects.ChangedRegion("docs/notes.md", "", 0, 0)]


@pytest.mark.parametrize("text,frames,category,top", [
    # the traceback runs through the changed function
    ('File "/x/site-packages/executorch/exir/backend/backend_api.py", line 230, in _insert_lowered_submodule',
     [], "other", ("exir/backend/backend_api.py", "_insert_lowered_submodule")),
    # engine frames (overlay paths) point into the pass
    ("boom", [Frame("/data/runs/r/overlay-1/executorch/exir/passes/spec_prop_pass.py", 12, "call")],
     "other", ("exir/passes/spec_prop_pass.py", "SpecPropPass.call")),
    # no traceback: the category points at exir/backend
    ("AssertionError: payload mismatch", [], "multi_method_lowering",
     ("exir/backend/backend_api.py", "_insert_lowered_submodule")),
])
def test_suspects_rank_traceback_then_category(text, frames, category, top):
    failure = Failure(line=text, line_no=1, frames=frames, category=category)
    ranked = suspects.rank(REGIONS, failure, text, category, load_tables())
    assert (ranked[0].path, ranked[0].symbol) == top
    assert ranked[0].score > 0 and all(s.path != "docs/notes.md" for s in ranked)


@pytest.mark.parametrize("args,message", [
    (["--repo", "/nonexistent/repo", "--base", "a", "--head", "b"], "no such directory"),
    (["--repo", "{tmp}", "--base", "a", "--head", "b"], "not a git repository"),
    (["--repo", "{repo}", "--base", "main", "--head", "nope"], "unknown revision 'nope'"),
    (["--repo", "{repo}", "--base", "main", "--head", "main", "--suite", "nosuch"], "unknown suite(s): nosuch"),
])
def test_cli_bad_input_is_one_line_and_exit_2(et_repo, tmp_path, args, message):
    args = [a.format(tmp=tmp_path, repo=et_repo.path) for a in args]
    proc = subprocess.run(ETRIAGE + args + ["--data-dir", str(tmp_path / "d")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and message in proc.stderr and "Traceback" not in proc.stderr


def test_cli_docs_only_change_json(et_repo, tmp_path):
    def docs(repo: Path):
        (repo / "docs").mkdir(exist_ok=True)
        (repo / "docs" / "cli.md").write_text("# cli\n")

    head = et_repo.branch("cli-docs", edit=docs)
    out = tmp_path / "report.json"
    proc = subprocess.run(ETRIAGE + ["--repo", str(et_repo.path), "--base", "main", "--head", head,
                                     "--format", "json", "--out", str(out), "--data-dir", str(tmp_path / "d")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert set(report) >= {"base", "head", "merge_base", "plan", "build", "results", "summary"}
    assert report["plan"]["changed_files"][0]["path"] == "docs/cli.md"
    assert report["plan"]["suites"] == [] and report["summary"]["new"] == 0
    assert "etriage triage: plan:" in proc.stderr  # progress on stderr
