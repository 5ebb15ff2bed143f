"""What a commit's environment costs (tasks/environments/, docs/ENVIRONMENTS.md): time and disk.

    .venv/bin/python bench/environments.py [--native] [--cold] [--data-dir DIR] [--jobs 2]

Always: on the sample repository (the installed package, tagged v1.4.1), a tree moved past the
wheel (tests/environments' fixture) and a Python-only change on it: laying the commit's tree,
the health check, and the same again when everything is cached (the next PR on that merge
base), with the disk each laid tree adds.
--native: on ExecuTorch v1.4.1's real sources (../shared/executorch-src plus pybind11), the
compiled parts built by the `pybind` recipe, as a triage builds them: the merge base (cold with
--cold: an empty compiler cache and build folder), a fresh build folder with the compiler cache
warm (a second machine, or the next main commit after its folder was pruned), a one-file C++
change in the kept folder, and the disk one built environment takes.
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

from tasks import environments  # noqa: E402
from tasks.environments import compiled, store  # noqa: E402
from tasks.pipeline import native  # noqa: E402
from tasks.pipeline.overlay import installed_package_dir  # noqa: E402
from tasks.sample_repo import SampleRepo, build_sample_repo  # noqa: E402

SHARED = ROOT.parent / "shared" / "executorch-src"
MOVED = ROOT / "tests" / "environments" / "fixtures" / "moved_backend_details.patch"
OP_ADD = ("kernels/portable/cpu/op_add.cpp", "  // Resize\n", "  // Resize\n  (void)out;\n")
GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "etriage", "GIT_AUTHOR_EMAIL": "etriage@example.invalid",
           "GIT_COMMITTER_NAME": "etriage", "GIT_COMMITTER_EMAIL": "etriage@example.invalid",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def make(ctx, commit: str, label: str, choice=None) -> environments.CommitEnvironment:
    start = time.monotonic()
    env, _ = environments.environment_for(ctx, commit, choice=choice)
    seconds = time.monotonic() - start
    if env.status != "ok":
        raise SystemExit(f"{label}: {env.reason}")
    print(f"{label:44} {seconds:7.1f} s   compiled: {env.compiled:8} written {env.written:5}  "
          f"healthy {env.healthy}   steps {env.steps}", flush=True)
    return env


def python_side(tmp: Path, data: Path) -> None:
    installed = installed_package_dir(sys.executable)
    sample = build_sample_repo(tmp / "sample" / "executorch", installed)
    moved = sample.branch("moved", patch=MOVED)
    repo = SampleRepo(sample.path, moved)

    def comment(path: Path) -> None:
        api = path / "exir/backend/backend_api.py"
        api.write_text("# bench\n" + api.read_text())

    head = repo.branch("python-only", edit=comment)
    ctx = environments.Context(repo=sample.path, python=sys.executable, installed=installed, data_dir=data,
                               run_dir=tmp / "run")
    base_env = make(ctx, moved, "moved merge base: lay + health (first PR)")
    make(ctx, moved, "moved merge base: cached (every next PR)")
    head_env = make(ctx, head, "Python-only change on it: lay + health")
    for env, label in ((base_env, "merge base"), (head_env, "head")):
        print(f"disk, laid tree of the {label:10}: {mib(store.disk_bytes(Path(env.root)))} "
              f"(symlinks into the wheel, {env.written} file(s) hard-linked from the blob store)")
    print(f"disk, blob store: {mib(store.disk_bytes(data / 'environments' / 'blobs'))}")


def native_git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=GIT_ENV).stdout.strip()


def native_side(tmp: Path, data: Path, cold: bool, jobs: int) -> None:
    parent = tmp / "src"
    parent.mkdir()
    with tarfile.open(SHARED / "executorch-v1.4.1-src.tar.xz") as tar:
        tar.extractall(parent, filter="data")
    repo = parent / "executorch"
    with tarfile.open(SHARED / "pybind11-d03662f0.tar.xz") as tar:
        tar.extractall(repo / "third-party", filter="data")
    native_git(repo, "init", "-q", "-b", "main")
    native_git(repo, "add", "-A", "--force")
    native_git(repo, "commit", "-q", "-m", "ExecuTorch v1.4.1 sources with pybind11")
    native_git(repo, "tag", "v1.4.1")
    base = native_git(repo, "rev-parse", "HEAD")
    rel, old, new = OP_ADD
    (repo / rel).write_text((repo / rel).read_text().replace(old, new, 1))
    native_git(repo, "commit", "-q", "-a", "-m", "one .cpp")
    one_cpp = native_git(repo, "rev-parse", "HEAD")
    installed = installed_package_dir(sys.executable)
    ctx = environments.Context(repo=repo, python=sys.executable, installed=installed, data_dir=data,
                               run_dir=tmp / "run", jobs=jobs, build_timeout=7200)
    folder = native.native_dir(data) / native.repo_id(repo, base) / "build" / "pybind-host"
    if cold:
        shutil.rmtree(native.native_dir(data) / "ccache", ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)

    def built(commit: str) -> compiled.Choice:
        return compiled.Choice("built", compiled.native_key(repo, commit, ctx.recipe), reason="bench: built")

    def forget(commit: str) -> None:  # measure the build, not the caches of earlier runs
        key = compiled.native_key(repo, commit, ctx.recipe)
        shutil.rmtree(data / "environments" / "built" / key, ignore_errors=True)
        for cached in (data / "build-cache").glob(f"pybind-host-{native.build_key(repo, ctx.recipe, native.TOOLCHAINS['host'], commit)}"):
            shutil.rmtree(cached)

    forget(base)
    env = make(ctx, base, f"merge base built ({'cold' if cold else 'kept folder, warm cache'})", built(base))
    forget(base)
    shutil.rmtree(folder, ignore_errors=True)
    make(ctx, base, "fresh build folder, warm compiler cache", built(base))
    forget(one_cpp)
    make(ctx, one_cpp, "one .cpp changed (kept folder)", built(one_cpp))
    make(ctx, one_cpp, "the same again (cached environment)", built(one_cpp))
    parts = Path(env.readable[0])
    print(f"disk, built compiled parts: {mib(store.disk_bytes(parts))}; laid tree: "
          f"{mib(store.disk_bytes(Path(env.root)))}; build folder: {mib(store.disk_bytes(folder))}; "
          f"compiler cache: {mib(store.disk_bytes(native.native_dir(data) / 'ccache'))}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--native", action="store_true", help="also build compiled parts (minutes)")
    parser.add_argument("--cold", action="store_true", help="with --native: from an empty compiler cache")
    parser.add_argument("--data-dir", type=Path, help="default: a fresh directory (Python side), "
                                                      "~/.cache/etriage/bench-environments (native side)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="environments-bench-") as tmp:
        tmp = Path(tmp)
        python_side(tmp, args.data_dir or tmp / "data")
        if args.native:
            native_side(tmp, args.data_dir or Path.home() / ".cache" / "etriage" / "bench-environments",
                        args.cold, args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
