"""The rebuild stage: the overlay over the real installed package, and a CMake recipe on a
tiny real C++ project (real cmake + g++) whose compile error the engine classifies."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tasks.pipeline.build import Workspace, build_commit
from tasks.pipeline.plan import plan_change
from tasks.pipeline.run import TriageOptions, triage
from tasks.pipeline.tables import DEFAULT_DIR, load_tables
from tasks.records import ChangedFile
from triage_rules import classify_text


def test_overlay_swaps_in_changed_files_without_touching_the_installed_package(et_repo, installed, tmp_path):
    def edit(repo: Path):
        api = repo / "exir/backend/backend_api.py"
        api.write_text(api.read_text() + "\nETRIAGE_OVERLAY_MARK = 1\n")
        (repo / "exir/backend/test/test_utils.py").unlink()
        (repo / "exir/backend/brand_new.py").write_text("VALUE = 7\n")

    head = et_repo.branch("overlay", edit=edit)
    tables = load_tables()
    plan = plan_change(et_repo.path, "main", head, tables)
    ws = Workspace(repo=et_repo.path, python=sys.executable, installed=installed,
                   run_dir=tmp_path / "run", data_dir=tmp_path / "data")
    before = (installed / "exir/backend/backend_api.py").stat().st_mtime
    result = build_commit(ws, tables, head, plan.changed_files, plan.recipes, classify_text)

    assert result.status == "ok", result.reason
    pkg = Path(result.package_dir)
    assert (pkg / "exir/backend/backend_api.py").is_file() and not (pkg / "exir/backend/backend_api.py").is_symlink()
    assert "ETRIAGE_OVERLAY_MARK" in (pkg / "exir/backend/backend_api.py").read_text()
    assert (pkg / "exir/backend/brand_new.py").read_text() == "VALUE = 7\n"
    assert not (pkg / "exir/backend/test/test_utils.py").exists()
    # unchanged entries are symlinks into the installed package, real dirs only on the path
    assert (pkg / "kernels").is_symlink() and (pkg / "exir/backend/test/test_passes.py").is_symlink()
    assert not (pkg / "exir").is_symlink()
    assert (installed / "exir/backend/test/test_utils.py").exists()
    assert (installed / "exir/backend/backend_api.py").stat().st_mtime == before
    # small: a farm of links, not a 100 MB copy
    size = sum(f.stat().st_size for f in pkg.rglob("*") if f.is_file() and not f.is_symlink()
               and not any(p.is_symlink() for p in f.parents))
    assert size < 1_000_000


def _cpp_repo(gitkit, root: Path) -> Path:
    repo = gitkit.init_repo(root / "native")
    (repo / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.10)\nproject(tiny CXX)\n"
                                         "add_library(tiny runtime/core/tiny.cpp)\n")
    (repo / "runtime/core").mkdir(parents=True)
    (repo / "runtime/core/tiny.cpp").write_text("int tiny_add(int a, int b) { return a + b; }\n")
    gitkit.commit_all(repo, "base")
    gitkit.git(repo, "checkout", "-q", "-b", "broken")
    (repo / "runtime/core/tiny.cpp").write_text(
        "int tiny_add(int a, int b) {\n  return a + undefined_value;\n}\n")
    gitkit.commit_all(repo, "break the build")
    gitkit.git(repo, "checkout", "-q", "main")
    return repo


def _tables_with_tiny_recipe(tmp_path: Path) -> Path:
    tables = tmp_path / "tables"
    shutil.copytree(DEFAULT_DIR, tables)
    recipes = tables / "recipes.yaml"
    recipes.write_text(
        "recipes:\n"
        "  overlay:\n    kind: overlay\n    inputs: ['*.py']\n"
        "  cmake-host:\n    kind: cmake\n    backends: [portable, xnnpack]\n"
        "    inputs: ['*.cpp', '*.h', '*CMakeLists.txt']\n"
        "    commands:\n"
        "      - [cmake, -S, '{src}', -B, '{build}', -DCMAKE_BUILD_TYPE=Release]\n"
        "      - [cmake, --build, '{build}', -j, '{jobs}']\n")
    return tables


@pytest.mark.skipif(not shutil.which("cmake") or not shutil.which("g++"), reason="needs cmake and g++")
def test_cmake_recipe_builds_caches_and_classifies_a_compile_error(gitkit, tmp_path, installed):
    repo = _cpp_repo(gitkit, tmp_path)
    tables = load_tables(_tables_with_tiny_recipe(tmp_path))
    data_dir = tmp_path / "data"
    change = [ChangedFile("runtime/core/tiny.cpp", "M")]

    def workspace(name):
        return Workspace(repo=repo, python=sys.executable, installed=installed,
                         run_dir=tmp_path / name, data_dir=data_dir)

    first = build_commit(workspace("run1"), tables, "main", change, ["cmake-host"], classify_text)
    assert first.status == "ok" and first.cache_hits == []
    assert Path(first.build_dirs["cmake-host"]).parent == data_dir / "build-cache"
    second = build_commit(workspace("run2"), tables, "main", change, ["cmake-host"], classify_text)
    assert second.status == "ok" and second.cache_hits == ["cmake-host"]

    broken = build_commit(workspace("run3"), tables, "broken", change, ["cmake-host"], classify_text)
    assert broken.status == "failed"
    assert broken.failures and broken.failures[0].category == "build_failure"
    assert "tiny.cpp:2" in broken.failures[0].line and "undefined_value" in broken.failures[0].line
    # a failed build never lands in the cache
    assert len([p for p in (data_dir / "build-cache").iterdir() if p.is_dir()]) == 1

    # the whole pipeline: a broken head build is a `new` build_failure pointing at the file
    report = triage(TriageOptions(repo=repo, base="main", head="broken", data_dir=data_dir,
                                  tables_dir=tmp_path / "tables", installed=installed,
                                  targets=["host"])).to_dict()
    assert report["build"]["status"] == "failed"
    [verdict] = report["results"]
    assert (verdict["verdict"], verdict["failure"]["category"]) == ("new", "build_failure")
    assert verdict["suspects"][0]["path"] == "runtime/core/tiny.cpp"
    assert not os.listdir(data_dir / "runs")  # the run's directory is gone
