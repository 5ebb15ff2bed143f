"""What fetching costs a triage (tasks/repos.py): the first mirror of a repository, the checkout
after a new push (incremental), a checkout of a head the mirror already has, the worktree's add
and remove (without and with the files checked out, ETRIAGE_WORKTREE_FILES), and the disk they take.

    .venv/bin/python bench/fetch.py [--source GIT_DIR] [--data-dir DIR]

The repository is served by the GitHub double's git over HTTP (`git http-backend` behind it, the
token checked on every request) on this machine: the network is loopback, so the figures are
git's and the server's work, not a WAN's (add the transfer of the sizes printed at your link's
speed). The source:
- `--source GIT_DIR`: a git directory with real history, e.g. pytorch/executorch as the search
  tool's `fetch github:pytorch/executorch` brings it. It is only read (borrowed through
  alternates). The pull request is real history: base `main~30`, head `main~20` (ten commits),
  then a push to `main~19`. Such a copy may itself lack blobs (that one is a partial clone), so
  only the history is measured: the mirror's commits and trees, as a CI-log triage fetches them
  (`Repos.merge_base`, no blobs, no worktree).
- default: ExecuTorch v1.4.1's sources (../shared/executorch-src, 24,000 files) committed once,
  twenty small commits on top, a pull request of one edited file, then a push of another edit.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from etriage.dev.github_double import GitHubDouble  # noqa: E402
from tasks.repos import FetchPolicy, PullRefs, Repos  # noqa: E402

TARBALL = ROOT.parent / "shared" / "executorch-src" / "executorch-v1.4.1-src.tar.xz"
REPO, PR, TOKEN = "pytorch/executorch", 1, "ghs_benchFetchToken0123456789abcdef"
GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "bench@example.invalid",
           # a gc --auto detached after the commits would race the temporary directory's removal
           "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "gc.autoDetach", "GIT_CONFIG_VALUE_0": "false"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=GIT_ENV).stdout.strip()


def edit(work: Path, rel: str, line: str, message: str) -> str:
    with open(work / rel, "a") as handle:
        handle.write(line)
    git(work, "commit", "-q", "-a", "-m", message)
    return git(work, "rev-parse", "HEAD")


def from_tarball(tmp: Path) -> tuple[Path, str, str, str]:
    """(a bare upstream, base, head, the head's next push) made from v1.4.1's sources."""
    with tarfile.open(TARBALL) as tar:
        tar.extractall(tmp, filter="data")
    work = tmp / "executorch"
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "ExecuTorch v1.4.1 sources")
    for n in range(20):
        base = edit(work, "README.md", f"\n<!-- history {n} -->\n", f"history {n}")
    git(work, "checkout", "-q", "-b", "pr")
    head = edit(work, "exir/backend/backend_api.py", "\n# the change\n", "the change")
    push = edit(work, "exir/backend/backend_api.py", "\n# the next push\n", "the next push")
    upstream = tmp / "upstream.git"
    git(tmp, "init", "-q", "--bare", str(upstream))
    git(upstream, "fetch", "-q", str(work), f"{base}:refs/heads/main", f"{push}:refs/heads/pr")
    shutil.rmtree(work)
    return upstream, base, head, push


def from_source(tmp: Path, source: Path) -> tuple[Path, str, str, str]:
    """(an upstream borrowing `source`'s objects, base, head, next push): real history."""
    upstream = tmp / "upstream.git"
    git(tmp, "init", "-q", "--bare", str(upstream))
    (upstream / "objects" / "info" / "alternates").write_text(f"{Path(source).resolve() / 'objects'}\n")
    rev = lambda spec: subprocess.run(["git", "--git-dir", str(source), "rev-parse", spec], check=True,  # noqa: E731
                                      capture_output=True, text=True, env=GIT_ENV).stdout.strip()
    base, head, push = rev("refs/heads/main~30"), rev("refs/heads/main~20"), rev("refs/heads/main~19")
    git(upstream, "update-ref", "refs/heads/main", base)
    return upstream, base, head, push


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def timed_checkout(repos: Repos, pull: PullRefs) -> dict:
    start = time.monotonic()
    with repos.checkout(pull, lambda fresh: TOKEN) as checkout:
        entered = time.monotonic() - start
        tree = du(checkout.path)
        leaving = time.monotonic()
    return {"total": entered, "remove": time.monotonic() - leaving, "worktree_bytes": tree,
            "mirror_bytes": du(checkout.mirror), **checkout.steps}


def history_only(repos: Repos, double, pull: PullRefs, push: str) -> int:
    """The first mirror of real history and the fetch after a push: commits and trees only."""
    for name, refs in [("first mirror, history only (commits + trees)", pull),
                       ("after a new push, history only", PullRefs(REPO, PR, push, "main", pull.base_sha))]:
        if refs is not pull:
            double.push(REPO, PR, push)
        started = time.monotonic()
        repos.merge_base(refs, lambda fresh: TOKEN)
        mirror = repos.mirror_path(REPO)
        commits = subprocess.run(["git", "--git-dir", str(mirror), "rev-list", "--count", "--all"], check=True,
                                 capture_output=True, text=True, env=GIT_ENV).stdout.strip()
        print(f"{name:48} {time.monotonic() - started:7.1f} s   mirror {du(mirror) / 2**20:6.0f} MiB, "
              f"{commits} commits", flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="a git directory with real history (read only)")
    parser.add_argument("--data-dir", type=Path, help="where the mirror goes (default: a temporary directory)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-fetch-") as tmp_name:
        tmp = Path(tmp_name)
        made = time.monotonic()
        upstream, base, head, push = from_source(tmp, args.source) if args.source else from_tarball(tmp)
        print(f"source: {args.source or TARBALL.name} ({time.monotonic() - made:.0f} s to prepare); "
              f"base {base[:12]}, head {head[:12]}, next push {push[:12]}", flush=True)
        data = args.data_dir or tmp / "data"
        with GitHubDouble() as double:
            double.git_tokens.add(TOKEN)
            double.git.host(REPO, upstream)
            double.add_pull(REPO, PR, head, base, base_ref="main")
            repos = Repos(data, double.url, FetchPolicy(reserve_bytes=0))
            pull = PullRefs(REPO, PR, head, "main", base)
            if args.source:
                return history_only(repos, double, pull, push)
            rows = [("first mirror (empty data dir)", timed_checkout(repos, pull))]
            double.push(REPO, PR, push)
            rows.append(("after a new push (incremental)", timed_checkout(repos, PullRefs(REPO, PR, push, "main", base))))
            rows.append(("same head again (warm mirror)", timed_checkout(repos, PullRefs(REPO, PR, push, "main", base))))
            with_files = Repos(data, double.url, FetchPolicy(reserve_bytes=0, worktree_files=True))
            rows.append(("same, files checked out", timed_checkout(with_files, PullRefs(REPO, PR, push, "main", base))))
            started = time.monotonic()
            repos.merge_base(PullRefs(REPO, PR, push, "main", base), lambda fresh: TOKEN)
            merge_base_only = time.monotonic() - started
    print(f"{'':34} {'total':>8} {'fetch':>7} {'blobs':>7} {'worktree':>9} {'remove':>7} "
          f"{'mirror':>9} {'worktree':>9}")
    for name, row in rows:
        print(f"{name:34} {row['total']:7.1f}s {row['fetch']:6.1f}s {row['blobs']:6.1f}s {row['worktree']:8.1f}s "
              f"{row['remove']:6.1f}s {row['mirror_bytes'] / 2**20:8.0f}M {row['worktree_bytes'] / 2**20:8.0f}M")
    print(f"merge base only (CI-log triage, warm mirror): {merge_base_only:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
