"""Git over smart HTTP for the GitHub double: git's own server side (`git http-backend`, run as
CGI for every request) behind the double's HTTP server, so tests fetch for real.

What it models of GitHub (https://docs.github.com/en/pull-requests, "refs/pull/N/head"):
- one bare repository per `owner/name`, at `<double url>/owner/name.git` (or without `.git`);
- a fork is a repository of its own; a pull request's head, wherever it lives, is also
  `refs/pull/N/head` of the base repository (GitHub keeps the fork network's objects together,
  so the base repository can serve it), and stays there after the fork is deleted;
- fetching only (`git-upload-pack`); a push is refused;
- every request is checked: a private repository answers 401 without a valid token, as GitHub
  does; a public one may be read anonymously, but a token that is sent must be valid. Tokens
  come as git sends them: `Authorization: Basic base64(x-access-token:TOKEN)`.

The double (etriage/dev/github_double.py) calls `serve` for paths `match` accepts; everything
else about a request (recording, holds, faults) is the double's.
"""
from __future__ import annotations

import base64
import gzip
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

GIT_PATH = re.compile(r"^/(?P<repo>[^/]+/[^/]+?)(?:\.git)?/(?P<rest>info/refs|git-upload-pack|git-receive-pack)$")
GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": "/dev/null"}

# What github.com's upload-pack allows: partial clones (filters) and wants by object id; and no
# gc detached into the background by a test's fetch, to race the next change to the repository.
SERVER_CONFIG = {"GIT_CONFIG_COUNT": "3", "GIT_CONFIG_KEY_0": "uploadpack.allowFilter", "GIT_CONFIG_VALUE_0": "true",
                 "GIT_CONFIG_KEY_1": "uploadpack.allowAnySHA1InWant", "GIT_CONFIG_VALUE_1": "true",
                 "GIT_CONFIG_KEY_2": "gc.autoDetach", "GIT_CONFIG_VALUE_2": "false"}


class GitHostingError(RuntimeError):
    """A test asked the double's git hosting for something it cannot do (unknown repo, bad sha)."""


def git(git_dir: Path, *args: str, input: bytes | None = None) -> str:
    proc = subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True,
                          env=GIT_ENV | SERVER_CONFIG, input=input)  # local fetches between them: by id too
    if proc.returncode:
        raise GitHostingError(f"git {' '.join(args)} in {git_dir}: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout.decode()


@dataclass
class HostedRepo:
    full_name: str
    git_dir: Path
    public: bool = False
    owned: bool = True  # made by the double (removed with it), not a test's own repository


def match(path: str):
    """The (repo, rest) of a git smart-HTTP path, or None."""
    found = GIT_PATH.match(path)
    return (found["repo"], found["rest"]) if found else None


def basic_token(authorization: str | None) -> str | None:
    """The password of `Authorization: Basic ...` (git sends the token as the password)."""
    if not authorization or not authorization.lower().startswith("basic "):
        return None
    try:
        decoded = base64.b64decode(authorization.split(None, 1)[1], validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    return decoded.partition(":")[2] or None


class GitHosting:
    """The double's repositories. Tests program them; `serve` answers git's requests."""

    def __init__(self, root: Path | None = None):
        self._tmp = None if root else tempfile.TemporaryDirectory(prefix="github-double-git-")
        self.root = Path(root or self._tmp.name)
        self.repos: dict[str, HostedRepo] = {}

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()

    # ---- programming ------------------------------------------------------------------------
    def create(self, full_name: str, *, public: bool = False, source: Path | None = None) -> Path:
        """A bare repository `owner/name`; with `source`, a copy of that repository's branches and
        tags (a release's tag is what the worker compares the installed wheel with)."""
        git_dir = self.root / f"{full_name}.git"
        if git_dir.exists():
            shutil.rmtree(git_dir)
        git_dir.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", "--bare", str(git_dir)], check=True, env=GIT_ENV, capture_output=True)
        if source is not None:
            git(git_dir, "fetch", "-q", "--no-tags", str(source), "+refs/heads/*:refs/heads/*",
                "+refs/tags/*:refs/tags/*")
        self.repos[full_name] = HostedRepo(full_name, git_dir, public)
        return git_dir

    def host(self, full_name: str, path: Path, *, public: bool = False) -> None:
        """Serve a test's own repository (bare, or a work tree's .git) as `owner/name`."""
        path = Path(path)
        git_dir = path / ".git" if (path / ".git").is_dir() else path
        self.repos[full_name] = HostedRepo(full_name, git_dir, public, owned=False)

    def fork(self, full_name: str, of: str, *, public: bool = False) -> Path:
        return self.create(full_name, public=public, source=self.repos[of].git_dir)

    def delete(self, full_name: str) -> None:
        """The repository is gone (a deleted fork): 404 from now on."""
        hosted = self.repos.pop(full_name)
        if hosted.owned:
            shutil.rmtree(hosted.git_dir)

    def push(self, full_name: str, source: Path, refspec: str) -> None:
        """`git push --force` from a test's repository: `refspec` is `sha-or-ref:refs/heads/x`."""
        src, _, dst = refspec.partition(":")
        git(self.git_dir(full_name), "fetch", "-q", "--no-tags", str(source), f"+{src}:{dst}")

    def set_pull_head(self, full_name: str, number: int, sha: str, *, head_repo: str | None = None) -> None:
        """refs/pull/N/head of the base repository at `sha`, taken from the head's repository
        (a fork) when the base does not have it yet, as GitHub's fork network does."""
        base = self.git_dir(full_name)
        if head_repo and head_repo != full_name:
            git(base, "fetch", "-q", "--no-tags", str(self.git_dir(head_repo)), f"+{sha}:refs/pull/{number}/head")
        else:
            git(base, "update-ref", f"refs/pull/{number}/head", sha)

    def delete_ref(self, full_name: str, ref: str) -> None:
        git(self.git_dir(full_name), "update-ref", "-d", ref)

    def forget_unreachable(self, full_name: str) -> None:
        """Objects no ref reaches are deleted (what a force-push leaves, once GitHub collects it)."""
        git_dir = self.git_dir(full_name)
        git(git_dir, "reflog", "expire", "--expire=now", "--all")
        git(git_dir, "gc", "-q", "--prune=now")

    def git_dir(self, full_name: str) -> Path:
        if full_name not in self.repos:
            raise GitHostingError(f"the double hosts no repository {full_name}")
        return self.repos[full_name].git_dir

    # ---- answering ---------------------------------------------------------------------------
    def authorized(self, full_name: str, token: str | None, token_valid) -> tuple[int, str] | None:
        """None when the request may go on, else (status, message) as GitHub answers it."""
        hosted = self.repos.get(full_name)
        if token is not None and not token_valid(token):
            return 401, "Invalid username or token. Password authentication is not supported for Git operations."
        if hosted is None:
            return (404 if token else 401), "Repository not found."
        if token is None and not hosted.public:
            return 401, "Authentication required."
        return None

    def serve(self, full_name: str, rest: str, *, method: str, query: str, body: bytes,
              headers) -> tuple[int, dict, bytes]:
        """Run `git http-backend` for one request: (status, headers, body)."""
        if rest == "git-receive-pack" or "service=git-receive-pack" in query:
            return 403, {"Content-Type": "text/plain"}, b"Pushing to the GitHub double is not supported.\n"
        git_dir = self.repos[full_name].git_dir
        env = dict(GIT_ENV, **SERVER_CONFIG, GIT_PROJECT_ROOT=str(git_dir.parent), GIT_HTTP_EXPORT_ALL="1",
                   PATH_INFO=f"/{git_dir.name}/{rest}", REQUEST_METHOD=method, QUERY_STRING=query,
                   REMOTE_ADDR="127.0.0.1", CONTENT_TYPE=headers.get("Content-Type") or "",
                   CONTENT_LENGTH=str(len(body)))
        if headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = headers["Content-Encoding"]
        if headers.get("Git-Protocol"):  # what Apache's `SetEnvIf Git-Protocol` does (git-http-backend(1))
            env["GIT_PROTOCOL"] = headers["Git-Protocol"]
        proc = subprocess.run(["git", "http-backend"], input=body, capture_output=True, env=env, timeout=300)
        head, _, payload = proc.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = proc.stdout.partition(b"\n\n")
        status, out_headers = 200, {}
        for line in head.decode(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            elif key:
                out_headers[key.strip()] = value.strip()
        if proc.returncode and not proc.stdout:
            return 500, {"Content-Type": "text/plain"}, proc.stderr
        return status, out_headers, payload


def plain_body(body: bytes, headers) -> bytes:
    """The request as git wrote it (git gzips large ones)."""
    if (headers.get("Content-Encoding") or "").lower() in ("gzip", "x-gzip") and body:
        return gzip.decompress(body)
    return body


def wants(body: bytes) -> list[str]:
    """The object ids an upload-pack request asks for (its `want` pkt-lines)."""
    return [w.decode() for w in re.findall(rb"[0-9a-f]{4}want ([0-9a-f]{40})", body or b"")]


def read_body(rfile, headers) -> bytes:
    """A request body as git sends it: Content-Length, or chunked for large requests."""
    if "chunked" in (headers.get("Transfer-Encoding") or "").lower():
        chunks = []
        while True:
            size = int(rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            chunks.append(rfile.read(size))
            rfile.readline()
    length = int(headers.get("Content-Length") or 0)
    return rfile.read(length) if length else b""
