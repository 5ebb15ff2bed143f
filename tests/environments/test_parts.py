"""The parts of a commit's environment, each on real inputs: the package map of a repository laid
out as ExecuTorch's (src/executorch's symlinks), the torch pin as torch_pin.py writes it, the
store's disk cap, and a requirement that is not one."""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from tasks.environments import layout, registry, store, torchpin
from tasks.environments import table as environments_table
from tasks.pipeline.tables import load_tables
from tasks.sample_repo import commit_all, git, init_repo

# ExecuTorch main's pyproject.toml maps the package to src/executorch; these are its entries
# (pytorch/executorch cff6f4dd32: `git ls-tree src/executorch`), a few of them.
LINKS = {"src/executorch/exir": "../../exir", "src/executorch/backends": "../../backends",
         "src/executorch/schema": "../../schema", "src/executorch/kernels/quantized": "../../../kernels/quantized",
         "src/executorch/outside": "../../../../etc"}


@pytest.fixture
def repository_layout(tmp_path) -> tuple[Path, str]:
    repo = init_repo(tmp_path / "executorch")
    files = {"exir/__init__.py": "", "exir/backend/backend_api.py": "x = 1\n", "exir/backend/backend_api.cpp": "",
             "backends/xnnpack/partition/config.yaml": "a: 1\n", "schema/program.fbs": "table P {}\n",
             "kernels/quantized/__init__.py": "", "kernels/portable/cpu/op_add.cpp": "",
             "setup.py": "", "torch_pin.py": 'TORCH_VERSION = "2.13.0"\n# NIGHTLY_VERSION = "dev20260318"\n',
             "version.txt": "1.5.0\n"}
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    for link, target in LINKS.items():
        (repo / link).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, repo / link)
    return repo, commit_all(repo, "layout")


def test_the_package_map_follows_src_executorch(repository_layout):
    repo, commit = repository_layout
    files = layout.package_files(repo, commit, environments_table())
    assert set(files) == {"exir/__init__.py", "exir/backend/backend_api.py", "backends/xnnpack/partition/config.yaml",
                          "schema/program.fbs", "kernels/quantized/__init__.py",
                          "exir/_serialize/program.fbs"}  # setup.py's copy of schema/program.fbs
    # not the package: the repository's own files, C++ sources, kernels/portable (no link), a
    # link that leaves the repository
    assert files["exir/_serialize/program.fbs"] == files["schema/program.fbs"]


def test_a_tree_without_src_executorch_is_the_package(tmp_path):
    repo = init_repo(tmp_path / "pkg")
    (repo / "exir").mkdir()
    (repo / "exir/__init__.py").write_text("")
    (repo / "include").mkdir()
    (repo / "include/x.h").write_text("")  # installed headers are compiled parts, never a tree's
    commit = commit_all(repo, "package layout")
    assert set(layout.package_files(repo, commit, environments_table())) == {"exir/__init__.py"}


def test_the_torch_pin_is_read_as_install_requirements_reads_it(repository_layout, tmp_path):
    repo, commit = repository_layout
    assert torchpin.read_pin(repo, commit, environments_table().torch_pins) == ("2.13.0", "torch_pin.py")
    (repo / "torch_pin.py").write_text('TORCH_VERSION = "2.13.0"\nNIGHTLY_VERSION = "dev20260318"\n')
    nightly = commit_all(repo, "a nightly pinned")
    assert torchpin.read_pin(repo, nightly, ("torch_pin.py",)) == ("2.13.0.dev20260318", "torch_pin.py")
    git(repo, "rm", "-q", "torch_pin.py")
    (repo / "requirements.txt").write_text("numpy\n# torch==1.0 is an old note\ntorch==2.12.1\n")
    required = commit_all(repo, "a requirement")
    assert torchpin.read_pin(repo, required, environments_table().torch_pins) == ("2.12.1", "requirements.txt")
    assert torchpin.choose("2.13.0", "torch_pin.py", "2.13.0+cpu", tmp_path, tmp_path).version == "2.13.0+cpu"
    refused = torchpin.choose("2.12.1", "requirements.txt", "2.13.0+cpu", tmp_path, tmp_path, fetch=False)
    assert refused.reason.startswith("torch 2.12.1 (pinned in requirements.txt) is not installed")


def test_a_requirement_that_is_not_pinned_is_refused_before_pip(tmp_path):
    got = registry.install("torch>=2; echo hi", tmp_path / "t", tmp_path / "log")
    assert not got.ok and "not a pinned requirement" in got.reason and not (tmp_path / "log").exists()


def test_the_store_keeps_under_its_cap_least_recently_used_first(tmp_path):
    blob = tmp_path / "blobs" / "ab" / "abcd"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"x" * 4096)
    for age, name in enumerate(["old", "used", "new"]):
        tree = tmp_path / "trees" / name / "executorch"
        tree.mkdir(parents=True)
        (tree / "big.bin").write_bytes(b"y" * (1 << 20))
        os.link(blob, tree / "shared.py")
        marker = tmp_path / "trees" / name / "laid.json"
        marker.write_text("{}")
        os.utime(marker, (time.time() - 3600 + age * 60,) * 2)
    os.utime(tmp_path / "trees" / "used" / "laid.json")  # used just now
    pruned = store.prune(tmp_path, cap_bytes=int(2.5 * (1 << 20)), keep={"new"})
    assert pruned.removed == ["trees/old"], pruned
    assert pruned.bytes_after <= 2.5 * (1 << 20) < pruned.bytes_before
    assert blob.is_file()  # still linked from the trees that stay
    store.prune(tmp_path, cap_bytes=0)
    assert not blob.exists() and not any((tmp_path / "trees").iterdir())


TINY = ("cmake_minimum_required(VERSION 3.10)\nproject(tiny CXX)\n"
        "add_library(_portable_lib_tiny SHARED tiny.cpp)\nset_target_properties(_portable_lib_tiny PROPERTIES PREFIX \"\" "
        "SUFFIX \".so\")\n")


@pytest.mark.skipif(not shutil.which("cmake") or not shutil.which("g++"), reason="needs cmake and g++")
def test_compiled_parts_built_in_the_sandbox_and_a_build_out_of_time_is_the_machines(tmp_path, installed):
    from tasks import environments
    from tasks.environments import compiled
    from tasks.pipeline.tables import Recipe

    repo = init_repo(tmp_path / "tiny")
    (repo / "CMakeLists.txt").write_text(TINY)
    (repo / "tiny.cpp").write_text("extern \"C\" int tiny(int a) { return a + 1; }\n")
    (repo / "exir").mkdir()
    (repo / "exir/__init__.py").write_text("")
    commit = commit_all(repo, "a tiny native tree")
    recipe = Recipe(name="pybind", kind="environment", inputs=("*.cpp", "*CMakeLists.txt"),
                    commands=(("cmake", "-S", "{src}", "-B", "{build}", "-G", "Ninja"), ("cmake", "--build", "{build}")),
                    artifacts=tuple(a for a in load_tables().recipes["pybind"].artifacts if "_portable_lib" in a))

    def context(timeout: float, name: str, shared: Path | None = None, recipe: Recipe = recipe):
        return environments.Context(repo=repo, python=sys.executable, installed=installed, data_dir=tmp_path / name,
                                    run_dir=tmp_path / f"run-{name}", build_timeout=timeout, recipe=recipe,
                                    shared_store=shared)

    # a build step that outlasts the limit whatever the machine's speed (a tiny configure can
    # finish inside any short limit on an idle machine)
    slow = Recipe(name="pybind", kind="environment", inputs=recipe.inputs, commands=(("sleep", "60"),),
                  artifacts=recipe.artifacts)
    late = context(1.0, "late", recipe=slow)
    choice = environments.choose_compiled(late, commit)
    assert choice.source == "built" and "cannot be compared" in choice.reason  # no wheel commit, no tag here
    env, failures = environments.environment_for(late, commit, choice=choice, check_health=False)
    assert env.status == "failed" and "wall-clock limit" in env.reason and failures == [], env.reason

    choice = environments.choose_compiled(context(600, "made"), commit)  # the key covers the recipe's commands
    made, failures = environments.environment_for(context(600, "made", tmp_path / "shared"), commit, choice=choice,
                                                  check_health=False)
    assert made.status == "ok", made.reason
    part = Path(made.compiled_dir) / "extension/pybindings/_portable_lib_tiny.so"
    assert part.is_file() and Path(made.package_dir, "extension/pybindings/_portable_lib_tiny.so").resolve() == part
    assert (Path(made.package_dir) / "exir/__init__.py").is_file()
    assert compiled.native_key(repo, commit, recipe) == made.native_key

    # a second build machine mounting the same shared store adopts the parts instead of building
    said = []
    other, _ = environments.environment_for(context(600, "second-machine", tmp_path / "shared"), commit,
                                            choice=choice, check_health=False, progress=said.append)
    assert other.status == "ok" and any("from the shared store" in line for line in said), said
    assert not (tmp_path / "second-machine" / "native").exists()  # nothing was built there
    assert (tmp_path / "shared" / "ccache").is_dir()  # ccache's remote storage, shared the same way

    # main renamed the pybindings' module (`_C`, #21816): the shipped recipe keeps it under that name
    (repo / "CMakeLists.txt").write_text(TINY.replace("_portable_lib_tiny", "_C_tiny"))
    renamed = commit_all(repo, "the module renamed, as upstream did")
    ctx = context(600, "made")
    env, _ = environments.environment_for(ctx, renamed, choice=environments.choose_compiled(ctx, renamed),
                                          check_health=False)
    assert env.status == "ok", env.reason
    assert (Path(env.compiled_dir) / "extension/pybindings/_C_tiny.so").is_file()
    assert not (Path(env.compiled_dir) / "extension/pybindings/_portable_lib_tiny.so").exists()
