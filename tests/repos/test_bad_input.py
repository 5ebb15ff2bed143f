"""Each bad input of a fetch has one defined outcome: a FetchError naming what failed (the service
turns it into an environment verdict), no worktree left behind, and the next pull request is
fetched as if nothing had happened."""
from __future__ import annotations

from dataclasses import replace

import pytest

from tasks.repos import FetchError, Repos
from tests.repos.conftest import PR, UPSTREAM, commit, git, git_processes, token


def force_pushed_away(origin):
    old = origin.head
    origin.push_head({"docs/usage.md": "rewritten\n"}, force=True)
    origin.double.git.forget_unreachable(UPSTREAM)  # GitHub collected the old head
    return origin.pull(head_sha=old)


def deleted_head(origin):
    origin.double.git.delete_ref(UPSTREAM, f"refs/pull/{PR}/head")
    origin.double.git.forget_unreachable(UPSTREAM)
    return origin.pull()


def base_is_a_tag(origin):
    origin.double.git.push(UPSTREAM, origin.work, "refs/heads/main:refs/tags/v1.4.1")
    return origin.pull(base_ref="v1.4.1")


def base_commit_rewritten(origin):
    return origin.pull(base_sha="1" * 40)


BAD = {  # name -> (what makes it, policy changes, FetchError.what, words of its message)
    "force-pushed head": (force_pushed_away, {}, "head", "force-pushed"),
    "deleted head": (deleted_head, {}, "head", f"refs/pull/{PR}/head is gone"),
    "base is a tag": (base_is_a_tag, {}, "base", "is not a branch of upstream/executorch (a tag"),
    "base is no branch name": (lambda o: o.pull(base_ref="main..x"), {}, "base", "is not a branch name"),
    "base branch deleted": (lambda o: o.pull(base_ref="release/9.9"), {}, "base", "no refs/heads/release/9.9"),
    "base commit rewritten": (base_commit_rewritten, {}, "base", "no longer on main"),
    "head not a commit id": (lambda o: o.pull(head_sha="main"), {}, "head", "not a full commit id"),
    "no such repository": (lambda o: o.pull(repo="upstream/nothing"), {}, "repository", "not on the git host"),
    "out of disk (reserve)": (lambda o: o.pull(), {"reserve_bytes": 1 << 60}, "disk", "out of disk for the fetch"),
    "over the worktrees' cap": (lambda o: o.pull(), {"worktree_files": True, "worktrees_max_bytes": 10}, "disk",
                                "over the worktrees' cap"),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_input_is_a_named_fetch_error_and_the_next_pull_request_is_served(origin, tmp_path, policy, name):
    make, changes, what, words = BAD[name]
    pull = make(origin)
    repos = Repos(tmp_path / "data", origin.double.url, replace(policy, **changes))
    with pytest.raises(FetchError) as error:
        with repos.checkout(pull, token):
            pytest.fail("a bad input was checked out")
    assert error.value.what == what and words in str(error.value), str(error.value)
    assert not any((repos.root / "worktrees").glob("*"))  # nothing left behind
    # the next pull request, on a worker with its normal policy
    good = origin.push_head({"docs/next.md": "next\n"}) if name.endswith("head") else origin.head
    with Repos(tmp_path / "data", origin.double.url, policy).checkout(origin.pull(head_sha=good), token) as next_one:
        assert git(next_one.path, "rev-parse", "HEAD") == good


def test_a_refused_token_is_an_auth_error_that_names_no_token(origin, repos):
    bad = "ghs_revokedToken0123456789abcdefXYZ"
    with pytest.raises(FetchError) as error:
        with repos.checkout(origin.pull(), lambda fresh: bad):
            pass
    assert error.value.what == "auth" and "refused the installation token" in str(error.value)
    assert bad not in str(error.value)


def test_a_fetch_that_hangs_is_killed_at_the_timeout(origin, tmp_path, policy):
    hold = origin.double.hold("GET", r"/info/refs$")
    repos = Repos(tmp_path / "data", origin.double.url, replace(policy, timeout_seconds=2))
    try:
        with pytest.raises(FetchError) as error:
            with repos.checkout(origin.pull(), token):
                pass
    finally:
        hold.release()
    assert error.value.what == "timeout" and "timed out after 2 s" in str(error.value)
    assert not git_processes()  # git and git-remote-http were killed with their group
    with Repos(tmp_path / "data", origin.double.url, policy).checkout(origin.pull(), token) as checkout:
        assert checkout.head == origin.head


@pytest.mark.parametrize("deepen, found", [(1, False), (6, True)])
def test_a_merge_base_below_the_mirrors_horizon(origin, tmp_path, policy, deepen, found):
    """main: c0..c3 in 2020, c4 and c5 now; the PR branches from c0. With a 30-day horizon the
    mirror has c4..c5 and the PR's commit; deepening by 1 is not enough to meet at c0."""
    work = tmp_path / "old"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    old = [commit(work, {"a.txt": f"{n}\n"}, f"c{n}", date=f"2020-01-0{n + 1}T12:00:00Z") for n in range(4)]
    new = [commit(work, {"b.txt": f"{n}\n"}, f"c{n}") for n in (4, 5)]
    git(work, "checkout", "-q", "-b", "feature", old[0])
    head = commit(work, {"c.txt": "change\n"}, "the change")
    origin.double.git.create("upstream/old", source=work)
    origin.double.git.set_pull_head("upstream/old", 1, head)
    pull = origin.pull(repo="upstream/old", number=1, head_sha=head, base_sha=new[-1])
    repos = Repos(tmp_path / "data", origin.double.url, replace(policy, horizon_days=30, deepen_commits=deepen))
    if found:
        with repos.checkout(pull, token) as checkout:
            assert checkout.merge_base == old[0]
        return
    with pytest.raises(FetchError) as error:
        with repos.checkout(pull, token):
            pass
    assert error.value.what == "merge_base" and "older than the mirror's horizon (30 days" in str(error.value)
