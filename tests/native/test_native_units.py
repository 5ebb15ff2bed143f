"""The parts of a native rebuild that need no compiler: the persistent checkout moved from
commit to commit, the build folder's identity check, compiler paths made repository-relative,
the host-native target's place in the plan."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tasks.pipeline import native
from tasks.pipeline.plan import plan_change
from tasks.pipeline.sandbox import Sandbox
from tasks.pipeline.tables import load_tables
from tests.native.conftest import git

SRC = Path("/data/native/abc/src/executorch")
CONFIGURE = ["cmake", "-S", str(SRC), "-B", "/b", "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
             "-DEXECUTORCH_BUILD_PORTABLE_OPS=ON", "-DEXECUTORCH_BUILD_CPUINFO=OFF"]
GOOD_CACHE = (f"# This is the CMakeCache file.\n//comment\nCMAKE_HOME_DIRECTORY:INTERNAL={SRC}\n"
              "CMAKE_BUILD_TYPE:STRING=Release\nEXECUTORCH_BUILD_PORTABLE_OPS:BOOL=ON\n"
              "EXECUTORCH_BUILD_CPUINFO:BOOL=OFF\n")


@pytest.mark.parametrize("cache,configure,why", [
    (GOOD_CACHE, CONFIGURE, ""),
    (GOOD_CACHE.replace(str(SRC), "/elsewhere/executorch"), CONFIGURE, "another source directory"),
    (GOOD_CACHE.replace("CPUINFO:BOOL=OFF", "CPUINFO:BOOL=ON"), CONFIGURE,
     "another recipe flag: EXECUTORCH_BUILD_CPUINFO=ON"),
    (GOOD_CACHE, CONFIGURE + ["-DEXECUTORCH_BUILD_XNNPACK=ON"], "without EXECUTORCH_BUILD_XNNPACK"),
    (GOOD_CACHE, CONFIGURE + ["-DCMAKE_TOOLCHAIN_FILE=/t/aarch64.cmake"], "another toolchain"),
    (GOOD_CACHE + "CMAKE_TOOLCHAIN_FILE:FILEPATH=/t/aarch64.cmake\n", CONFIGURE, "another toolchain"),
    (GOOD_CACHE + "this line is garbage\n", CONFIGURE, "does not parse"),
    (None, CONFIGURE, "no CMakeCache.txt"),
], ids=["same", "source-dir", "flag", "missing-flag", "toolchain-wanted", "toolchain-had", "corrupt", "no-cache"])
def test_a_foreign_or_corrupt_build_folder_is_detected(tmp_path, cache, configure, why):
    build = tmp_path / "build"
    build.mkdir()
    (build / "build.ninja").write_text("")
    if cache is not None:
        (build / "CMakeCache.txt").write_text(cache)
    reason = native.foreign_reason(build, SRC, configure)
    assert (why in reason and reason) if why else reason == "", reason


def test_an_unfinished_configure_is_not_reused(tmp_path):
    (tmp_path / "CMakeCache.txt").write_text(GOOD_CACHE)
    assert "never finished" in native.foreign_reason(tmp_path, SRC, CONFIGURE)


def test_the_checkout_moves_by_writing_only_what_differs(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for name, text in {"a.cpp": "int a;\n", "b.cpp": "int b;\n", "gone.h": "x\n", "d/run.sh": "echo\n"}.items():
        (repo / name).parent.mkdir(exist_ok=True)
        (repo / name).write_text(text)
    os.chmod(repo / "d/run.sh", 0o755)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    first = git(repo, "rev-parse", "HEAD")
    (repo / "a.cpp").write_text("int a = 2;\n")
    (repo / "gone.h").unlink()
    (repo / "new.h").write_text("y\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "two")
    second = git(repo, "rev-parse", "HEAD")

    src, state = tmp_path / "src" / "executorch", tmp_path / "src.json"
    state.parent.mkdir(exist_ok=True)
    assert native.sync_checkout(repo, first, src, state) == "exported"
    assert os.access(src / "d/run.sh", os.X_OK)
    os.utime(src / "b.cpp", (1_000_000, 1_000_000))
    assert native.sync_checkout(repo, first, src, state) == "unchanged"
    assert native.sync_checkout(repo, second, src, state).startswith("2 file(s) written, 1 removed")
    assert (src / "a.cpp").read_text() == "int a = 2;\n" and (src / "new.h").is_file() and not (src / "gone.h").exists()
    assert (src / "b.cpp").stat().st_mtime == 1_000_000  # untouched: the build system keeps its object
    # back to the first commit, by diff as well
    assert native.sync_checkout(repo, first, src, state).startswith("2 file(s) written, 1 removed")
    assert (src / "gone.h").read_text() == "x\n" and not (src / "new.h").exists()
    # a sync that died half-way (or a state from elsewhere) exports everything again
    state.write_text('{"commit": "%s", "complete": false}' % first)
    assert native.sync_checkout(repo, second, src, state) == "exported"
    state.write_text("not json")
    assert native.sync_checkout(repo, second, src, state) == "exported"


def test_a_reused_folder_is_configured_again_when_the_recipes_files_come_or_go(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")

    def commit(message: str, write: dict[str, str] | None = None, remove: tuple[str, ...] = ()) -> str:
        for name, text in (write or {}).items():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_text(text)
        for name in remove:
            (repo / name).unlink()
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "--allow-empty", "-m", message)
        return git(repo, "rev-parse", "HEAD")

    recipe = load_tables().recipes["portable"]
    first = commit("one", {"CMakeLists.txt": "project(x)\n", "kernels/portable/cpu/op_a.cpp": "int a;\n"})
    edited = commit("edit", {"kernels/portable/cpu/op_a.cpp": "int a = 1;\n"})
    docs = commit("docs", {"docs/kernels.md": "# kernels\n"})
    added = commit("add", {"kernels/portable/cpu/op_b.cpp": "int b;\n", "kernels/portable/cpu/op_c.cpp": "int c;\n"})
    removed = commit("remove", remove=("kernels/portable/cpu/op_a.cpp",))

    assert native.layout_change(repo, first, first, recipe) == ""
    assert native.layout_change(repo, first, edited, recipe) == ""  # the same files: ninja rebuilds it
    assert native.layout_change(repo, first, docs, recipe) == ""  # not an input of the recipe
    assert native.layout_change(repo, docs, added, recipe) == \
        f"files added or removed since {docs[:12]}: kernels/portable/cpu/op_b.cpp and 1 more"
    assert "kernels/portable/cpu/op_a.cpp" in native.layout_change(repo, added, removed, recipe)
    assert "op_a.cpp" in native.layout_change(repo, removed, first, recipe)  # and back
    for unknown in ("", "not a sha", "f" * 40):
        assert native.layout_change(repo, unknown, first, recipe) == "the commit its configure saw is not known"


@pytest.mark.parametrize("built,wanted", [
    (["_C.cpython-311-x86_64-linux-gnu.so"], ["_C.cpython-311-x86_64-linux-gnu.so"]),  # main since #21816
    (["_portable_lib.cpython-311-x86_64-linux-gnu.so"], ["_portable_lib.cpython-311-x86_64-linux-gnu.so"]),  # 1.4
    (["_C.abi3.so", "_portable_lib.abi3.so"], ["_C.abi3.so"]),  # the first alternative wins
    (["_Cx.txt", "portable_lib.so"], []),
], ids=["renamed", "release", "both", "neither"])
def test_an_artifact_may_name_alternatives_for_a_module_the_sources_renamed(tmp_path, built, wanted):
    """The pybind recipe keeps ExecuTorch's pybindings under whichever name the commit's CMake
    gives them: a build of today's main leaves `_C*.so`, which a fixed `_portable_lib*.so` made
    a failed environment for every pull request on it."""
    for name in built:
        (tmp_path / name).write_bytes(b"\x7fELF")
    entry = next(a for a in load_tables().recipes["pybind"].artifacts if "_portable_lib" in a)
    assert [p.name for p in native.artifact_files(tmp_path, entry)] == wanted
    assert native.artifact_files(tmp_path, "kernels/quantized/libquantized_ops_aot_lib.so") == []  # a path: it must exist


def test_compiler_messages_name_repository_paths():
    text = ("../../src/executorch/kernels/portable/cpu/op_add.cpp:27:3: error: 'x' was not declared\n"
            f"{SRC}/runtime/core/evalue.cpp:1:1: error: y\n"
            "In file included from ../../../../../../src/executorch/third-party/flatbuffers/include/a.h:3:\n")
    assert native.relative_paths(text, SRC).splitlines() == [
        "kernels/portable/cpu/op_add.cpp:27:3: error: 'x' was not declared",
        "runtime/core/evalue.cpp:1:1: error: y",
        "In file included from third-party/flatbuffers/include/a.h:3:"]


def test_the_aarch64_toolchain_is_a_cmake_toolchain_file(tmp_path):
    args = native.TOOLCHAINS["aarch64-linux-gnu"].cmake_args(tmp_path)
    [arg] = args
    path = Path(arg.split("=", 1)[1])
    assert arg.startswith("-DCMAKE_TOOLCHAIN_FILE=") and "aarch64-linux-gnu-g++" in path.read_text()
    assert native.TOOLCHAINS["host"].cmake_args(tmp_path) == []


def test_host_native_is_planned_only_with_a_native_change(tmp_path):
    repo = tmp_path / "repo"
    (repo / "kernels/portable/cpu").mkdir(parents=True)
    (repo / "exir").mkdir()
    (repo / "kernels/portable/cpu/op_add.cpp").write_text("int a;\n")
    (repo / "exir/memory.py").write_text("X = 1\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    for name, path in (("cpp", "kernels/portable/cpu/op_add.cpp"), ("py", "exir/memory.py")):
        git(repo, "checkout", "-q", "-B", name, "main")
        (repo / path).write_text((repo / path).read_text() + "\n// touched\n" if name == "cpp" else "X = 2\n")
        git(repo, "commit", "-q", "-a", "-m", name)
    git(repo, "checkout", "-q", "main")
    tables = load_tables()

    cpp = plan_change(repo, "main", "cpp", tables, suites=["probes"])
    assert cpp.recipes == ["portable"] and "host-native" in cpp.targets
    py = plan_change(repo, "main", "py", tables, suites=["probes"])
    assert "host-native" not in py.targets and any("host-native not needed" in n for n in py.notes)
    # asked for by name it stays, and says itself why it has nothing to run
    assert "host-native" in plan_change(repo, "main", "py", tables, suites=["probes"], targets=["host-native"]).targets
    # an automatic run's default targets (the service) are not asked for by name: left out, with a note
    automatic = plan_change(repo, "main", "py", tables, suites=["probes"], targets=["host", "host-native"],
                            targets_named=False)
    assert automatic.targets == ["host"] and any("host-native not needed" in n for n in automatic.notes)
    assert "host-native" in plan_change(repo, "main", "cpp", tables, suites=["probes"],
                                        targets=["host", "host-native"], targets_named=False).targets


def test_a_recipe_whose_sdk_is_missing_is_reported_not_run(tmp_path):
    spec = native.BuildSpec(tmp_path, tmp_path / "data", tmp_path / "run", "python", Sandbox(), tool_env=())
    built, failures = native.build(spec, load_tables().recipes["qnn"], "0" * 40, lambda *a, **k: [])
    assert (built.status, failures) == ("not_run", [])
    assert built.summary() == "qnn (host): not run (needs QNN_SDK_ROOT, ANDROID_NDK_ROOT on this worker)"
    assert not (tmp_path / "data").exists()  # nothing was checked out or built


def test_the_summary_says_what_was_compiled_and_what_came_from_the_cache():
    built = native.NativeBuild("portable", "host", "a" * 40, "ok", steps={"checkout": 0.1, "build": 3.25},
                               compiled=["kernels/portable/cpu/op_add.cpp"], from_ccache=["x.cpp", "y.cpp"])
    assert built.summary() == ("portable (host) at aaaaaaaaaaaa: ok (checkout 0.1 s, build 3.2 s, compiler cache "
                               "2/3 hits; compiled kernels/portable/cpu/op_add.cpp)")


def test_submodules_come_from_the_clones_own_checkout(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    git(lib, "init", "-q", "-b", "main")
    (lib / "lib.h").write_text("v1\n")
    git(lib, "add", "-A")
    git(lib, "commit", "-q", "-m", "v1")
    v1 = git(lib, "rev-parse", "HEAD")
    (lib / "lib.h").write_text("v2\n")
    git(lib, "commit", "-q", "-a", "-m", "v2")
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.cpp").write_text("int a;\n")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "third-party/lib")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "with lib at v2")
    at_v2 = git(repo, "rev-parse", "HEAD")
    git(repo / "third-party/lib", "checkout", "-q", v1)
    git(repo, "add", "third-party/lib")
    git(repo, "commit", "-q", "-m", "lib back to v1")
    at_v1 = git(repo, "rev-parse", "HEAD")

    src, state = tmp_path / "src" / "executorch", tmp_path / "src.json"
    assert native.sync_checkout(repo, at_v2, src, state) == "exported"
    assert (src / "third-party/lib/lib.h").read_text() == "v2\n" and (src / "a.cpp").is_file()
    assert native.sync_checkout(repo, at_v1, src, state).endswith("1 submodule(s) moved")
    assert (src / "third-party/lib/lib.h").read_text() == "v1\n"
    # the submodule's commit is part of the build key
    recipe = load_tables().recipes["portable"]
    assert native.build_key(repo, recipe, native.TOOLCHAINS["host"], at_v2) != \
        native.build_key(repo, recipe, native.TOOLCHAINS["host"], at_v1)
