"""Fetching: the one door through which the worker gets a repository's commits.

    repos = Repos(data_dir, git_url="https://github.com", policy=FetchPolicy())
    with repos.checkout(PullRefs(repo, pr, head_sha, base_ref, base_sha), token) as checkout:
        triage(TriageOptions(repo=checkout.path, base=checkout.base, head=checkout.head, ...))

Layout under <data_dir>/repos/ (docs/FETCHING.md says why each piece is where it is):

    mirrors/<owner>/<name>.git      one bare, blobless partial clone (--filter=blob:none) per
                                    repository: the branches PRs target and each refs/pull/N/head
                                    triaged, fetched incrementally; commits and trees of all of
                                    them, blobs only of the commits a run needed
    submodules/<hash>.git           one shallow mirror per submodule URL: the pinned commits
    worktrees/<owner>+<name>-<sha>-<pid>-<n>/       one run's checkout of the head, removed after
    worktrees/<owner>+<name>-<sha>-<pid>-<n>.lock   held (flock) by the run; its size, for the cap
    locks/<owner>+<name>.lock       serialises fetches and worktree changes of one mirror

At the start of each triage `checkout` fetches the base branch and refs/pull/N/head (which
GitHub keeps in the base repository for a fork's PR too, even once the fork is deleted), the
head and base commits by id when the refs no longer reach them, deepens a shallow mirror when the
merge base is below its horizon, then fetches in one batch every blob of the head's and the merge
base's trees that is missing: the pipeline reads those (`git show`, `ls-tree`, `cat-file`,
`archive`) and must never fetch lazily, because a lazy fetch would need the credential. The
mirror's own config says `protocol.allow=never`, so any git command on it or its worktrees
without our per-command config (the pipeline's, a build's) cannot reach the network at all: a
missing object is an error there, never a fetch.

The credential: a fetch gets `http.<git url>/.extraHeader: Authorization: Basic ...` through
GIT_CONFIG_COUNT/KEY/VALUE in that one command's environment. It is never in an argv, a remote
URL, the mirror's config, a log or an error message (`redacted`), and no sandboxed run sees it:
the sandbox is given neither the mirror nor this environment. Submodules are fetched anonymously
(a PR's .gitmodules must not make the worker fetch private code with its token), from the git
host and `FetchPolicy.submodule_hosts` only, over http(s) only.

Everything that fails is a `FetchError` naming what (`what`: head, base, merge_base, submodule,
timeout, disk, auth, repository, network): the service turns it into an environment verdict.
"""
from __future__ import annotations

import base64
import fcntl
import hashlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import urljoin, urlsplit

from tasks.pipeline import treepaths

GIB = 1 << 30
BASE_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0"}
MIRROR_CONFIG = (("core.repositoryformatversion", "1"), ("extensions.partialClone", "origin"),
                 ("remote.origin.promisor", "true"), ("remote.origin.partialclonefilter", "blob:none"),
                 ("protocol.allow", "never"), ("gc.autoDetach", "false"), ("fetch.writeCommitGraph", "true"))
WHATS = ("head", "base", "merge_base", "submodule", "timeout", "disk", "auth", "repository", "network")
Token = Callable[[bool], "str | None"]  # token(fresh): the credential; fresh=True after a refusal


class FetchError(RuntimeError):
    """A fetch that failed; `what` names the part (one of WHATS), the message says it in a line."""

    def __init__(self, what: str, message: str):
        super().__init__(message)
        self.what = what


@dataclass(frozen=True)
class FetchPolicy:
    timeout_seconds: float = 600.0  # one git command that talks to the network
    horizon_days: int = 0  # 0: the mirror has the whole history; else only since then (shallow)
    deepen_commits: int = 1000  # a shallow mirror deepens once by this much to find a merge base
    worktree_files: bool = False  # check the head's files out into the worktree (nothing reads them yet)
    worktrees_max_bytes: int = 20 * GIB  # all live worktrees' files, under this data directory
    mirror_max_bytes: int = 20 * GIB  # a mirror above this is made again (its blobs dropped)
    reserve_bytes: int = 2 * GIB  # free disk a fetch or a worktree must leave
    submodule_hosts: tuple[str, ...] = ()  # hosts submodules may come from besides the git host


@dataclass(frozen=True)
class PullRefs:
    """What the webhook and the API say about a pull request: plain values."""

    repo: str  # owner/name
    number: int
    head_sha: str
    base_ref: str
    base_sha: str
    # what else the triage compares with, fetched when the host has it and skipped when not:
    # the installed wheel's release tag and commit, whose native sources decide whether the
    # wheel's compiled parts serve a side (tasks/environments/compiled.py)
    references: tuple[str, ...] = ()


@dataclass
class Checkout:
    """One run's worktree at the head, with the commits the pipeline compares."""

    repo: str
    path: Path
    mirror: Path
    head: str
    base: str
    merge_base: str
    notes: list[str] = field(default_factory=list)  # what the fetch had to work around
    steps: dict[str, float] = field(default_factory=dict)  # step -> seconds
    _repos: "Repos | None" = field(default=None, repr=False)

    def fetch_submodules(self, commit: str, wanted: Callable[[str], bool]) -> list[str]:
        """Make each wanted submodule of `commit` readable at <path>/<submodule> (a repository
        holding its pinned commit, as native builds read it); the paths made."""
        return self._repos._submodules(self, commit, wanted)


class GitFailed(RuntimeError):
    def __init__(self, message: str, *, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


def run_git(git_dir: Path | None, *args: str, env: dict[str, str] | None = None, timeout: float | None = None,
            input: bytes | None = None, cwd: Path | None = None) -> str:
    """git with a scrubbed environment (plus `env`); its whole process group is killed at the
    timeout. Raises GitFailed with git's first error line."""
    where = ["--git-dir", str(git_dir)] if git_dir else []
    proc = subprocess.Popen(["git", *where, *args], stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**BASE_ENV, **(env or {})},
                            cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # git-remote-http and index-pack with it
        proc.communicate()
        raise GitFailed(f"git {args[0]} timed out after {timeout:.0f} s", timed_out=True) from None
    if proc.returncode:
        lines = [line.strip() for line in err.decode(errors="replace").splitlines() if line.strip()]
        first = next((line for line in lines if line.startswith(("fatal:", "error:"))), lines[0] if lines else "")
        raise GitFailed(first or f"git {args[0]} exited with {proc.returncode}")
    return out.decode(errors="replace")


def config_env(items: list[tuple[str, str]]) -> dict[str, str]:
    """git configuration for one command, by environment (GIT_CONFIG_COUNT/KEY_n/VALUE_n)."""
    env = {"GIT_CONFIG_COUNT": str(len(items))}
    for n, (key, value) in enumerate(items):
        env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = key, value
    return env


def redacted(text: str, token: str | None) -> str:
    if token:
        text = text.replace(token, "***").replace(base64.b64encode(f"x-access-token:{token}".encode()).decode(), "***")
    return text


class Repos:
    """Mirrors, submodule mirrors and worktrees under <data_dir>/repos."""

    def __init__(self, data_dir: Path, git_url: str, policy: FetchPolicy | None = None):
        self.root = Path(data_dir) / "repos"
        self.git_url = git_url.rstrip("/")
        self.policy = policy or FetchPolicy()
        self._serial = itertools.count()

    # ---- the door -----------------------------------------------------------------------------
    @contextmanager
    def checkout(self, pull: PullRefs, token: Token) -> Iterator[Checkout]:
        """Fetch what the triage of `pull` needs and yield its worktree; removed afterwards,
        whatever happens. Raises FetchError."""
        self.prune()
        with self._repo_lock(pull.repo):
            checkout = self._fetch(pull, token)
            lock = self._add_worktree(checkout)
        try:
            yield checkout
        finally:
            self._remove_worktree(checkout, lock)

    @contextmanager
    def commit_checkout(self, repo: str, branch: str, sha: str, token: Token,
                        references: tuple[str, ...] = ()) -> Iterator[Checkout]:
        """A worktree at one commit of a branch (a pushed tip, warmed before any pull request
        names it): the same door, with no pull request's ref to fetch."""
        with self.checkout(PullRefs(repo, 0, sha, branch, sha, references), token) as checkout:
            yield checkout

    def merge_base(self, pull: PullRefs, token: Token) -> str:
        """Fetch the PR's commits and answer their merge base (CI-log triage: no worktree)."""
        with self._repo_lock(pull.repo):
            return self._fetch(pull, token, blobs=False).merge_base

    def forget_pull(self, repo: str, number: int) -> None:
        """A closed PR's ref leaves the mirror (its objects go at the mirror's next gc)."""
        mirror = self.mirror_path(repo)
        if mirror.is_dir():
            with self._repo_lock(repo):
                try:
                    run_git(mirror, "update-ref", "-d", f"refs/pull/{number}/head")
                except GitFailed:
                    pass  # never fetched: nothing to forget

    def mirror_path(self, repo: str) -> Path:
        owner, name = _split(repo)
        return self.root / "mirrors" / owner / f"{name}.git"

    # ---- fetching -----------------------------------------------------------------------------
    def _fetch(self, pull: PullRefs, token: Token, *, blobs: bool = True) -> Checkout:
        _valid_sha(pull.head_sha, "head")
        _valid_sha(pull.base_sha, "base")
        self._check_free(self.root, 0, "fetch")
        mirror = self._mirror(pull.repo)
        fetch = _Fetcher(self, mirror, token)
        started = time.monotonic()
        checkout = Checkout(pull.repo, Path(), mirror, pull.head_sha, pull.base_sha, "", _repos=self)
        branch, pull_ref = f"refs/heads/{pull.base_ref}", f"refs/pull/{pull.number}/head"
        try:
            run_git(None, "check-ref-format", branch)
        except GitFailed:
            raise FetchError("base", f"the base `{pull.base_ref}` of {pull.repo}#{pull.number} is not a branch "
                                     "name") from None
        advertised = fetch.ls_remote(branch, pull_ref, f"refs/tags/{pull.base_ref}")
        if branch not in advertised:
            kind = "a tag, " if f"refs/tags/{pull.base_ref}" in advertised else ""
            raise FetchError("base", f"the base `{pull.base_ref}` is not a branch of {pull.repo} ({kind}no "
                                     f"{branch} on {self.git_url})")
        fetch.refs([f"+{branch}:{branch}"] + ([f"+{pull_ref}:{pull_ref}"] if pull_ref in advertised else []))
        now = advertised.get(pull_ref)  # where the pull request's head is on the host, if anywhere
        if not _has_commit(mirror, pull.head_sha):
            why = (f"{pull_ref} is now {now[:12]} (force-pushed)" if now else f"{pull_ref} is gone")
            if not fetch.by_id(pull.head_sha):
                raise FetchError("head", f"the head {pull.head_sha[:12]} of {pull.repo}#{pull.number} is no longer "
                                         f"on {self.git_url}: {why}; the newer head is triaged when its push arrives")
            checkout.notes.append(f"{why}; the head {pull.head_sha[:12]} was fetched by its id")
        if not _has_commit(mirror, pull.base_sha) and not fetch.by_id(pull.base_sha):
            raise FetchError("base", f"the base commit {pull.base_sha[:12]} is no longer on {pull.base_ref} of "
                                     f"{pull.repo} (the branch was rewritten)")
        tags = [r for r in pull.references if r.startswith("refs/")]
        checkout.notes.extend(fetch.references(pull.references, advertised=fetch.ls_remote(*tags)
                                                             if tags else {}))
        checkout.steps["fetch"] = round(time.monotonic() - started, 2)
        checkout.merge_base = self._merge_base(mirror, pull, fetch, branch, pull_ref if now else None)
        if blobs:
            started = time.monotonic()
            fetch.blobs([pull.head_sha, checkout.merge_base])
            checkout.steps["blobs"] = round(time.monotonic() - started, 2)
        return checkout

    def _merge_base(self, mirror: Path, pull: PullRefs, fetch: "_Fetcher", branch: str, pull_ref: str | None) -> str:
        found = _merge_base(mirror, pull.base_sha, pull.head_sha)
        shallow = run_git(mirror, "rev-parse", "--is-shallow-repository").strip() == "true"
        if not found and shallow:
            fetch.refs([f"+{branch}:{branch}"] + ([f"+{pull_ref}:{pull_ref}"] if pull_ref else []),
                       deepen=self.policy.deepen_commits)
            found = _merge_base(mirror, pull.base_sha, pull.head_sha)
            if not found:
                raise FetchError("merge_base", f"the merge base of {pull.base_sha[:12]} ({pull.base_ref}) and "
                                               f"{pull.head_sha[:12]} is older than the mirror's horizon "
                                               f"({self.policy.horizon_days} days of history, deepened by "
                                               f"{self.policy.deepen_commits} commits; ETRIAGE_MIRROR_HORIZON_DAYS=0 "
                                               "keeps the whole history)")
        if not found:
            raise FetchError("merge_base", f"{pull.base_sha[:12]} ({pull.base_ref}) and {pull.head_sha[:12]} have no "
                                           "common history")
        return found

    def _mirror(self, repo: str) -> Path:
        """The repository's mirror, made when missing (or unfinished), made again when it grew
        over its cap and no run is using it."""
        mirror = self.mirror_path(repo)
        ready = mirror / "etriage-mirror.json"
        if ready.is_file() and _size(mirror) > self.policy.mirror_max_bytes and not self._live(repo):
            shutil.rmtree(mirror)
        if not ready.is_file():
            if mirror.exists():
                shutil.rmtree(mirror)
            mirror.parent.mkdir(parents=True, exist_ok=True)
            run_git(None, "init", "-q", "--bare", str(mirror))
            with open(mirror / "config", "a") as config:  # one write instead of a git config per key
                config.write(_config_text((("remote.origin.url", f"{self.git_url}/{repo}.git"), *MIRROR_CONFIG)))
            run_git(mirror, "config", "--get", "extensions.partialClone")  # git reads it back
            ready.write_text(json.dumps({"repo": repo, "url": f"{self.git_url}/{repo}.git",
                                         "created": datetime.now(timezone.utc).isoformat()}))
        return mirror

    # ---- worktrees ----------------------------------------------------------------------------
    def _add_worktree(self, checkout: Checkout):
        """The run's worktree at the head: its own HEAD and a place for its submodules; the files
        are checked out only with `worktree_files` (the pipeline reads git objects, and checking
        out ExecuTorch's 24,000 files and removing them costs more than the fetch)."""
        started = time.monotonic()
        worktrees = self.root / "worktrees"
        worktrees.mkdir(parents=True, exist_ok=True)
        size = 0
        if self.policy.worktree_files:
            size = sum(int(line.split()[3]) for line in
                       run_git(checkout.mirror, "ls-tree", "-r", "-l", "--full-tree", checkout.head).splitlines()
                       if line.split()[1] == "blob")
            live = sum(json.loads(p.read_text() or "{}").get("bytes", 0) for p in self._locks(held=True))
            if live + size > self.policy.worktrees_max_bytes:
                raise FetchError("disk", f"a worktree of {checkout.head[:12]} needs {_gib(size)}; with the runs "
                                         f"in progress ({_gib(live)}) that is over the worktrees' cap "
                                         f"({_gib(self.policy.worktrees_max_bytes)}, ETRIAGE_WORKTREES_MAX_GIB)")
            self._check_free(worktrees, size, "worktree")
        owner, name = _split(checkout.repo)
        stem = f"{owner}+{name}-{checkout.head[:12]}-{os.getpid()}-{next(self._serial)}"
        # held before it has its name, so `prune` never sees the lock of a live run unheld
        pending = worktrees / f".{stem}.lock.new"
        lock = open(pending, "w")
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock.write(json.dumps({"repo": checkout.repo, "bytes": size, "pid": os.getpid()}))
        lock.flush()
        os.rename(pending, worktrees / f"{stem}.lock")
        checkout.path = worktrees / stem
        try:
            run_git(checkout.mirror, "worktree", "add", "-q", "--detach",
                    *([] if self.policy.worktree_files else ["--no-checkout"]), str(checkout.path), checkout.head)
        except GitFailed as failed:
            self._remove_worktree(checkout, lock, locked=True)
            raise _error(failed, "disk" if "space" in str(failed) else "head", "checking out the head") from None
        checkout.steps["worktree"] = round(time.monotonic() - started, 2)
        return lock

    def _remove_worktree(self, checkout: Checkout, lock, *, locked: bool = False) -> None:
        """The run's worktree and its lock; `locked`: the caller holds the repository's lock."""
        if checkout.path != Path() and checkout.path.exists():
            shutil.rmtree(checkout.path)
        if locked:
            run_git(checkout.mirror, "worktree", "prune")
        else:
            with self._repo_lock(checkout.repo):
                run_git(checkout.mirror, "worktree", "prune")
        (self.root / "worktrees" / f"{checkout.path.name}.lock").unlink(missing_ok=True)
        lock.close()

    def prune(self) -> list[Path]:
        """Worktrees whose run died (their lock is not held) are removed; the paths removed."""
        worktrees, removed = self.root / "worktrees", []
        for lock_path in self._locks(held=False):
            tree = lock_path.with_suffix("")
            repo = json.loads(lock_path.read_text() or "{}").get("repo", "")
            if tree.exists():
                shutil.rmtree(tree)
            lock_path.unlink(missing_ok=True)
            removed.append(tree)
            if repo and self.mirror_path(repo).is_dir():
                with self._repo_lock(repo):
                    run_git(self.mirror_path(repo), "worktree", "prune")
        if worktrees.is_dir():  # a directory without its lock: a crash while it was being removed
            for tree in worktrees.iterdir():
                if tree.is_dir() and not tree.with_suffix(".lock").exists():
                    shutil.rmtree(tree)
                    removed.append(tree)
            for pending in worktrees.glob(".*.lock.new"):  # a crash before the lock got its name
                if time.time() - pending.stat().st_mtime > 60:
                    pending.unlink(missing_ok=True)
        return removed

    def _locks(self, *, held: bool) -> list[Path]:
        """The worktrees' lock files whose run is alive (held=True) or dead (held=False)."""
        worktrees = self.root / "worktrees"
        found = []
        for path in sorted(worktrees.glob("*.lock")) if worktrees.is_dir() else ():
            with open(path, "a") as probe:
                try:
                    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    alive = False
                    fcntl.flock(probe, fcntl.LOCK_UN)
                except BlockingIOError:
                    alive = True
            if alive == held:
                found.append(path)
        return found

    def _live(self, repo: str) -> bool:
        return any(json.loads(p.read_text() or "{}").get("repo") == repo for p in self._locks(held=True))

    # ---- submodules ---------------------------------------------------------------------------
    def _submodules(self, checkout: Checkout, commit: str, wanted: Callable[[str], bool]) -> list[str]:
        links = {}
        for line in run_git(checkout.mirror, "ls-tree", "-r", "-z", "--full-tree", commit).split("\0"):
            if line.startswith("160000 "):
                meta, path = line.split("\t", 1)
                links[path] = meta.split()[2]
        chosen = {path: sha for path, sha in links.items() if wanted(path)}
        if not chosen:
            return []
        urls = _gitmodules(checkout.mirror, commit)
        made = []
        for path, sha in sorted(chosen.items()):
            where = f"submodule {path} at {sha[:12]}"
            try:
                target = treepaths.inside(checkout.path, treepaths.check(path))
            except ValueError as error:
                raise FetchError("submodule", f"{where}: {error}") from None
            url = self._submodule_url(urls.get(path), where, checkout.repo)
            store = self._submodule_mirror(url)
            with _flock(store.with_suffix(".lock")):
                if not _has_commit(store, sha):
                    scheme = urlsplit(url).scheme
                    try:
                        run_git(store, "fetch", "-q", "--no-tags", "--depth=1", "origin", sha,
                                env=config_env([(f"protocol.{scheme}.allow", "always"), ("http.followRedirects", "false")]),
                                timeout=self.policy.timeout_seconds)
                    except GitFailed as failed:
                        raise _error(failed, "submodule", f"{where} ({url}) could not be fetched") from None
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.exists():
                shutil.rmtree(target)
            run_git(None, "init", "-q", str(target))
            (target / ".git" / "objects" / "info" / "alternates").write_text(f"{store / 'objects'}\n")
            made.append(path)
        return made

    def _submodule_url(self, raw: str | None, where: str, repo: str) -> str:
        if not raw:
            raise FetchError("submodule", f"{where}: no url in .gitmodules")
        url = urljoin(f"{self.git_url}/{repo}.git/", raw) if raw.startswith(("../", "./")) else raw
        parts, host = urlsplit(url), urlsplit(self.git_url)
        allowed = {host.netloc, *self.policy.submodule_hosts}
        if parts.scheme not in ("https", host.scheme) or parts.netloc not in allowed:
            raise FetchError("submodule", f"{where}: {url} is not fetched (only http(s) from "
                                          f"{', '.join(sorted(allowed))}; ETRIAGE_SUBMODULE_HOSTS adds hosts)")
        return url

    def _submodule_mirror(self, url: str) -> Path:
        store = self.root / "submodules" / f"{hashlib.sha256(url.encode()).hexdigest()[:16]}.git"
        if not (store / "etriage-url").is_file():
            store.parent.mkdir(parents=True, exist_ok=True)
            if store.exists():
                shutil.rmtree(store)
            run_git(None, "init", "-q", "--bare", str(store))
            run_git(store, "config", "remote.origin.url", url)
            run_git(store, "config", "protocol.allow", "never")
            (store / "etriage-url").write_text(url + "\n")
        return store

    # ---- space and locks ----------------------------------------------------------------------
    def _check_free(self, where: Path, needed: int, doing: str) -> None:
        where.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(where).free
        if free - needed < self.policy.reserve_bytes:
            raise FetchError("disk", f"out of disk for the {doing}: {_gib(free)} free under {self.root}, "
                                     f"{_gib(needed)} needed and {_gib(self.policy.reserve_bytes)} kept in reserve "
                                     "(ETRIAGE_DISK_RESERVE_GIB)")

    def _repo_lock(self, repo: str):
        owner, name = _split(repo)
        return _flock(self.root / "locks" / f"{owner}+{name}.lock")


class _Fetcher:
    """The network commands of one fetch, each with the credential in its own environment."""

    def __init__(self, repos: Repos, mirror: Path, token: Token):
        self.repos, self.mirror, self.token = repos, mirror, token
        self._current: str | None = None

    def env(self, fresh: bool = False) -> dict[str, str]:
        self._current = self.token(fresh)
        scheme = urlsplit(self.repos.git_url).scheme
        items = [(f"protocol.{scheme}.allow", "always"), ("http.followRedirects", "false")]
        if self._current:
            basic = base64.b64encode(f"x-access-token:{self._current}".encode()).decode()
            items.append((f"http.{self.repos.git_url}/.extraHeader", f"Authorization: Basic {basic}"))
        return config_env(items)

    def run(self, *args: str, input: bytes | None = None, what: str = "network", doing: str = "") -> str:
        """One network command; a refused token is renewed once."""
        for fresh in (False, True):
            try:
                return run_git(self.mirror, *args, env=self.env(fresh), input=input,
                               timeout=self.repos.policy.timeout_seconds)
            except GitFailed as failed:
                error = _error(failed, what, doing or f"git {args[0]}", self._current)
                if error.what != "auth" or fresh:
                    raise error from None

    def ls_remote(self, *refs: str) -> dict[str, str]:
        out = self.run("ls-remote", "origin", *refs, doing=f"listing {', '.join(refs[:2])}")
        return {ref: sha for sha, ref in (line.split("\t", 1) for line in out.splitlines() if "\t" in line)}

    def refs(self, refspecs: list[str], *, deepen: int = 0) -> None:
        horizon = self.repos.policy.horizon_days
        depth = [f"--deepen={deepen}"] if deepen else \
            [f"--shallow-since={(datetime.now(timezone.utc) - timedelta(days=horizon)):%Y-%m-%d}"] if horizon else []
        self.run("fetch", "-q", "--no-tags", "--filter=blob:none", "--no-write-fetch-head", *depth, "origin",
                 *refspecs, doing="fetching " + ", ".join(r.split(":")[0].lstrip("+") for r in refspecs))

    def references(self, wanted: tuple[str, ...], *, advertised: dict[str, str]) -> list[str]:
        """Fetch each reference (a ref the host advertises, or a full commit id) the mirror lacks;
        only its tree is read. Alternatives in order: the first one had is enough, and a note
        (never an error) says when none could be."""
        had = []
        for ref in wanted:
            if ref.startswith("refs/"):
                if ref not in advertised:
                    continue
                have = run_git(self.mirror, "for-each-ref", "--format=%(objectname)", ref).strip()
                peeled = advertised.get(ref + "^{}", advertised[ref])
                if have != advertised[ref] and _has_commit(self.mirror, peeled):
                    run_git(self.mirror, "update-ref", ref, peeled)  # in the history already fetched
                elif have != advertised[ref] and not self._fetch_reference(f"+{ref}:{ref}", ref):
                    continue
            elif not re.fullmatch(r"[0-9a-f]{40}", ref):
                continue  # an abbreviated id cannot be asked for
            elif not _has_commit(self.mirror, ref) and not self._fetch_reference(ref, ref[:12]):
                continue
            had.append(ref)
            break
        if wanted and not had:
            return [f"none of {', '.join(r[:40] for r in wanted)} is on the host: the installed wheel's "
                    "native sources cannot be compared with a side's"]
        return []

    def _fetch_reference(self, spec: str, name: str) -> bool:
        # one commit deep in a shallow mirror; a full mirror stays full (a shallow mark on an old
        # commit would cut the history merge bases are found in)
        shallow = run_git(self.mirror, "rev-parse", "--is-shallow-repository").strip() == "true"
        try:
            self.run("fetch", "-q", "--no-tags", "--filter=blob:none", "--no-write-fetch-head",
                     *(["--depth=1"] if shallow else []), "origin", spec, doing=f"fetching {name}")
        except FetchError as error:
            if error.what in ("timeout", "disk", "auth"):
                raise
            return False
        return True

    def by_id(self, sha: str) -> bool:
        """Fetch one commit by its id (what a force-push or a rewritten branch left); False when
        the server no longer has it."""
        try:
            self.refs([sha])
        except FetchError as error:
            if error.what in ("timeout", "disk", "auth"):
                raise
            return False
        return _has_commit(self.mirror, sha)

    def blobs(self, commits: list[str]) -> None:
        """Every blob of these commits' trees that the mirror lacks, in one request (what git's
        own lazy fetch sends, with the credential)."""
        listed = run_git(self.mirror, "rev-list", "--objects", "--no-walk", "--missing=print", *commits)
        missing = sorted({line[1:].split()[0] for line in listed.splitlines() if line.startswith("?")})
        if missing:
            self.run("-c", "fetch.negotiationAlgorithm=noop", "fetch", "-q", "origin", "--no-tags",
                     "--no-write-fetch-head", "--recurse-submodules=no", "--filter=blob:none", "--stdin",
                     input=("\n".join(missing) + "\n").encode(), doing=f"fetching {len(missing)} file(s)")
        left = [line for line in run_git(self.mirror, "rev-list", "--objects", "--no-walk", "--missing=print",
                                         *commits).splitlines() if line.startswith("?")]
        if left:
            raise FetchError("network", f"{len(left)} file(s) of {', '.join(c[:12] for c in commits)} could not be "
                                        "fetched")


def _error(failed: GitFailed, what: str, doing: str, token: str | None = None) -> FetchError:
    """A failed git command as a FetchError of the right kind, its message without the token."""
    text = redacted(str(failed), token)
    if failed.timed_out:
        return FetchError("timeout", f"{doing}: {text} (ETRIAGE_FETCH_TIMEOUT)")
    if re.search(r"No space left on device|Disk quota exceeded|unable to write|write error", text):
        return FetchError("disk", f"{doing}: out of disk ({text})")
    refused = re.search(r"could not read (Username|Password)|Authentication failed|error: 40[13]|Invalid username",
                        text)
    if what == "submodule" and refused:
        return FetchError(what, f"{doing}: the host asks for credentials, so the repository is private or does "
                                f"not exist (submodules are fetched anonymously) ({text})")
    if what in ("head", "base", "submodule"):
        return FetchError(what, f"{doing}: {text}")
    if refused:
        return FetchError("auth", f"{doing}: the git host refused the installation token ({text})")
    if re.search(r"not found|error: 404", text, re.I):
        return FetchError("repository", f"{doing}: the repository is not on the git host or the token cannot "
                                        f"read it ({text})")
    return FetchError(what, f"{doing}: {text}")


@contextmanager
def _flock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _split(repo: str) -> tuple[str, str]:
    owner, _, name = repo.partition("/")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", owner or "-") or not re.fullmatch(r"[A-Za-z0-9_.-]+", name or "-") \
            or owner.startswith(".") or name.startswith("."):
        raise FetchError("repository", f"{repo!r} is not owner/name")
    return owner, name


def _valid_sha(sha: str, what: str) -> None:
    if not re.fullmatch(r"[0-9a-f]{40}", sha or ""):
        raise FetchError(what, f"the {what} {sha!r} is not a full commit id")


def _has_commit(git_dir: Path, sha: str) -> bool:
    try:
        run_git(git_dir, "cat-file", "-e", f"{sha}^{{commit}}")
        return True
    except GitFailed:
        return False


def _merge_base(mirror: Path, base: str, head: str) -> str:
    try:
        return run_git(mirror, "merge-base", base, head).strip()
    except GitFailed:
        return ""


def _gitmodules(mirror: Path, commit: str) -> dict[str, str]:
    """submodule path -> url, from the commit's .gitmodules (read as data, never as config)."""
    try:
        out = run_git(mirror, "config", "-z", "--blob", f"{commit}:.gitmodules", "--get-regexp",
                      r"^submodule\..*\.(path|url)$")
    except GitFailed:
        return {}
    paths, urls = {}, {}
    for entry in filter(None, out.split("\0")):
        key, _, value = entry.partition("\n")
        name, _, kind = key.removeprefix("submodule.").rpartition(".")
        (paths if kind == "path" else urls)[name] = value
    return {path: urls.get(name, "") for name, path in paths.items()}


def _config_text(items) -> str:
    """git config file text for (section[.subsection].key, value) pairs (values quoted)."""
    text = ""
    for key, value in items:
        section, _, name = key.rpartition(".")
        head, _, sub = section.partition(".")
        text += f'[{head} "{sub}"]\n' if sub else f"[{head}]\n"
        text += f'\t{name} = "{value}"\n'
    return text


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _gib(n: int) -> str:
    for unit, size in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size / 10:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"
