"""Fixtures for the pipeline tests: a throwaway ExecuTorch git repository made from the
installed package (its sources, tests and yaml; not the .so files), committed once per
session, plus head branches made by applying real regression patches."""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from pathlib import Path

import pytest

from tasks.pipeline.overlay import installed_package_dir

ROOT = Path(__file__).resolve().parents[2]
PROBE_PATCHES = ROOT / "tasks" / "probes" / "regressions"
PIPELINE_PATCHES = ROOT / "tasks" / "pipeline" / "regressions"
SOURCE_SUFFIXES = (".py", ".yaml", ".fbs", ".pyi", ".h")
GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str, input: bytes | None = None) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=GIT_ENV, input=input)
    if proc.returncode:
        raise AssertionError(f"git {' '.join(args)}: {proc.stderr.decode()}")
    return proc.stdout.decode()


def init_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    return path


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


class EtRepo:
    """The session's ExecuTorch repository; `branch()` makes a head from a patch or an edit."""

    def __init__(self, path: Path, base: str):
        self.path, self.base = path, base

    def branch(self, name: str, patch: Path | None = None, edit=None) -> str:
        git(self.path, "checkout", "-q", "-B", name, self.base)
        try:
            if patch is not None:
                git(self.path, "apply", str(patch))
            if edit is not None:
                edit(self.path)
            return commit_all(self.path, name)
        finally:
            git(self.path, "checkout", "-q", "main")


@pytest.fixture(scope="session")
def gitkit():
    """git helpers for tests that build their own small repositories."""
    return SimpleNamespace(git=git, init_repo=init_repo, commit_all=commit_all)


@pytest.fixture(scope="session")
def installed() -> Path:
    return installed_package_dir(sys.executable)


@pytest.fixture(scope="session")
def et_repo(tmp_path_factory, installed) -> EtRepo:
    repo = init_repo(tmp_path_factory.mktemp("executorch") / "executorch")
    files = [p for p in installed.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES
             and "__pycache__" not in p.parts and p.relative_to(installed).parts[0] != "data"]
    for src in files:
        dest = repo / src.relative_to(installed)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(src.read_bytes())
    return EtRepo(repo, commit_all(repo, "base: the installed executorch package"))


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
