"""<data>/environments: what commit environments are made of, shared by runs, PRs and workers.

    trees/<key>/executorch   a commit's laid tree (laid.json; health-*.json: its checks)
    blobs/<sha[:2]>/<sha>    file contents, once each, hard-linked into the trees
    built/<native key>/      compiled parts built from a commit's sources (parts.json)
    registry/executorch-X/   a registry wheel of release X, unpacked
    torch/<pin>/             a pinned torch from the registry
    index/                   blob ids of installed packages' sources, by (size, mtime)

`prune(store, cap)` removes least recently used trees and built parts (their marker file's
mtime: every use touches it) until the store is under its cap; blobs no tree links any more go
with them. Registry downloads and torches are kept (they are what a release needs and cost a
download). `publish`/`adopt` copy built parts to and from a directory shared between build
machines (ETRIAGE_ENV_SHARED_STORE: a mount every worker sees), keyed by the native key.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

MARKERS = {"trees": "laid.json", "built": "parts.json"}


@dataclass
class Pruned:
    removed: list[str]
    bytes_before: int
    bytes_after: int


def disk_bytes(path: Path) -> int:
    """Bytes of the files under `path`, each inode counted once (hard links share blobs)."""
    seen, total = set(), 0
    for root, dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def prune(store: Path, cap_bytes: int, keep: set[str] = frozenset()) -> Pruned:
    """Remove least recently used entries (never those named in `keep`) until under the cap."""
    before = disk_bytes(store)
    entries = []
    for kind, marker in MARKERS.items():
        for entry in (store / kind).glob("*"):
            if entry.is_dir() and (entry / marker).is_file() and entry.name not in keep:
                entries.append(((entry / marker).stat().st_mtime, entry))
    size, removed = before, []
    for _, entry in sorted(entries):
        if size <= cap_bytes:
            break
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(f"{entry.parent.name}/{entry.name}")
        size = disk_bytes(store)
    if removed:
        _drop_unlinked_blobs(store / "blobs")
        size = disk_bytes(store)
    return Pruned(removed, before, size)


def _drop_unlinked_blobs(blobs: Path) -> None:
    for path in blobs.glob("*/*"):
        try:
            if path.stat().st_nlink <= 1:
                path.unlink()
        except OSError:
            continue


def publish(built_root: Path, shared: Path) -> bool:
    """Copy built parts to the shared store (atomically, once per key)."""
    dest = shared / "built" / built_root.name
    if (dest / MARKERS["built"]).is_file():
        return False
    tmp = dest.with_name(f"{dest.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(built_root, tmp, symlinks=True)
    try:
        os.rename(tmp, dest)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    return True


def adopt(shared: Path, key: str, store: Path) -> Path | None:
    """Built parts another machine published for `key`, copied into this store; or None."""
    src = shared / "built" / key
    dest = store / "built" / key
    if (dest / MARKERS["built"]).is_file():
        return dest
    if not (src / MARKERS["built"]).is_file():
        return None
    tmp = dest.with_name(f"{key}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, tmp, symlinks=True)
    try:
        os.rename(tmp, dest)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest if (dest / MARKERS["built"]).is_file() else None
