"""Fixtures for native rebuilds on ExecuTorch v1.4.1's real sources (../shared/executorch-src/).

The sources are unpacked once per session into a git repository whose base commit is
deterministic (fixed author, dates and message), so its root commit, and with it the
persistent checkout and configured build folder under the data directory, is the same in
every session. The data directory holds the compiler cache: it lives under the user's
cache (~/.cache/etriage/test-native, or $ETRIAGE_TEST_NATIVE_DIR), so the cold build
happens once per machine, not once per session.

The short version, always on: the tests that build the portable runtime start from
`SourceRepo.short`, a commit that drops the portable kernels the probes' programs do not run
(`trim_portable_kernels`), so a cold machine (CI's) compiles 9 of the 172 kernels. With
--run-slow `short` is the release's whole tree (`base`).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# ../shared beside the clone; ETRIAGE_SHARED_DIR names it for a worktree that sits elsewhere
SOURCES = Path(os.environ.get("ETRIAGE_SHARED_DIR") or ROOT.parent / "shared") / "executorch-src"
TARBALL = SOURCES / "executorch-v1.4.1-src.tar.xz"
PYBIND11 = SOURCES / "pybind11-d03662f0.tar.xz"  # third-party/pybind11
GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "etriage", "GIT_AUTHOR_EMAIL": "etriage@example.invalid",
           "GIT_COMMITTER_NAME": "etriage", "GIT_COMMITTER_EMAIL": "etriage@example.invalid",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
TOOLS = ("cmake", "ninja", "ccache", "g++", "bwrap")
# The portable kernels the probes' programs call (tasks/pipeline/programs.py: two_methods_portable,
# kv_cache_steps_portable), by file stem: kernels/portable/cpu/op_<stem>.cpp.
PROBE_KERNELS = frozenset({"add", "addmm", "mul", "permute_copy", "relu", "copy", "index_put",
                           "slice_copy", "sum"})


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=GIT_ENV)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@dataclass
class SourceRepo:
    path: Path
    base: str  # the release's sources (tag v1.4.1 is on it)
    short: str = ""  # where the always-on native builds start: `base`, or its kernels trimmed

    def branch(self, name: str, edits: dict[str, "callable"], start: str | None = None, trim=None) -> str:
        """Branch `name` from `start` (the base) with each file rewritten by its function (and
        `trim` called on the work tree); its sha."""
        git(self.path, "checkout", "-q", "-B", name, start or self.base)
        try:
            for rel, edit in edits.items():
                path = self.path / rel
                path.write_text(edit(path.read_text()))
            if trim:
                trim(self.path)
            git(self.path, "commit", "-q", "-a", "--no-gpg-sign", "-m", name)
            return git(self.path, "rev-parse", "HEAD")
        finally:
            git(self.path, "reset", "-q", "--hard")
            git(self.path, "checkout", "-q", "main")


@pytest.fixture(scope="session")
def native_tools():
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing:
        pytest.skip(f"native rebuilds need {', '.join(missing)} (scripts/system-deps.sh)")
    if not TARBALL.is_file():
        pytest.skip(f"ExecuTorch's sources are not here ({TARBALL})")


@pytest.fixture(scope="session")
def source_repo(native_tools, tmp_path_factory, request) -> SourceRepo:
    parent = tmp_path_factory.mktemp("executorch-src")
    with tarfile.open(TARBALL) as tar:
        tar.extractall(parent, filter="data")
    repo = parent / "executorch"
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A", "--force")  # the release tree tracks files its .gitignore names (build/)
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", "ExecuTorch v1.4.1 sources")
    add_pybind11(repo)
    source = SourceRepo(repo, git(repo, "rev-parse", "HEAD"))
    source.short = source.base
    if not request.config.getoption("--run-slow"):
        source.short = source.branch("probe-kernels", {}, trim=lambda root: trim_portable_kernels(root, PROBE_KERNELS))
    return source


def trim_portable_kernels(repo: Path, keep: frozenset[str]) -> int:
    """Delete kernels/portable/cpu/op_*.cpp but `keep`'s, and each functions.yaml entry whose
    kernel none of the kept files defines (the codegen registers every entry); how many files went."""
    cpu = repo / "kernels" / "portable" / "cpu"
    dropped = [f for f in cpu.glob("op_*.cpp") if f.stem[3:] not in keep]
    for f in dropped:
        f.unlink()
    defined = "\n".join(f.read_text() for f in cpu.glob("op_*.cpp"))
    yaml_path = repo / "kernels" / "portable" / "functions.yaml"
    head, *entries = re.split(r"\n(?=- op: )", yaml_path.read_text())
    kept = [e for e in entries if all(re.search(rf"\b{re.escape(name.rpartition('::')[2])}\s*\(", defined)
                                      for name in re.findall(r"kernel_name:\s*(\S+)", e))]
    assert len(kept) >= len(keep), f"functions.yaml: only {len(kept)} entries kept"
    yaml_path.write_text("\n".join([head, *kept]).rstrip("\n") + "\n")
    return len(dropped)


def add_pybind11(repo: Path) -> None:
    """The submodule the sources' archive leaves out, which a build of the Python extension
    modules needs (tasks/environments/), as a second commit: the root commit, and with it the
    native checkout's place, stay what they were. Tagged v1.4.1, as upstream tags the commit
    the wheel was built from: the environments find the wheel's sources by that tag when the
    wheel's own commit (executorch/version.py) is not in the repository."""
    with tarfile.open(PYBIND11) as tar:
        tar.extractall(repo / "third-party", filter="data")
    git(repo, "add", "-A", "--force", "third-party/pybind11")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", "third-party/pybind11 at d03662f0 (the commit v1.4.1 pins)")
    git(repo, "tag", "v1.4.1")


@pytest.fixture(scope="session")
def native_data() -> Path:
    """Shared by every native test, every session: compiler cache, checkout, build folders."""
    path = Path(os.environ.get("ETRIAGE_TEST_NATIVE_DIR") or Path.home() / ".cache" / "etriage" / "test-native")
    path.mkdir(parents=True, exist_ok=True)
    return path
