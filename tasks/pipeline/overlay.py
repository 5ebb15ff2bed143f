"""The Python overlay: the installed `executorch` package with a change's files swapped in.

One way a tree is laid, no longer the rebuild itself: a triage runs each side on its commit's
whole environment (tasks/environments/, which lays with `farm` too); the overlay remains for a
regression patch over the installed package (tests/probes) and the mutation benchmark, whose
mutants are one file over the installed package by construction.

A symlink farm in a per-run directory: unchanged entries are symlinked wholesale, real
directories exist only along the paths of changed files, changed/added files are written
from the commit, deleted (or renamed-away) files are absent. Subprocesses get
PYTHONPATH=<overlay>; the shared venv is never written to. Building one takes
milliseconds; a copy of the 115 MB package per run would not.

Limit: `executorch` itself is a namespace package (no __init__.py), so a deleted
*top-level* module (executorch/<x>.py) can still be found in site-packages.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from tasks.pipeline import gitio, treepaths
from tasks.pipeline.sandbox import Sandbox, run_logged, scrubbed_env
from tasks.records import ChangedFile

PACKAGE = "executorch"


def installed_package_dir(python: str, sandbox: Sandbox | None = None, scratch: Path | None = None) -> Path:
    """Where `python` finds executorch, without importing it: in this process when `python`
    is this interpreter, else one small sandboxed subprocess (no code of a change is in it,
    but it is still an interpreter of the worker's choosing running with the worker's files)."""
    if Path(python).absolute() == Path(sys.executable).absolute():
        spec = importlib.util.find_spec(PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"{python}: executorch is not installed")
        return Path(list(spec.submodule_search_locations)[-1])
    scratch = scratch or Path.home()
    code = ("import importlib.util as u; s = u.find_spec('executorch'); "
            "print('FOUND=' + list(s.submodule_search_locations)[-1])")
    done = run_logged([python, "-c", code], cwd=Path("/"), env=scrubbed_env(scratch, sandbox=sandbox, python=python),
                      log_path=scratch / "find-executorch.log", timeout=120, sandbox=sandbox, python=python)
    found = [line[6:] for line in done.tail().splitlines() if line.startswith("FOUND=")]
    if done.returncode != 0 or not found:
        raise RuntimeError(f"{python}: executorch is not installed ({done.tail(200).strip()})")
    return Path(found[-1])


def build_overlay(repo, commit: str, changes: list[ChangedFile], installed: Path,
                  overlay_root: Path, covers) -> tuple[Path, list[str], list[str]]:
    """Make <overlay_root>/executorch for `commit`; return (package_dir, written, removed).

    `covers(path)` says which changed files belong in the overlay (the recipe's inputs).
    """
    written = sorted({f.path for f in changes if f.status != "D" and covers(f.path)})
    removed = sorted({f.path for f in changes if f.status == "D" and covers(f.path)}
                     | {f.old_path for f in changes if f.status == "R" and f.old_path
                        and covers(f.old_path)})
    files = {path: gitio.show(repo, commit, path) for path in written}
    return lay_overlay(installed, overlay_root, files, removed), written, removed


def lay_overlay(installed: Path, overlay_root: Path, files: dict[str, bytes],
                removed: list[str] = ()) -> Path:
    """Make <overlay_root>/executorch: the installed package with `files` (package-relative
    path -> content) written in and `removed` absent; return the package directory. The
    pipeline gives a commit's files; tests/probes give a regression patch's. Every path is a
    change's data: UnsafePath for one that cannot be a file name, before anything is made."""
    treepaths.checked_all([*files, *removed])
    real_dirs = set()
    for path in [*files, *removed]:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            real_dirs.add("/".join(parts[:i]))
    package_dir = overlay_root / PACKAGE
    package_dir.mkdir(parents=True)
    farm(installed, package_dir, "", real_dirs, set(files) | set(removed))
    for path, content in files.items():
        treepaths.replace_target(package_dir, path).write_bytes(content)
    return package_dir


def farm(src: Path, dst: Path, rel: str, real_dirs: set[str], skip: set[str]) -> None:
    """Symlink `src`'s entries into `dst`, descending (real directories) only into `real_dirs`
    and leaving out `skip` (package-relative paths)."""
    with os.scandir(src) as entries:
        for entry in entries:
            entry_rel = f"{rel}/{entry.name}" if rel else entry.name
            if entry_rel in skip:
                continue
            if entry_rel in real_dirs and entry.is_dir():
                (dst / entry.name).mkdir()
                farm(Path(entry.path), dst / entry.name, entry_rel, real_dirs, skip)
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


def verify_overlay(ws, env: dict[str, str], overlay_root: Path, package_dir: Path,
                   modules: list[str], readable=()) -> tuple[list[str], str]:
    """(modules that do not resolve into the overlay, import error text or "").

    An import error is the change's own business (its tests will show it), not the overlay's.
    """
    if not modules:
        return [], ""
    code = ("import importlib.util, sys\n"
            "for name in sys.argv[1:]:\n"
            "    spec = importlib.util.find_spec(name)\n"
            "    print(name, spec.origin if spec else None)\n")
    done = run_logged([ws.python, "-c", code, *modules], cwd=overlay_root, env=env,
                      log_path=ws.run_dir / "logs" / f"verify-{overlay_root.name}.log", timeout=300,
                      sandbox=ws.sandbox, python=ws.python, readable=[overlay_root, *readable])
    lines = done.tail(200000).splitlines()[1:]  # the first line echoes the command
    if done.returncode != 0:
        last = ([line for line in lines if line.strip()] or ["no output"])[-1]
        return [], f"could not verify the overlay, importing failed: {last}"
    problems = []
    root = str(package_dir.parent)
    for line in lines:
        if not line.startswith(PACKAGE):
            continue
        name, _, origin = line.partition(" ")
        if not origin.startswith(root):
            problems.append(f"{name} resolves to {origin}, not into the overlay")
    return problems, ""
