"""An upstream repository and a contributor's fork on the GitHub double, served over real git
smart HTTP (etriage/dev/git_http.py: `git http-backend` behind the double, the token checked on
every request), with a pull request whose head lives only in the fork."""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from etriage.dev.github_double import GitHubDouble
from tasks.repos import FetchPolicy, PullRefs, Repos

UPSTREAM, FORK, PR = "upstream/executorch", "contrib/executorch", 7
TOKEN = "ghs_fetchTestToken0123456789abcdefXYZ"


def git(path: Path, *args: str, date: str | None = None, input: bytes | None = None) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    proc = subprocess.run(["git", "-C", str(path), *args], capture_output=True, env=env, input=input)
    if proc.returncode:
        raise AssertionError(f"git {' '.join(args)}: {proc.stderr.decode()}")
    return proc.stdout.decode().strip()


def commit(work: Path, files: dict[str, str | bytes], message: str, *, date: str | None = None) -> str:
    for name, text in files.items():
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", message, date=date)
    return git(work, "rev-parse", "HEAD")


@dataclass
class Origin:
    double: GitHubDouble
    work: Path  # the upstream maintainer's clone (main) and the contributor's branch (feature)
    first: str  # the first commit of main (its files changed since)
    base: str  # main's tip when the pull request was opened
    head: str  # the pull request's head, in the fork only

    def pull(self, **changes) -> PullRefs:
        values = dict(repo=UPSTREAM, number=PR, head_sha=self.head, base_ref="main", base_sha=self.base)
        return PullRefs(**(values | changes))

    def push_head(self, files: dict[str, str | bytes], message: str = "more", *, force: bool = False) -> str:
        """The contributor pushes again (`force`: a new commit on the base instead of on the old
        head): the fork's branch and refs/pull/N/head move."""
        git(self.work, "checkout", "-q", "feature")
        if force:
            git(self.work, "reset", "-q", "--hard", self.base)
        try:
            sha = commit(self.work, files, message)
        finally:
            git(self.work, "checkout", "-q", "main")
        self.double.git.push(FORK, self.work, f"{sha}:refs/heads/feature")
        self.double.push(UPSTREAM, PR, sha)
        self.head = sha
        return sha

    def requests(self, method: str = "POST"):
        return self.double.requests_to(method, r"\.git/")


@pytest.fixture
def origin(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    first = commit(work, {"README.md": "ExecuTorch\n", "exir/backend/backend_api.py": "VERSION = 1\n",
                          "runtime/core/evalue.cpp": "int evalue() { return 1; }\n"}, "first")
    base = commit(work, {"exir/backend/backend_api.py": "VERSION = 2\n", "docs/usage.md": "# Usage\n"}, "second")
    with GitHubDouble() as double:
        double.git_tokens.add(TOKEN)
        double.git.create(UPSTREAM, source=work)
        double.git.fork(FORK, of=UPSTREAM)
        git(work, "checkout", "-q", "-b", "feature")
        head = commit(work, {"exir/backend/backend_api.py": "VERSION = 3  # the change\n"}, "the change")
        git(work, "checkout", "-q", "main")
        double.git.push(FORK, work, f"{head}:refs/heads/feature")
        double.add_pull(UPSTREAM, PR, head, base, base_ref="main", head_repo=FORK)
        yield Origin(double, work, first, base, head)


def token(fresh: bool = False) -> str:
    return TOKEN


@pytest.fixture
def policy():
    return FetchPolicy(timeout_seconds=60, reserve_bytes=0)


@pytest.fixture
def repos(tmp_path, origin, policy):
    return Repos(tmp_path / "data", origin.double.url, policy)


def git_processes() -> list[str]:
    """The client's git processes that are descendants of this test process. The double's own
    server side (`git http-backend`, run by its request threads in this same process) is not the
    client's: a held request released at the end of a test may still be serving when we look."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        argv = cmdline.split(" ")
        # `git http-backend` execs git-core/git-http-backend: the server side under either name
        if "git" in argv[0] and "http-backend" not in argv[1:2] and not argv[0].endswith("git-http-backend"):
            found.append(cmdline)
    return found
