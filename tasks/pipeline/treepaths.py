"""Paths that come from a change are data: the one check before any of them names a file.

A tree made with `git mktree` can hold any bytes as an entry name (`..`, `a/../../x`, a name
with a newline); `git fsck` only warns. Every writer outside the sandbox (the overlay, the
native source checkout and its incremental update, submodule export, artefact collection)
joins such a path to its root through `inside(root, path)` and nothing else;
tests/sandbox/test_tree_paths.py fails when a module writes a git path any other way.

`check(path)` refuses what git's own `verify_path` would (no empty, `.` or `..` component,
no `.git` component in any letter case, no leading `/`), plus what a file name must not
carry here (NUL, a newline or carriage return, over-long names). `inside` also resolves the
destination's existing parents, so a symlink planted earlier in the tree cannot carry a
write outside its root.
"""
from __future__ import annotations

import os
from pathlib import Path

MAX_PATH = 4096  # bytes, Linux's PATH_MAX
MAX_NAME = 255  # bytes per component, NAME_MAX
FORBIDDEN_CHARS = ("\0", "\n", "\r")


class UnsafePath(ValueError):
    """A path from a change that must not be used as a file name; the message says why."""


def check(path: str) -> str:
    """`path` if it is a safe relative path, else UnsafePath naming the problem."""
    if not isinstance(path, str) or not path:
        raise UnsafePath("empty path")
    shown = path.encode("unicode_escape").decode()[:200]
    if any(c in path for c in FORBIDDEN_CHARS):
        raise UnsafePath(f"{shown!r}: control character in path")
    if any("\udc80" <= c <= "\udcff" for c in path):  # gitio decodes names with surrogateescape
        raise UnsafePath(f"{shown!r}: path is not UTF-8")
    if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH:
        raise UnsafePath(f"{shown!r}: path longer than {MAX_PATH} bytes")
    if path.startswith("/"):
        raise UnsafePath(f"{shown!r}: absolute path")
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise UnsafePath(f"{shown!r}: {'empty' if not part else repr(part)} path component")
        if part.lower() == ".git":
            raise UnsafePath(f"{shown!r}: .git path component")
        if len(part.encode("utf-8", "surrogateescape")) > MAX_NAME:
            raise UnsafePath(f"{shown!r}: path component longer than {MAX_NAME} bytes")
    return path


def inside(root: Path, path: str) -> Path:
    """root/path, after `check(path)` and after making sure the destination, with its existing
    parents' symlinks resolved, still lies under root. The last component itself is not
    followed: a caller replacing a file unlinks it first (see `replace_target`)."""
    check(path)
    base = Path(root).resolve()
    dest = base / path
    parent = dest.parent.resolve()
    if parent != base and base not in parent.parents:
        raise UnsafePath(f"{path!r}: leaves {root} through a symlink")
    return parent / dest.name


def checked_all(paths) -> list[str]:
    """Every path of `paths` checked (the first bad one raises); for lists read from git."""
    return [check(path) for path in paths]


def regular_file_inside(root: Path, path: str) -> Path:
    """root/path when it is a regular file, not a link, whose parents resolve inside root: what a
    build or run left and the worker is about to copy out (artefact collection). A link a run made
    there (to the app's key, to /etc/shadow) is refused, never followed."""
    source = inside(root, path)
    if source.is_symlink():
        raise UnsafePath(f"{path!r}: a symbolic link (to {os.readlink(source)!r}), not a file: not copied")
    if not source.is_file():
        raise UnsafePath(f"{path!r}: not a regular file")
    return source


def replace_target(root: Path, path: str) -> Path:
    """`inside(root, path)` made ready to be written: parents created (each checked again once it
    exists), and whatever was at the destination (a file, a link) removed, never followed."""
    dest = inside(root, path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest = inside(root, path)
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    return dest
