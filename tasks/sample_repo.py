"""A throwaway ExecuTorch git repository made from the installed package.

The package's sources, tests and yaml (not the .so files, not the `data` directory) are
committed once as the base on `main`, tagged `v<release>` as upstream tags a release's commit
(tasks/environments/ finds the wheel's sources by it); `SampleRepo.branch()` makes a head from a patch
and/or an edit function. The pipeline tests and `etriage demo` use it to triage real
changes without a checkout of pytorch/executorch.

git runs with a scrubbed environment: a fixed author/committer, no user or system config,
so it works on a machine where git was never configured.
"""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tasks.environments.compiled import installed_wheel
from tasks.pipeline.overlay import installed_package_dir

SOURCE_SUFFIXES = (".py", ".yaml", ".fbs", ".pyi", ".h")
GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_AUTHOR_NAME": "etriage", "GIT_AUTHOR_EMAIL": "etriage@example.invalid",
           "GIT_COMMITTER_NAME": "etriage", "GIT_COMMITTER_EMAIL": "etriage@example.invalid"}


class SampleRepoError(ValueError):
    """A git command on the sample repository failed (bad patch, bad revision, ...)."""


def git(repo: Path, *args: str, input: bytes | None = None) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=GIT_ENV, input=input)
    if proc.returncode:
        lines = [l for l in proc.stderr.decode(errors="replace").splitlines() if l.strip()]
        raise SampleRepoError(f"git {' '.join(args)}: {lines[0] if lines else f'exit code {proc.returncode}'}")
    return proc.stdout.decode()


def init_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    return path


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "--no-gpg-sign", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


@dataclass
class SampleRepo:
    path: Path
    base: str  # sha of the base commit (branch `main`)

    def branch(self, name: str, patch: Path | None = None,
               edit: Callable[[Path], None] | None = None) -> str:
        """Branch `name` from the base, apply `patch` then `edit(repo_path)`, commit; its sha.

        The work tree is back on `main` afterwards, whatever happened.
        """
        git(self.path, "checkout", "-q", "-B", name, self.base)
        try:
            if patch is not None:
                git(self.path, "apply", str(patch))
            if edit is not None:
                edit(self.path)
            return commit_all(self.path, name)
        finally:
            git(self.path, "reset", "-q", "--hard")
            git(self.path, "clean", "-q", "-fd")
            git(self.path, "checkout", "-q", "main")


def source_files(installed: Path) -> list[Path]:
    return sorted(p for p in installed.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES
                  and "__pycache__" not in p.parts and p.relative_to(installed).parts[0] != "data")


def build_sample_repo(dest: Path, installed: Path | None = None) -> SampleRepo:
    """Create the repository at `dest` (must not exist or be empty) from `installed`
    (default: the executorch package this Python finds)."""
    if installed is None:
        installed = installed_package_dir(sys.executable)
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise SampleRepoError(f"{dest}: already exists and is not empty")
    repo = init_repo(dest)
    for src in source_files(installed):
        target = repo / src.relative_to(installed)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(src.read_bytes())
    base = commit_all(repo, "base: the installed executorch package")
    release = installed_wheel(installed).release
    if release:  # these are that release's sources, as upstream's tag says of its commit
        git(repo, "tag", f"v{release}", base)
    return SampleRepo(repo, base)
