"""A commit's Python tree of the package, laid whole over compiled parts.

`package_files(repo, commit, table)` maps the commit's tree to package paths: through the
symlinks of `src/executorch` (ExecuTorch's pyproject.toml: `"executorch" = "src/executorch"`,
whose entries point at the top-level directories) when the tree has it, else path for path (a
repository laid out as the package, like tasks/sample_repo.py's). Only the package's sources
count (environments.yaml's suffixes), plus setup.py's copies of repository files.

`lay(...)` makes <trees>/<key>/executorch: every entry of the compiled package (the wheel's
install, a registry wheel's, a build's) that the commit has with the same content is a symlink
(whole directories when nothing in them differs, so the wheel's bytecode is reused), every file
the commit has otherwise is a hard link to its blob in a content-addressed store, every module
the compiled package has and the commit does not is absent. Compiled parts (environments.yaml's
`compiled`) are always the compiled package's. The key hashes the file list and the compiled
package, so a tree is laid once and shared by every run and PR that needs that commit.
"""
from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from tasks.pipeline import gitio, treepaths
from tasks.pipeline.overlay import farm

PACKAGE = "executorch"
GENERATED = ("version.py",)  # setup.py writes it; a tree that lacks it gets one naming the commit


@dataclass(frozen=True)
class TreeFile:
    mode: str
    blob: str


SUBMODULE = "160000"


def package_files(repo: Path, commit: str, table) -> dict[str, TreeFile]:
    """package path -> (mode, blob) of every package source of `commit`; a submodule (whose files
    the superproject's tree does not hold) appears as its package directory with mode 160000."""
    tree = _ls_tree(repo, commit)
    mapping = _source_map(repo, tree, table.source_map)
    out: dict[str, TreeFile] = {}
    for path, entry in tree.items():
        if entry.mode == SUBMODULE:
            package_path = _to_package(path, mapping)
            if package_path:
                out[treepaths.check(package_path)] = entry
            continue
        if entry.mode not in ("100644", "100755"):
            continue
        package_path = _to_package(path, mapping)
        # compiled parts (installed headers, data/) are the compiled package's, never a tree's
        if package_path and package_path.endswith(tuple(table.package_suffixes)) \
                and not is_compiled(package_path, table):
            out[treepaths.check(package_path)] = entry
    if mapping is not None:
        for copy in table.copies:
            if copy.repo in tree and tree[copy.repo].mode.startswith("100"):
                out[treepaths.check(copy.package)] = tree[copy.repo]
    return out


def has_package(files: dict[str, TreeFile]) -> bool:
    """Does the tree hold the package at all? A repository that is not ExecuTorch (its docs, a
    downstream project) has none of its modules: it runs on the installed package as it is."""
    return any(p.endswith(".py") and f.mode != SUBMODULE for p, f in files.items())


def _ls_tree(repo: Path, commit: str) -> dict[str, TreeFile]:
    out = gitio.git(repo, "ls-tree", "-r", "-z", "--full-tree", commit)
    entries = {}
    for rec in out.split("\0"):
        if rec:
            meta, path = rec.split("\t", 1)
            mode, _, sha = meta.split()
            entries[path] = TreeFile(mode, sha)
    return entries


def _source_map(repo: Path, tree: dict[str, TreeFile], root: str) -> list[tuple[str, str]] | None:
    """[(repository prefix, package prefix)], longest first, or None: the identity."""
    prefix = root.rstrip("/") + "/"
    entries = {p: e for p, e in tree.items() if p.startswith(prefix)}
    if not entries:
        return None
    links = {p: e for p, e in entries.items() if e.mode == "120000"}
    targets = gitio.cat_blobs(repo, sorted({e.blob for e in links.values()})) if links else {}
    mapping = []
    for path, entry in entries.items():
        package_path = path[len(prefix):]
        if entry.mode == "120000":
            target = targets.get(entry.blob, b"").decode(errors="replace")
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
            try:  # a link from the tree is data: it must name a directory inside the repository
                treepaths.check(resolved)
                treepaths.check(package_path)
            except treepaths.UnsafePath:
                continue
            mapping.append((resolved + "/", package_path + "/"))
        else:
            mapping.append((path, package_path))
    return sorted(mapping, key=lambda m: -len(m[0]))


def _to_package(path: str, mapping: list[tuple[str, str]] | None) -> str | None:
    if mapping is None:
        return path
    for repo_prefix, package_prefix in mapping:
        if path == repo_prefix or (repo_prefix.endswith("/") and path.startswith(repo_prefix)):
            return package_prefix + path[len(repo_prefix):] if repo_prefix.endswith("/") else package_prefix
    return None


# ---- the compiled package's own sources, as blob ids ---------------------------------------------

def blob_id(data: bytes) -> str:
    """git's id of a blob with this content (what `git hash-object` says)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def package_index(package_dir: Path, table, cache_dir: Path) -> dict[str, str]:
    """package path -> blob id of the compiled package's source files (not its compiled parts),
    cached by (size, mtime) so a second call reads no file."""
    cache_path = cache_dir / f"{hashlib.sha256(str(package_dir).encode()).hexdigest()[:16]}.json"
    try:
        cached = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cached = {}
    index, fresh = {}, {}
    for root, dirs, files in os.walk(package_dir):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            path = Path(root) / name
            rel = path.relative_to(package_dir).as_posix()
            if not name.endswith(tuple(table.package_suffixes)) or is_compiled(rel, table):
                continue
            stat = path.stat()
            stamp = f"{stat.st_size}:{stat.st_mtime_ns}"
            known = cached.get(rel)
            sha = known[1] if known and known[0] == stamp else blob_id(path.read_bytes())
            index[rel], fresh[rel] = sha, [stamp, sha]
    if fresh != cached:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(fresh))
        os.replace(tmp, cache_path)
    return index


def is_compiled(package_path: str, table) -> bool:
    return any(fnmatchcase(package_path, pattern) for pattern in table.compiled)


# ---- laying ----------------------------------------------------------------------------------------

@dataclass
class Laid:
    root: Path  # on PYTHONPATH: holds `executorch`
    package_dir: Path
    key: str
    written: int = 0  # files the commit has otherwise than the compiled package
    removed: int = 0  # modules the compiled package has and the commit does not
    reused: bool = False  # the tree was already laid


def tree_key(files: dict[str, TreeFile], compiled_dir: Path, version: str, whole: bool = True) -> str:
    payload = json.dumps({"files": sorted((p, f.mode, f.blob) for p, f in files.items()),
                          "compiled": str(compiled_dir), "version": version, "whole": whole})
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def lay(repo: Path, commit: str, files: dict[str, TreeFile], compiled_dir: Path, compiled_index: dict[str, str],
        table, store: Path, version_py: str, whole: bool = True) -> Laid:
    """The commit's tree over `compiled_dir` under <store>/trees/<key>/ (laid once). `whole`
    False: no module of the compiled package is removed (a repository that is not the package)."""
    key = tree_key(files, compiled_dir, version_py, whole)
    root = store / "trees" / key
    package_dir = root / PACKAGE
    if (root / "laid.json").is_file():
        os.utime(root / "laid.json")  # the store's LRU reads this
        meta = json.loads((root / "laid.json").read_text())
        return Laid(root, package_dir, key, meta.get("written", 0), meta.get("removed", 0), reused=True)
    submodules = tuple(p + "/" for p, f in files.items() if f.mode == SUBMODULE)
    files = {p: f for p, f in files.items() if f.mode != SUBMODULE}
    differ = {p: f for p, f in files.items() if compiled_index.get(p) != f.blob}
    # a module the compiled package has and the commit does not is absent, unless it belongs to a
    # submodule (its files are not in the superproject's tree; the compiled package's stay)
    removed = sorted(p for p in compiled_index if p not in files and p.endswith(".py") and p not in GENERATED
                     and not p.startswith(submodules)) if whole and has_package(files) else []
    blobs = _store_blobs(repo, store / "blobs", sorted({f.blob for f in differ.values()}))
    tmp = store / "trees" / f"{key}.tmp{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp_package = tmp / PACKAGE
    tmp_package.mkdir(parents=True)
    touched = set(differ) | set(removed) | ({"version.py"} if version_py else set())
    real_dirs = {"/".join(p.split("/")[:i]) for p in touched for i in range(1, p.count("/") + 1)}
    farm(compiled_dir, tmp_package, "", real_dirs, touched)
    for path, entry in differ.items():
        dest = treepaths.replace_target(tmp_package, path)
        os.link(blobs[entry.blob], dest)
    if version_py:
        treepaths.replace_target(tmp_package, "version.py").write_text(version_py)
    (tmp / "laid.json").write_text(json.dumps({"commit": commit, "compiled": str(compiled_dir),
                                               "written": len(differ), "removed": len(removed)}))
    try:
        os.rename(tmp, root)  # atomic; another worker may have laid the same tree first
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return Laid(root, package_dir, key, len(differ), len(removed))


def _store_blobs(repo: Path, blobs_dir: Path, shas: list[str]) -> dict[str, Path]:
    """Each blob once on disk, read-only, named by its id; laid trees hard-link to them."""
    paths = {sha: blobs_dir / sha[:2] / sha for sha in shas}
    missing = [sha for sha, path in paths.items() if not path.is_file()]
    for start in range(0, len(missing), 2000):
        batch = missing[start:start + 2000]
        for sha, data in gitio.cat_blobs(repo, batch).items():
            if blob_id(data) != sha:
                raise gitio.GitError(f"blob {sha} does not hash to its id")
            path = paths[sha]
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{sha}.tmp{os.getpid()}")
            tmp.write_bytes(data)
            tmp.chmod(0o444)
            os.replace(tmp, path)
    absent = [sha for sha, path in paths.items() if not path.is_file()]
    if absent:
        raise gitio.GitError(f"{len(absent)} blob(s) of the tree are not in the repository (first {absent[0]})")
    return paths


def version_file(repo: Path, commit: str, files: dict[str, TreeFile], tree_version: str) -> str:
    """What setup.py would write as executorch/version.py for this commit ("" when the tree
    carries its own)."""
    if "version.py" in files or not has_package(files):
        return ""
    release = tree_version or "0.0.0"
    return ("from typing import Optional\n__all__ = [\"__version__\", \"git_version\"]\n"
            f"__version__ = {release + '+' + commit[:7]!r}\ngit_version: Optional[str] = {commit!r}\n")
