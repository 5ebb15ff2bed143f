"""The Python overlay: the installed `executorch` package with a change's files swapped in.

A symlink farm in a per-run directory: unchanged entries are symlinked wholesale, real
directories exist only along the paths of changed files, changed/added files are written
from the commit, deleted (or renamed-away) files are absent. Subprocesses get
PYTHONPATH=<overlay>; the shared venv is never written to. Building one takes
milliseconds; a copy of the 115 MB package per run would not.

Limit: `executorch` itself is a namespace package (no __init__.py), so a deleted
*top-level* module (executorch/<x>.py) can still be found in site-packages.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tasks.pipeline import gitio
from tasks.records import ChangedFile

PACKAGE = "executorch"


def installed_package_dir(python: str) -> Path:
    """Where `python` finds executorch, without importing it (one small subprocess)."""
    code = ("import importlib.util as u; s = u.find_spec('executorch'); "
            "print(list(s.submodule_search_locations)[-1])")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"})
    if out.returncode != 0 or not out.stdout.strip():
        raise RuntimeError(f"{python}: executorch is not installed ({out.stderr.strip()[-200:]})")
    return Path(out.stdout.strip())


def build_overlay(repo, commit: str, changes: list[ChangedFile], installed: Path,
                  overlay_root: Path, covers) -> tuple[Path, list[str], list[str]]:
    """Make <overlay_root>/executorch for `commit`; return (package_dir, written, removed).

    `covers(path)` says which changed files belong in the overlay (the recipe's inputs).
    """
    written = sorted({f.path for f in changes if f.status != "D" and covers(f.path)})
    removed = sorted({f.path for f in changes if f.status == "D" and covers(f.path)}
                     | {f.old_path for f in changes if f.status == "R" and f.old_path
                        and covers(f.old_path)})
    real_dirs = set()
    for path in written + removed:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            real_dirs.add("/".join(parts[:i]))
    package_dir = overlay_root / PACKAGE
    package_dir.mkdir(parents=True)
    skip = set(written) | set(removed)
    _farm(installed, package_dir, "", real_dirs, skip)
    for path in written:
        dest = package_dir / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(gitio.show(repo, commit, path))
    return package_dir, written, removed


def _farm(src: Path, dst: Path, rel: str, real_dirs: set[str], skip: set[str]) -> None:
    with os.scandir(src) as entries:
        for entry in entries:
            entry_rel = f"{rel}/{entry.name}" if rel else entry.name
            if entry_rel in skip:
                continue
            if entry_rel in real_dirs and entry.is_dir():
                (dst / entry.name).mkdir()
                _farm(Path(entry.path), dst / entry.name, entry_rel, real_dirs, skip)
            elif entry.name == "__pycache__" and rel in real_dirs:
                # stale for the changed modules of this directory; let Python compile
                continue
            else:
                os.symlink(entry.path, dst / entry.name)


def module_name(path: str) -> str | None:
    """exir/backend/backend_api.py -> executorch.exir.backend.backend_api"""
    if not path.endswith(".py"):
        return None
    parts = path[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join([PACKAGE, *parts])


def verify_overlay(python: str, env: dict[str, str], package_dir: Path, modules: list[str],
                   cwd: Path) -> tuple[list[str], str]:
    """(modules that do not resolve into the overlay, import error text or "").

    An import error is the change's own business (its tests will show it), not the overlay's.
    """
    if not modules:
        return [], ""
    code = ("import importlib.util, sys\n"
            "for name in sys.argv[1:]:\n"
            "    spec = importlib.util.find_spec(name)\n"
            "    print(name, spec.origin if spec else None)\n")
    proc = subprocess.run([python, "-c", code, *modules], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [], f"could not verify the overlay, importing failed: {last}"
    problems = []
    root = str(package_dir.parent)
    for line in proc.stdout.splitlines():
        name, _, origin = line.partition(" ")
        if not origin.startswith(root):
            problems.append(f"{name} resolves to {origin}, not into the overlay")
    return problems, ""
