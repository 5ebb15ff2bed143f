"""Build an overlay of the installed `executorch` package with one regression patch applied.

The overlay is a symlink farm: every entry untouched by the patch is a symlink into
site-packages; only the directories on the way to a patched file are real, and the patched
file is a real copy. Putting the overlay's parent first on PYTHONPATH makes Python import the
patched package, the way the pipeline runs a PR's Python files. __pycache__ is never linked,
so compiling a patched file cannot write into site-packages.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
REGRESSIONS = REPO_ROOT / "tasks" / "probes" / "regressions"


def installed_package() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("executorch")
    return Path(spec.submodule_search_locations[0]).resolve()


def touched_files(patch: Path) -> list[str]:
    return [line[len("+++ b/") :].split("\t")[0].strip() for line in patch.read_text().splitlines() if line.startswith("+++ b/")]


def _link_tree(src: Path, dest: Path, real_paths: set[Path]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for entry in src.iterdir():
        if entry.name == "__pycache__":
            continue
        relative = entry.relative_to(installed_package())
        target = dest / entry.name
        if relative in real_paths and entry.is_dir():
            _link_tree(entry, target, real_paths)
        elif relative in real_paths:
            shutil.copy2(entry, target)
        else:
            target.symlink_to(entry)


def build_overlay(root: Path, patch: Path) -> Path:
    """Create root/executorch with `patch` applied; return root (the PYTHONPATH entry)."""
    package = installed_package()
    real_paths: set[Path] = set()
    for name in touched_files(patch):
        path = Path(name)
        real_paths.update([path, *path.parents])
    real_paths.discard(Path("."))
    _link_tree(package, root / "executorch", real_paths)
    subprocess.run(
        ["patch", "-p1", "--forward", "--no-backup-if-mismatch", "-i", str(patch)],
        cwd=root / "executorch",
        check=True,
        capture_output=True,
        text=True,
    )
    return root


def overlay_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env["PYTHONPATH"] = str(root)
    return env


def module_file(root: Path, module: str) -> str:
    """Which file Python imports for `module` under the overlay (proves the overlay wins)."""
    result = subprocess.run(
        # executorch.exir first: some of its modules cannot be imported on their own.
        [sys.executable, "-c", f"import executorch.exir, importlib; print(importlib.import_module({module!r}).__file__)"],
        env=overlay_env(root),
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return result.stdout.strip().splitlines()[-1]


if __name__ == "__main__":
    # python tests/probes/overlay.py PATCH DEST -> prints the PYTHONPATH entry to use
    if len(sys.argv) != 3:
        sys.exit("usage: overlay.py PATCH DEST")
    print(build_overlay(Path(sys.argv[2]), Path(sys.argv[1])))
