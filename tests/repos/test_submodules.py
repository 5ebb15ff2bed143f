"""Submodules a native build reads: fetched anonymously, shallow, at the pinned commit, into a
mirror per URL, and made readable where the native source checkout looks for them
(`<worktree>/<path>`, tasks/pipeline/native.py `_export`). A submodule that cannot be fetched,
from a host that is not allowed or over a scheme that is not http(s), is a FetchError naming it."""
from __future__ import annotations

import pytest

from tasks.pipeline import native
from tasks.pipeline.plan import submodules_needed
from tasks.pipeline.tables import load_tables
from tasks.records import ChangedFile
from tasks.repos import FetchError
from tests.repos.conftest import UPSTREAM, commit, git, token

LIB = "libs/flatbuffers"


def with_submodule(origin, tmp_path, url: str, *, public: bool = True) -> str:
    """A head that pins third-party/flatbuffers (served by the double as LIB) and edits a C++
    file; its sha."""
    lib = tmp_path / "flatbuffers"
    lib.mkdir()
    git(lib, "init", "-q", "-b", "master")
    pinned = commit(lib, {"CMakeLists.txt": "project(flatbuffers)\n", "include/fb.h": "#define FB 1\n"}, "lib")
    commit(lib, {"include/fb.h": "#define FB 2\n"}, "a later lib commit (not pinned)")
    origin.double.git.create(LIB, source=lib, public=public)
    git(origin.work, "checkout", "-q", "feature")
    try:
        (origin.work / ".gitmodules").write_text(
            f'[submodule "third-party/flatbuffers"]\n\tpath = third-party/flatbuffers\n\turl = {url}\n')
        (origin.work / "runtime/core/evalue.cpp").write_text("int evalue() { return 2; }\n")
        git(origin.work, "add", ".gitmodules", "runtime/core/evalue.cpp")
        git(origin.work, "update-index", "--add", "--cacheinfo", f"160000,{pinned},third-party/flatbuffers")
        git(origin.work, "commit", "-q", "-m", "pin a lib")  # (add -A would drop the gitlink: no work tree there)
        head = git(origin.work, "rev-parse", "HEAD")
    finally:
        git(origin.work, "checkout", "-q", "-f", "main")
    origin.double.git.push("contrib/executorch", origin.work, f"{head}:refs/heads/feature")
    origin.double.push(UPSTREAM, 7, head)
    return head


def test_a_pinned_submodule_is_fetched_and_the_native_checkout_exports_it(origin, repos, tmp_path):
    head = with_submodule(origin, tmp_path, "../../libs/flatbuffers.git")  # relative, as ExecuTorch's are
    with repos.checkout(origin.pull(head_sha=head), token) as checkout:
        assert checkout.fetch_submodules(head, lambda path: path.startswith("third-party/")) == \
            ["third-party/flatbuffers"]
        src = tmp_path / "src" / "executorch"
        how = native.sync_checkout(checkout.path, head, src, tmp_path / "src.json")
        assert how == "exported"
        assert (src / "third-party/flatbuffers/include/fb.h").read_text() == "#define FB 1\n"  # the pinned one
        assert not (src / "third-party/flatbuffers/.etriage-missing-submodule").exists()
        assert checkout.fetch_submodules(head, lambda path: False) == []
    lib_requests = [r for r in origin.double.requests if r.path.startswith(f"/{LIB}.git/")]
    assert lib_requests and all(r.token is None and "Authorization" not in r.headers for r in lib_requests)


@pytest.mark.parametrize("url, public, words", [
    ("../../libs/flatbuffers.git", False, "third-party/flatbuffers"),  # private: anonymous is refused
    ("../../libs/missing.git", True, "could not be fetched"),
    ("https://example.invalid/flatbuffers.git", True, "is not fetched (only http(s) from"),
    ("file:///etc/flatbuffers.git", True, "is not fetched (only http(s) from"),
])
def test_a_submodule_that_cannot_be_fetched_is_named(origin, repos, tmp_path, url, public, words):
    head = with_submodule(origin, tmp_path, url, public=public)
    with repos.checkout(origin.pull(head_sha=head), token) as checkout:
        with pytest.raises(FetchError) as error:
            checkout.fetch_submodules(head, lambda path: True)
    assert error.value.what == "submodule" and "submodule third-party/flatbuffers" in str(error.value)
    assert words in str(error.value), str(error.value)
    assert not checkout.path.exists()


@pytest.mark.parametrize("changed, wanted, not_wanted", [
    ("exir/backend/backend_api.py", None, None),  # Python only: no submodule is fetched
    ("docs/source/index.md", None, None),
    ("runtime/core/evalue.cpp", "third-party/flatbuffers", "backends/xnnpack/third-party/XNNPACK"),
    ("backends/xnnpack/runtime/XNNCompiler.cpp", "backends/xnnpack/third-party/XNNPACK", "backends/arm/third-party/x"),
])
def test_which_submodules_a_change_needs_comes_from_the_recipes_it_triggers(changed, wanted, not_wanted):
    needed = submodules_needed([ChangedFile(changed, "M")], load_tables())
    if wanted is None:
        assert needed is None
        return
    assert needed(wanted) and not needed(not_wanted)
