"""Fixtures for the pipeline tests: a throwaway ExecuTorch git repository made from the
installed package (tasks/sample_repo.py), committed once per session, plus head branches
made by applying real regression patches."""
from __future__ import annotations

import sys
from types import SimpleNamespace
from pathlib import Path

import pytest

from tasks.pipeline.overlay import installed_package_dir
from tasks.sample_repo import SampleRepo, build_sample_repo, commit_all, git, init_repo

ROOT = Path(__file__).resolve().parents[2]
PROBE_PATCHES = ROOT / "tasks" / "probes" / "regressions"
PIPELINE_PATCHES = ROOT / "tasks" / "pipeline" / "regressions"


@pytest.fixture(scope="session")
def gitkit():
    """git helpers for tests that build their own small repositories."""
    return SimpleNamespace(git=git, init_repo=init_repo, commit_all=commit_all)


@pytest.fixture(scope="session")
def installed() -> Path:
    return installed_package_dir(sys.executable)


@pytest.fixture(scope="session")
def et_repo(tmp_path_factory, installed) -> SampleRepo:
    return build_sample_repo(tmp_path_factory.mktemp("executorch") / "executorch", installed)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """Shared by every triage of the session, so the merge base's results are cached once."""
    return tmp_path_factory.mktemp("etriage-data")


class Patches:
    def probe(self, name: str) -> Path:
        return self._get(PROBE_PATCHES / f"{name}.patch")

    def pipeline(self, name: str) -> Path:
        return self._get(PIPELINE_PATCHES / f"{name}.patch")

    @staticmethod
    def _get(path: Path) -> Path:
        if not path.is_file():
            pytest.fail(f"regression patch {path} is missing")
        return path


@pytest.fixture(scope="session")
def patches() -> Patches:
    return Patches()
