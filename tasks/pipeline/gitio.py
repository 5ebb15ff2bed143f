"""The few git questions the pipeline asks, as plain functions over `git -C repo`.

Read-only: nothing here changes the repository's state (no checkout, no worktree). Every path
read from a tree or a diff is data from the change: `changed_files` and `ls_tree` pass each one
through `treepaths.check` (UnsafePath names the first that cannot be a file name), and names are
decoded with surrogateescape, so a name that is not UTF-8 is refused there instead of crashing.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from tasks.pipeline import treepaths
from tasks.records import ChangedFile


class GitError(ValueError):
    """Bad input: not a git repository, unknown revision, ..."""


def git(repo: Path | str, *args: str, binary: bool = False) -> str | bytes:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=not binary,
                          **({} if binary else {"encoding": "utf-8", "errors": "surrogateescape"}), env={"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1",
                                                 "HOME": "/nonexistent", "LC_ALL": "C",
                                                 "GIT_TERMINAL_PROMPT": "0"})
    if proc.returncode != 0:
        err = proc.stderr if not binary else proc.stderr.decode(errors="replace")
        lines = [l for l in err.strip().splitlines() if l.strip()]
        raise GitError(lines[0] if lines else f"git {' '.join(args)} failed")
    return proc.stdout


def resolve(repo: Path | str, rev: str) -> str:
    if not Path(repo).is_dir():
        raise GitError(f"{repo}: no such directory")
    try:
        git(repo, "rev-parse", "--git-dir")
    except GitError as exc:
        raise GitError(f"{repo}: not a git repository") from exc
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except GitError as exc:
        raise GitError(f"{repo}: unknown revision {rev!r}") from exc


def merge_base(repo, base: str, head: str) -> str:
    try:
        return git(repo, "merge-base", base, head).strip()
    except GitError as exc:
        raise GitError(f"{repo}: {base[:12]} and {head[:12]} have no merge base") from exc


def changed_files(repo, merge_base_sha: str, head: str) -> list[ChangedFile]:
    """`git diff --raw -M` (status, paths, mode at head) plus --numstat's "-" marker for binary files. UnsafePath when
    a path (or a rename's old path) cannot be a file name."""
    raw = git(repo, "diff", "--raw", "-M", "-z", "--no-abbrev", merge_base_sha, head)
    parts = raw.split("\0")
    files: list[ChangedFile] = []
    i = 0
    while i < len(parts) - 1:
        _, new_mode, _, _, status = parts[i].lstrip(":").split()
        mode = "" if status[0] == "D" else new_mode
        if status[:1] in ("R", "C"):
            files.append(ChangedFile(path=parts[i + 2], status=status[0], old_path=parts[i + 1], mode=mode))
            i += 3
        else:
            files.append(ChangedFile(path=parts[i + 1], status=status[0], mode=mode))
            i += 2
    # --numstat says "-" for binary files; with -z a rename's paths follow in two fields.
    numstat = git(repo, "diff", "--numstat", "-M", "-z", merge_base_sha, head).split("\0")
    binary, j = set(), 0
    while j < len(numstat):
        cols = numstat[j].split("\t")
        if len(cols) == 3:
            path = cols[2] if cols[2] else (numstat[j + 2] if j + 2 < len(numstat) else "")
            j += 1 if cols[2] else 3
            if cols[0] == "-":
                binary.add(path)
        else:
            j += 1
    for f in files:
        treepaths.checked_all(filter(None, (f.path, f.old_path)))
    return [ChangedFile(f.path, f.status, f.old_path, f.path in binary, f.mode) for f in files]


def show(repo, commit: str, path: str) -> bytes:
    return git(repo, "show", f"{commit}:{path}", binary=True)


def ls_tree(repo, commit: str) -> dict[str, str]:
    """path -> blob sha for every file of the commit; UnsafePath for a path that cannot be a file name."""
    out = git(repo, "ls-tree", "-r", "-z", "--full-tree", commit)
    blobs = {}
    for rec in out.split("\0"):
        if not rec:
            continue
        meta, path = rec.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob":
            blobs[treepaths.check(path)] = sha
    return blobs


def cat_blobs(repo, shas: list[str]) -> dict[str, bytes]:
    """Contents of many blobs in one `git cat-file --batch` call."""
    proc = subprocess.run(["git", "-C", str(repo), "cat-file", "--batch"],
                          input=("\n".join(shas) + "\n").encode(), capture_output=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})
    if proc.returncode != 0:
        raise GitError(proc.stderr.decode(errors="replace").strip() or "git cat-file failed")
    data, out, pos = proc.stdout, {}, 0
    for sha in shas:
        end = data.index(b"\n", pos)
        header = data[pos:end].split()
        pos = end + 1
        if len(header) < 3 or header[1] == b"missing":
            continue
        size = int(header[2])
        out[sha] = data[pos:pos + size]
        pos += size + 1
    return out


def tree_sha(repo, commit: str) -> str:
    return git(repo, "rev-parse", f"{commit}^{{tree}}").strip()


def diff_hunks(repo, merge_base_sha: str, head: str) -> dict[str, list[tuple[int, int]]]:
    """path at head -> [(first_line, last_line)] of changed lines on the head side.

    Pure deletions give a one-line range at the line after which the deletion happened.
    """
    out = git(repo, "diff", "-U0", "-M", "--no-color", merge_base_sha, head)
    hunks: dict[str, list[tuple[int, int]]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("+++ "):
            target = line[4:]
            current = None if target == "/dev/null" else target[2:] if target.startswith("b/") else target
            if current is not None:
                hunks.setdefault(current, [])
        elif line.startswith("@@") and current is not None:
            new = line.split("+", 1)[1].split(" ", 1)[0]
            start, _, count = new.partition(",")
            first, n = int(start), int(count) if count else 1
            hunks[current].append((max(first, 1), max(first + n - 1, first)))
    return hunks
