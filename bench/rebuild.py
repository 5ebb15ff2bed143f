"""Native rebuild times per recipe: cold, warm compiler cache with a fresh build folder,
incremental one-file change, comment-only change; with the compiler cache's hit rate.

    .venv/bin/python bench/rebuild.py [--recipe portable] [--recipe xnnpack] [--cold]
                                      [--data-dir DIR] [--jobs 2]

Builds ExecuTorch v1.4.1's sources (../shared/executorch-src/) through tasks.pipeline.native,
in the sandbox, exactly as a triage does. Without --cold the compiler cache of DATA_DIR is
reused (default ~/.cache/etriage/bench-native): the first run of a machine is cold anyway.
Goals (issue 11): incremental one-file change <= 10 s, warm fresh folder <= 60 s, cold within
2x the sources' README (minimal 240 s, XNNPACK 339 s).
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

from tasks.pipeline import native  # noqa: E402
from tasks.pipeline.sandbox import Sandbox  # noqa: E402
from tasks.pipeline.tables import load_tables  # noqa: E402
from triage_rules import classify_text  # noqa: E402

TARBALL = ROOT.parent / "shared" / "executorch-src" / "executorch-v1.4.1-src.tar.xz"
GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "bench@example.invalid", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
# recipe -> (file changed by the incremental step, the text replaced, its replacement)
CHANGES = {
    "portable": ("kernels/portable/cpu/op_add.cpp", "  // Resize\n", "  // Resize\n  (void)out;\n"),
    "xnnpack": ("backends/xnnpack/runtime/XNNCompiler.cpp", "namespace delegate {\n",
                "namespace delegate {\n[[maybe_unused]] static int etriage_bench = 1;\n"),
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=GIT_ENV).stdout.strip()


def commit_edit(repo: Path, rel: str, old: str, new: str, message: str) -> str:
    path = repo / rel
    text = path.read_text()
    path.write_text(text.replace(old, new, 1))
    git(repo, "commit", "-q", "-a", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def measure(spec, recipe, commit, label: str) -> dict:
    start = time.monotonic()
    built, failures = native.build(spec, recipe, commit, classify_text)
    seconds = time.monotonic() - start
    if built.status != "ok":
        raise SystemExit(f"{label}: {built.reason}\n{built.log[-3000:]}")
    hits, total = len(built.from_ccache), len(built.from_ccache) + len(built.compiled)
    rate = f"{hits}/{total} ({100 * hits / total:.0f}%)" if total else "-"
    print(f"{recipe.name:9} {label:28} {seconds:7.1f} s   compiled {len(built.compiled):4}   "
          f"compiler cache hits {rate:14} steps {built.steps}", flush=True)
    return {"seconds": seconds, "compiled": len(built.compiled), "hits": hits}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", action="append", dest="recipes")
    parser.add_argument("--cold", action="store_true", help="start from an empty compiler cache (minutes)")
    parser.add_argument("--data-dir", type=Path, default=Path.home() / ".cache" / "etriage" / "bench-native")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    tables = load_tables()
    recipes = [tables.recipes[name] for name in args.recipes or ["portable"]]
    with tempfile.TemporaryDirectory(prefix="rebuild-bench-") as tmp:
        tmp = Path(tmp)
        with tarfile.open(TARBALL) as tar:
            tar.extractall(tmp, filter="data")
        repo = tmp / "executorch"
        git(repo, "init", "-q", "-b", "main")
        git(repo, "add", "-A", "--force")  # the release tree tracks files its .gitignore names (build/)
        git(repo, "commit", "-q", "-m", "v1.4.1")
        base = git(repo, "rev-parse", "HEAD")
        if args.cold:
            shutil.rmtree(native.native_dir(args.data_dir) / "ccache", ignore_errors=True)
        for recipe in recipes:
            rel, old, new = CHANGES[recipe.name]
            git(repo, "checkout", "-q", "-B", f"bench-{recipe.name}", base)
            one_file = commit_edit(repo, rel, old, new, "one file")
            # a comment on an existing line: same preprocessed source, the compiler cache answers
            comment = commit_edit(repo, rel, new, new.replace("\n", " // bench\n", 1), "comment only")
            spec = native.BuildSpec(repo, args.data_dir, tmp / "run", sys.executable, Sandbox(), jobs=args.jobs,
                                    use_cache=False)
            rid = native.repo_id(repo, base)
            folder = native.native_dir(args.data_dir) / rid / "build" / f"{recipe.name}-host"
            shutil.rmtree(folder, ignore_errors=True)
            measure(spec, recipe, base, "cold" if args.cold else "fresh folder, warm cache")
            if args.cold:
                shutil.rmtree(folder)
                measure(spec, recipe, base, "fresh folder, warm cache")
            measure(spec, recipe, one_file, f"incremental: {Path(rel).name}")
            measure(spec, recipe, comment, "incremental: comment only")
            measure(spec, recipe, comment, "nothing changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
