"""A tree that has moved past the installed wheel, made from real sources.

`moved_repo`: the installed ExecuTorch package (tasks/sample_repo.py, tagged v1.4.1 as its
release) plus, as the next commit on `main`, a real later upstream change of an unchanged
module's API: pytorch/executorch 6a44f599b9 ("Add file-backed serialization support", #21626,
2026-08-07), which gave `BackendDetails` (exir/backend/backend_details.py) the classmethod
`copy_exported_program_for_preprocess` and made `lower_all_submodules_to_backend`
(exir/backend/backend_api.py) call it instead of `copy.deepcopy`. The fixture's patch
(fixtures/moved_backend_details.patch) is written here to the same effect on the 1.4.1 files.
That is exactly the distance that made a comment-only change to backend_api.py "14 new failures"
when only the changed files were laid over the wheel: main's backend_api.py calls a method the
wheel's backend_details.py does not have.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tasks.pipeline.overlay import installed_package_dir
from tasks.sample_repo import SampleRepo, build_sample_repo, git

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MOVED = FIXTURES / "moved_backend_details.patch"
ROOT = Path(__file__).resolve().parents[2]
REGRESSIONS = ROOT / "tasks" / "probes" / "regressions"


@pytest.fixture(scope="session")
def installed() -> Path:
    return installed_package_dir(sys.executable)


@pytest.fixture(scope="session")
def moved_repo(tmp_path_factory, installed) -> SampleRepo:
    """`main` is the wheel's sources plus the upstream API move; heads branch from it."""
    sample = build_sample_repo(tmp_path_factory.mktemp("moved") / "executorch", installed)
    moved = sample.branch("moved", patch=MOVED)
    git(sample.path, "reset", "-q", "--hard", moved)  # the work tree is on main
    return SampleRepo(sample.path, moved)


@pytest.fixture(scope="session")
def env_data(tmp_path_factory) -> Path:
    """Shared by the session's triages: the moved merge base's environment is laid once."""
    return tmp_path_factory.mktemp("environments-data")
