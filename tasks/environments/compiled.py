"""The compiled parts of a commit: the wheel's, a registry wheel's, or built from its sources.

The commit's **native key** hashes what feeds its extension modules, kernels, custom ops,
schema and code generation: the blob ids of the files the `pybind` recipe's `inputs` cover
(C/C++ sources and headers, CMake files, flatbuffer schemas, kernel YAML, codegen/, runtime/,
third-party/, extension/pybindings/, backends/xnnpack/, setup.py, pyproject.toml) and the
commits of its submodules (tasks/pipeline/native.build_key). Python elsewhere in the tree does
not feed them, so a Python-only change keeps its merge base's compiled parts.

In order:
1. **wheel**: the key equals that of the installed wheel's sources, found in the repository as
   the commit executorch/version.py names (`git_version`), else as the release's tag
   (`v1.4.1`): the installed package's .so files serve;
2. **registry**: the commit declares a release (version.txt, or a tree's own version.py) other
   than the installed one, the repository's tag of that release has the same key, and the
   registry has that release: its wheel, unpacked under <store>/registry/, serves;
3. **built**: ExecuTorch's Python extension modules built from the commit's own sources (the
   `pybind` recipe: its CMake build, in the sandbox, incremental, with the shared compiler
   cache), stored under <store>/built/<key>/ and shared by every PR with that merge base.
"""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from tasks.environments import registry
from tasks.pipeline import gitio, native, treepaths
from tasks.pipeline.tables import Recipe

VERSION = re.compile(r"^__version__\s*=\s*[\"']([^\"']+)[\"']", re.M)
GIT_VERSION = re.compile(r"^git_version\s*(?::[^=]*)?=\s*[\"']([0-9a-f]{7,40})[\"']", re.M)
RELEASE = re.compile(r"^\d+\.\d+\.\d+$")
LIMIT_MARK = "[etriage] stopped at the sandbox's"  # what native.build's log says of a limit


@dataclass(frozen=True)
class Wheel:
    """The installed executorch package, read from its version.py (never imported)."""

    package_dir: Path
    version: str  # 1.4.1+cpu
    commit: str  # the commit it was built from

    @property
    def release(self) -> str:
        return self.version.split("+", 1)[0]


def installed_wheel(package_dir: Path) -> Wheel:
    try:
        text = (Path(package_dir) / "version.py").read_text()
    except OSError:
        text = ""
    version, commit = VERSION.search(text), GIT_VERSION.search(text)
    return Wheel(Path(package_dir), version.group(1) if version else "", commit.group(1) if commit else "")


@dataclass
class Choice:
    source: str  # wheel | registry | built
    native_key: str
    release: str = ""  # the release whose compiled parts serve (wheel, registry)
    reference: str = ""  # the commit whose native key matched
    reason: str = ""  # in words, for the report
    whole: bool = True  # False: the repository does not hold the package; its files go over the wheel's


def native_key(repo: Path, commit: str, recipe: Recipe) -> str:
    return _native_key(str(Path(repo).resolve()), commit, recipe)


@functools.lru_cache(maxsize=256)
def _native_key(repo: str, commit: str, recipe: Recipe) -> str:
    return native.build_key(Path(repo), recipe, native.TOOLCHAINS["host"], commit)


def declared_release(repo: Path, commit: str) -> str:
    """The release a commit says it is: version.txt (the repository's), else __version__ of a
    version.py the tree carries at its top (a package-layout tree); "" when neither says."""
    for name, pattern in (("version.txt", None), ("version.py", VERSION)):
        try:
            text = gitio.show(repo, commit, name).decode(errors="replace")
        except gitio.GitError:
            continue
        value = pattern.search(text).group(1) if pattern and pattern.search(text) else text.strip()
        value = value.split("+", 1)[0].strip()
        if RELEASE.match(value):
            return value
    return ""


def _commit_of(repo: Path, rev: str) -> str:
    try:
        return gitio.git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except gitio.GitError:
        return ""


def release_commit(repo: Path, release: str, wheel: Wheel | None = None) -> tuple[str, str]:
    """(commit, how it was found) of a release's sources in this repository, or ("", why not)."""
    if wheel and wheel.release == release and wheel.commit:
        found = _commit_of(repo, wheel.commit)
        if found:
            return found, f"the wheel's commit {wheel.commit[:12]}"
    found = _commit_of(repo, f"refs/tags/v{release}")
    if found:
        return found, f"tag v{release}"
    return "", f"neither the wheel's commit nor a tag v{release} is in the repository"


def choose(repo: Path, commit: str, wheel: Wheel, recipe: Recipe, *, registry_ok: bool = True) -> Choice:
    key = native_key(repo, commit, recipe)
    wheel_ref, how = release_commit(repo, wheel.release, wheel) if wheel.release else ("", "no installed release")
    if wheel_ref and native_key(repo, wheel_ref, recipe) == key:
        return Choice("wheel", key, wheel.release, wheel_ref,
                      f"native sources equal the installed wheel's ({how}): its compiled parts serve")
    declared = declared_release(repo, commit)
    if registry_ok and declared and declared != wheel.release:
        ref, how_declared = release_commit(repo, declared)
        if ref and native_key(repo, ref, recipe) == key:
            return Choice("registry", key, declared, ref,
                          f"native sources equal release {declared}'s ({how_declared}): its registry wheel serves")
    why = "native sources differ from the installed wheel's" if wheel_ref else \
        f"the installed wheel's sources cannot be compared ({how})"
    return Choice("built", key, reason=f"{why}: built from this commit's sources")


# ---- getting them -------------------------------------------------------------------------------

@dataclass
class Parts:
    ok: bool
    package_dir: Path | None  # an executorch package directory holding them
    readable: tuple[Path, ...] = ()  # what a sandboxed run must see besides the interpreter
    reason: str = ""
    build: native.NativeBuild | None = None
    failures: list = None  # the engine's failures of a build that failed


def registry_parts(store: Path, release: str, log_dir: Path) -> Parts:
    directory = store / "registry" / f"executorch-{release}"
    got = registry.install(f"executorch=={release}", directory, log_dir / f"pip-executorch-{release}.log")
    if not got.ok:
        return Parts(False, None, reason=f"executorch {release} cannot be had from the registry: {got.reason}")
    return Parts(True, directory / "executorch", (directory,))


def built_parts(spec: native.BuildSpec, recipe: Recipe, commit: str, store: Path, table, classify,
                progress) -> Parts:
    """Build the recipe at `commit`; place what it stored into <store>/built/<key>/executorch."""
    try:
        built, failures = native.build(spec, recipe, commit, classify, progress=progress)
    except (OSError, gitio.GitError) as error:  # e.g. the build left no extension module
        return Parts(False, None, reason=f"the build of the compiled parts at {commit[:12]} failed: {error}")
    if built.status != "ok":
        if LIMIT_MARK in built.log:  # out of time or disk: the machine's, never the code's
            return Parts(False, None, reason=f"{built.summary()}: {built.log.split(LIMIT_MARK, 1)[1].strip()[:200]}",
                         build=built, failures=[])
        first = next((f.line for f in failures if f.line), "")
        return Parts(False, None, reason=built.summary() + (f": {first.strip()[:300]}" if first else ""),
                     build=built, failures=failures)
    key = native_key(spec.repo, commit, recipe)
    root = store / "built" / key if spec.use_cache else spec.run_dir / "built" / key
    package = root / "executorch"
    if not (root / "parts.json").is_file():
        tmp = root.with_name(f"{key}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        placed = {}
        for artifact in sorted(Path(built.artifacts_dir).iterdir()):
            part = next((p for p in table.built_parts if fnmatchcase(artifact.name, p.artifact)), None)
            if part is None:
                continue
            dest = treepaths.replace_target(tmp / "executorch", f"{part.package}/{artifact.name}")
            shutil.copy2(artifact, dest, follow_symlinks=False)
            placed[artifact.name] = part.package
        (tmp / "parts.json").write_text(json.dumps({"commit": commit, "key": key, "parts": placed,
                                                    "steps": built.steps}))
        try:
            os.rename(tmp, root)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    os.utime(root / "parts.json")
    return Parts(True, package, (root,), build=built)
