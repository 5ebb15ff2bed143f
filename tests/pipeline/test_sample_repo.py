"""The throwaway ExecuTorch repository (tasks/sample_repo.py) that tests and `etriage demo` use."""
from __future__ import annotations

from pathlib import Path

import pytest

from tasks.sample_repo import SampleRepoError, build_sample_repo, git


def test_sample_repo_commits_sources_and_branches_from_the_base(et_repo, installed, tmp_path):
    tracked = git(et_repo.path, "ls-files").splitlines()
    assert "exir/backend/backend_api.py" in tracked
    assert not any(p.endswith(".so") or p.startswith("data/") for p in tracked)
    assert git(et_repo.path, "rev-parse", "main").strip() == et_repo.base

    def edit(repo: Path):
        (repo / "NOTES.md").write_text("notes\n")

    head = et_repo.branch("sample-notes", edit=edit)
    assert git(et_repo.path, "diff", "--name-only", et_repo.base, head).split() == ["NOTES.md"]
    # the work tree is back on main, clean
    assert git(et_repo.path, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert not (et_repo.path / "NOTES.md").exists()


def test_a_patch_that_does_not_apply_is_one_clear_error_and_leaves_main_clean(et_repo, tmp_path):
    bad = tmp_path / "bad.patch"
    bad.write_text("--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n")
    with pytest.raises(SampleRepoError, match="git apply"):
        et_repo.branch("sample-bad", patch=bad)
    assert git(et_repo.path, "status", "--porcelain") == ""
    assert git(et_repo.path, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"


def test_building_into_a_non_empty_directory_is_refused(tmp_path, installed):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine\n")
    with pytest.raises(SampleRepoError, match="not empty"):
        build_sample_repo(tmp_path / "x", installed)
    assert (tmp_path / "x" / "keep.txt").read_text() == "mine\n"
