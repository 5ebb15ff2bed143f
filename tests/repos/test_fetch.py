"""tasks/repos.py against the GitHub double's real git over HTTP: a fork's pull request fetched
into a blobless mirror and a worktree per run, incrementally; the pipeline's git reads what it
needs without ever fetching; stale worktrees and an oversized mirror are cleaned up."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from etriage.dev.git_http import wants
from tasks.pipeline import gitio
from tasks.repos import FetchError, FetchPolicy, Repos
from tests.repos.conftest import FORK, PR, TOKEN, UPSTREAM, commit, git, token


def worktrees(repos: Repos) -> list[str]:
    folder = repos.root / "worktrees"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_a_fork_pull_request_is_fetched_into_a_blobless_mirror_and_a_worktree(origin, repos):
    advertised = git(origin.work, "ls-remote", str(origin.double.git.git_dir(UPSTREAM)))
    assert origin.head not in git(origin.work, "ls-remote", "--heads", str(origin.double.git.git_dir(UPSTREAM)))
    assert f"{origin.head}\trefs/pull/{PR}/head" in advertised  # the base repository serves the fork's head

    with repos.checkout(origin.pull(), token) as checkout:
        assert checkout.merge_base == origin.base and checkout.head == origin.head
        assert sorted(p.name for p in checkout.path.iterdir()) == [".git"]  # no files: git objects are read
        assert git(checkout.path, "rev-parse", "HEAD") == origin.head
        # the pipeline's own git reads both sides on the worktree
        assert gitio.show(checkout.path, origin.base, "exir/backend/backend_api.py") == b"VERSION = 2\n"
        assert [f.path for f in gitio.changed_files(checkout.path, checkout.merge_base, origin.head)] == \
            ["exir/backend/backend_api.py"]
        # a partial clone: the first commit's old blob was never fetched
        listed = git(checkout.mirror, "rev-list", "--objects", "--no-walk", "--missing=print", origin.first)
        assert any(line.startswith("?") for line in listed.splitlines())
        assert git(checkout.mirror, "config", "remote.origin.partialclonefilter") == "blob:none"
        assert set(checkout.steps) == {"fetch", "blobs", "worktree"}
    assert not checkout.path.exists() and worktrees(repos) == []
    assert git(checkout.mirror, "worktree", "list", "--porcelain").count("worktree ") == 1  # the mirror only


def test_a_worktree_with_files_is_the_head_checked_out(origin, tmp_path):
    repos = Repos(tmp_path / "data", origin.double.url, FetchPolicy(reserve_bytes=0, worktree_files=True))
    with repos.checkout(origin.pull(), token) as checkout:
        assert (checkout.path / "exir/backend/backend_api.py").read_text() == "VERSION = 3  # the change\n"
        assert git(checkout.path, "status", "--porcelain") == ""
    assert worktrees(repos) == []


def test_the_next_fetch_asks_only_for_what_changed(origin, repos):
    with repos.checkout(origin.pull(), token):
        pass
    before = len(origin.requests())
    head = origin.push_head({"exir/backend/backend_api.py": "VERSION = 4\n"})
    with repos.checkout(origin.pull(head_sha=head), token) as checkout:
        assert gitio.show(checkout.path, head, "exir/backend/backend_api.py") == b"VERSION = 4\n"
    asked = [set(wants(r.body)) for r in origin.requests()[before:]]
    new_blob = git(origin.work, "rev-parse", f"{head}:exir/backend/backend_api.py")
    assert {new_blob} in asked  # the blob batch: one file, the one that changed
    assert not any(git(origin.work, "rev-parse", f"{head}:README.md") in a for a in asked)


def test_the_pipelines_git_never_fetches_lazily(origin, repos):
    """What the fetch did not bring is an error for every other git command (the mirror says
    protocol.allow=never): a lazy fetch would go without the credential."""
    with repos.checkout(origin.pull(), token) as checkout:
        before = len(origin.double.requests)
        with pytest.raises(gitio.GitError, match="not allowed"):
            gitio.show(checkout.path, origin.first, "exir/backend/backend_api.py")
        assert len(origin.double.requests) == before


def test_a_deleted_fork_still_has_its_head_in_the_base_repository(origin, repos):
    origin.double.git.delete(FORK)
    assert origin.double.git.repos.get(FORK) is None
    with repos.checkout(origin.pull(), token) as checkout:
        assert git(checkout.path, "rev-parse", "HEAD") == origin.head


def test_a_head_force_pushed_but_still_on_the_server_is_fetched_by_its_id(origin, repos):
    old = origin.head
    origin.push_head({"docs/usage.md": "rewritten\n"}, force=True)  # `old` stays, unreachable, on the server
    with repos.checkout(origin.pull(head_sha=old), token) as checkout:
        assert git(checkout.path, "rev-parse", "HEAD") == old
        assert any("force-pushed" in note and "fetched by its id" in note for note in checkout.notes)


def test_a_refused_token_is_renewed_once(origin, repos):
    asked = []

    def renewing(fresh: bool = False) -> str:
        asked.append(fresh)
        return TOKEN if fresh else "ghs_expiredToken0123456789abcdef"

    with repos.checkout(origin.pull(), renewing):
        pass
    assert asked[:2] == [False, True]


def test_a_closed_pull_requests_ref_leaves_the_mirror(origin, repos):
    with repos.checkout(origin.pull(), token) as checkout:
        pass
    assert git(checkout.mirror, "for-each-ref", f"refs/pull/{PR}/head")
    repos.forget_pull(UPSTREAM, PR)
    assert git(checkout.mirror, "for-each-ref", f"refs/pull/{PR}/head") == ""


def test_the_worktree_of_a_run_that_died_is_pruned_and_a_live_one_is_not(origin, repos, tmp_path):
    # a worker process that dies (os._exit, no cleanup) in the middle of its run
    script = f"""
import os, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from tasks.repos import Repos, FetchPolicy, PullRefs
repos = Repos({str(tmp_path / 'data')!r}, {origin.double.url!r}, FetchPolicy(reserve_bytes=0))
with repos.checkout(PullRefs({UPSTREAM!r}, {PR}, {origin.head!r}, "main", {origin.base!r}), lambda fresh: {TOKEN!r}) as c:
    print(c.path, flush=True)
    os._exit(3)
"""
    died = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert died.returncode == 3, died.stderr
    dead = Path(died.stdout.strip())
    assert dead.is_dir()
    with repos.checkout(origin.pull(), token) as live:
        assert not dead.exists()  # the next checkout pruned it
        other = Repos(tmp_path / "data", origin.double.url, FetchPolicy(reserve_bytes=0))
        assert other.prune() == [] and live.path.is_dir()  # a run in progress is left alone
    assert worktrees(repos) == []
    assert git(live.mirror, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_a_mirror_over_its_cap_is_made_again_when_no_run_uses_it(origin, tmp_path):
    repos = Repos(tmp_path / "data", origin.double.url, FetchPolicy(reserve_bytes=0, mirror_max_bytes=1))
    with repos.checkout(origin.pull(), token) as checkout:
        created = json.loads((checkout.mirror / "etriage-mirror.json").read_text())["created"]
        marker = checkout.mirror / "objects" / "etriage-test-marker"
        marker.write_text("x")
    with repos.checkout(origin.pull(), token) as again:
        assert not marker.exists()
        assert json.loads((again.mirror / "etriage-mirror.json").read_text())["created"] != created
        assert gitio.show(again.path, origin.head, "README.md") == b"ExecuTorch\n"


def test_merge_base_for_ci_fetches_without_a_worktree(origin, repos):
    assert repos.merge_base(origin.pull(), token) == origin.base
    assert worktrees(repos) == []
    mirror = repos.mirror_path(UPSTREAM)
    listed = git(mirror, "rev-list", "--objects", "--no-walk", "--missing=print", origin.head)
    assert any(line.startswith("?") for line in listed.splitlines())  # no blobs were needed


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
@pytest.mark.parametrize("content, words", [
    (os.urandom(3 << 20), "out of disk ("),  # incompressible: the fetch itself hits ENOSPC
    (bytes(3 << 20), "out of disk for the worktree"),  # a tiny pack, but the checkout would not fit
])
def test_a_fetch_that_runs_out_of_disk_is_a_disk_error(origin, tmp_path, content, words):
    head = origin.push_head({"third-party/blob.bin": content})
    data = tmp_path / "small"
    data.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(data)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        repos = Repos(data, origin.double.url, FetchPolicy(reserve_bytes=0, worktree_files=True))
        with pytest.raises(FetchError) as error:
            with repos.checkout(origin.pull(head_sha=head), token):
                pass
        assert error.value.what == "disk" and words in str(error.value), error.value
        assert worktrees(repos) == []
    finally:
        subprocess.run(["umount", str(data)])


def test_the_installed_wheels_release_is_fetched_beside_the_pull_request(origin, repos):
    """The environments compare a side's native sources with the installed wheel's release
    (tasks/environments/compiled.py): its tag comes into the mirror with the pull request, from a
    release branch off main or from main's own history, and a full mirror stays full."""
    work = origin.work
    git(work, "checkout", "-q", "-b", "release/9.9", origin.first)
    release = commit(work, {"version.txt": "9.9.9\n"}, "release 9.9.9")
    git(work, "tag", "-a", "-m", "9.9.9", "v9.9.9", release)
    git(work, "tag", "v1.0.0", origin.first)
    git(work, "checkout", "-q", "main")
    for tag in ("v9.9.9", "v1.0.0"):
        origin.double.git.push(UPSTREAM, work, f"refs/tags/{tag}:refs/tags/{tag}")

    missing = "0123456789abcdef" * 2 + "01234567"
    with repos.checkout(origin.pull(references=("refs/tags/v9.9.9", missing)), token) as checkout:
        assert git(checkout.path, "rev-parse", "v9.9.9^{commit}") == release
        # its tree is readable (the native key hashes blob ids); its blobs were not asked for
        assert "version.txt" in git(checkout.path, "ls-tree", "--name-only", release)
        assert checkout.notes == []
    with repos.checkout(origin.pull(references=("refs/tags/v1.0.0",)), token) as checkout:
        assert git(checkout.path, "rev-parse", "v1.0.0^{commit}") == origin.first
        assert git(checkout.mirror, "rev-parse", "--is-shallow-repository") == "false"
        assert git(checkout.mirror, "merge-base", origin.base, origin.head) == origin.base
    with repos.checkout(origin.pull(references=("refs/tags/v0.0.0", missing)), token) as checkout:
        [note] = checkout.notes
        assert "none of refs/tags/v0.0.0" in note and "cannot be compared" in note
