"""Native rebuilds: a change's C++ built incrementally, with a shared compiler cache.

Layout under the data directory (docs/NATIVE.md says why each piece is where it is):

    <data>/native/ccache/                         the compiler cache every build shares (CCACHE_DIR)
    <data>/native/<repo>/src/executorch/          ONE source checkout per repository, moved from
                                                  commit to commit by writing only the files that
                                                  differ, so unchanged files keep their mtimes
    <data>/native/<repo>/src.json                 the commit the checkout holds
    <data>/native/<repo>/build/<recipe>-<toolchain>/       a configured build folder per (recipe, toolchain)
    <data>/native/<repo>/build/<recipe>-<toolchain>.json   the commit its configure saw
    <data>/build-cache/<recipe>-<toolchain>-<key>/         the artifacts (executor_runner) of one build

<repo> is the repository's root commit: every clone of one project shares a checkout. <key>
hashes the recipe, the toolchain and the blob ids of every file the recipe's `inputs` cover, so
the merge base, built once, is never built again. CCACHE_BASEDIR is <data>/native: compiler
command lines hold paths relative to the build folder, identical in every repository's folder.

A build folder configured from another source directory, toolchain or recipe flags, or whose
CMakeCache.txt does not parse, is removed and configured from scratch (the report says why).
A reused folder is configured again, in place, when the recipe's input files were added or
removed since the commit its configure saw: CMake fixes globbed source lists (the portable
kernels' *.cpp) at configure time, so a change that adds or deletes a kernel would otherwise
fail to build, or build without its new file, for reasons that are not the change's.
Every build command runs in the sandbox (tasks.pipeline.sandbox.run_logged): the checkout is
read-only there, the build folder and the compiler cache writable, no network.
"""
from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tasks.pipeline import gitio, treepaths
from tasks.pipeline.sandbox import LOG_READ, run_logged, scrubbed_env, tail_text
from tasks.pipeline.tables import Recipe

CACHE_MAX_SIZE = "5G"
# arm64 Linux with g++-aarch64-linux-gnu; statically linked, so a device (or QEMU user mode with no
# arm64 userland) needs no libstdc++ or loader. flatc and the code generators are built for the host
# (ExecuTorch builds flatc as an external project with the host compiler).
AARCH64_TOOLCHAIN = """\
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")
"""


@dataclass(frozen=True)
class Toolchain:
    """What compiles: `host` (the machine's g++) or a cross compiler via a CMake toolchain file."""

    name: str
    toolchain_file: str = ""  # the file's text; written under <data>/native/toolchains/

    def cmake_args(self, native_dir: Path) -> list[str]:
        if not self.toolchain_file:
            return []
        # the file's name carries its content's hash: CMake reads a toolchain file only when it
        # configures a folder, so an edited toolchain must look like another one (a fresh folder)
        digest = hashlib.sha256(self.toolchain_file.encode()).hexdigest()[:12]
        path = native_dir / "toolchains" / f"{self.name}-{digest}.cmake"
        if not path.is_file() or path.read_text() != self.toolchain_file:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.toolchain_file)
        return [f"-DCMAKE_TOOLCHAIN_FILE={path}"]


TOOLCHAINS = {"host": Toolchain("host"), "aarch64-linux-gnu": Toolchain("aarch64-linux-gnu", AARCH64_TOOLCHAIN)}
# ExecuTorch's tests (-DEXECUTORCH_BUILD_TESTS=ON) add_subdirectory(third-party/googletest), a
# submodule the sources' archive leaves out: Debian's googletest sources (libgtest-dev's source
# package, /usr/src/googletest) stand in when the checkout's copy has no CMakeLists.txt.
GOOGLETEST = ("third-party/googletest", Path("/usr/src/googletest"))


def needs_googletest(recipe: Recipe) -> bool:
    return any(_cmake_bool(a.partition("=")[2]) == "ON" for c in recipe.commands[:1] for a in c
               if a.startswith("-DEXECUTORCH_BUILD_TESTS="))


def provide_googletest(src: Path, system: Path = GOOGLETEST[1]) -> str:
    """Fill the checkout's googletest submodule from the system's sources when it is missing;
    returns why it cannot be ("" when the checkout has it now)."""
    target = treepaths.inside(src, GOOGLETEST[0])
    if (target / "CMakeLists.txt").is_file():
        return ""
    if not (system / "CMakeLists.txt").is_file():
        return f"needs googletest: {GOOGLETEST[0]} is not in the sources and {system} is absent " \
               "(Debian's libgtest-dev and libgmock-dev: scripts/system-deps.sh)"
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        shutil.rmtree(target)
    shutil.copytree(system, target, symlinks=True)
    return ""


@dataclass
class NativeBuild:
    """One recipe built at one commit: what happened, where the artifacts are, what it cost."""

    recipe: str
    toolchain: str
    commit: str
    status: str  # ok | failed | not_run
    artifacts_dir: str = ""
    reason: str = ""
    log: str = ""  # the failed step's log, paths relative to the source root
    cached: bool = False  # artifacts from <data>/build-cache: nothing was built
    fresh_folder: str = ""  # why the build folder was configured from scratch ("" when reused)
    reconfigured: str = ""  # why a reused folder was configured again ("" when it was not)
    steps: dict[str, float] = field(default_factory=dict)  # checkout, configure, build, ... -> seconds
    compiled: list[str] = field(default_factory=list)  # sources the compiler really compiled
    from_ccache: list[str] = field(default_factory=list)  # sources the compiler cache answered
    ccache: dict[str, int] = field(default_factory=dict)  # counters of this build's compilations

    def summary(self) -> str:
        if self.status == "not_run":
            return f"{self.recipe} ({self.toolchain}): not run ({self.reason})"
        if self.cached:
            return f"{self.recipe} ({self.toolchain}) at {self.commit[:12]}: from the build cache"
        steps = ", ".join(f"{k} {v:.1f} s" for k, v in self.steps.items())
        hits, total = len(self.from_ccache), len(self.from_ccache) + len(self.compiled)
        rate = f", compiler cache {hits}/{total} hits" if total else ", nothing to compile"
        if self.compiled:
            names = ", ".join(self.compiled[:3]) + (f" and {len(self.compiled) - 3} more" if len(self.compiled) > 3 else "")
            rate += f"; compiled {names}"
        fresh = f"; fresh build folder: {self.fresh_folder}" if self.fresh_folder else ""
        if self.reconfigured:
            fresh += f"; configured again: {self.reconfigured}"
        return f"{self.recipe} ({self.toolchain}) at {self.commit[:12]}: {self.status} ({steps}{rate}){fresh}"


def native_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "native"


def repo_id(repo: Path, commit: str) -> str:
    roots = sorted(gitio.git(repo, "rev-list", "--max-parents=0", commit).split())
    return hashlib.sha256(" ".join(roots).encode()).hexdigest()[:12]


def build_key(repo: Path, recipe: Recipe, toolchain: Toolchain, commit: str) -> str:
    tree = gitio.git(repo, "ls-tree", "-r", "-z", "--full-tree", commit)
    inputs = []
    for rec in tree.split("\0"):
        if rec:
            meta, path = rec.split("\t", 1)
            if recipe.covers(path) or meta.startswith("160000"):  # submodules: their commits
                inputs.append((path, meta.split()[2]))
    payload = json.dumps({"recipe": recipe.name, "commands": recipe.commands, "artifacts": recipe.artifacts,
                          "toolchain": [toolchain.name, toolchain.toolchain_file], "inputs": sorted(inputs),
                          "googletest": _googletest_version() if needs_googletest(recipe) else ""})
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def _googletest_version() -> str:
    """The system googletest's top CMakeLists.txt (it names the version): a test build's key."""
    try:
        return hashlib.sha256((GOOGLETEST[1] / "CMakeLists.txt").read_bytes()).hexdigest()[:12]
    except OSError:
        return ""


@contextmanager
def locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ---- the source checkout -----------------------------------------------------------------

def sync_checkout(repo: Path, commit: str, src: Path, state_path: Path) -> str:
    """Make `src` hold `commit`'s files; returns how ("unchanged", "N file(s) written", "exported").

    Only files that differ are written, so the build system rebuilds only what changed. An
    unknown or interrupted state (no state file, a commit this repository lacks, a sync that
    died half-way) exports the whole tree again."""
    state = _read_json(state_path)
    old = state.get("commit", "")
    if old == commit and state.get("complete") and src.is_dir():
        return "unchanged"
    known = bool(old) and state.get("complete") and src.is_dir() and _has_commit(repo, old)
    state_path.write_text(json.dumps({"commit": commit, "complete": False}))
    if known:
        how = _apply_diff(repo, old, commit, src)
    else:
        if src.exists():
            shutil.rmtree(src)
        _export(repo, commit, src)
        how = "exported"
    state_path.write_text(json.dumps({"commit": commit, "complete": True}))
    return how


def _has_commit(repo: Path, commit: str) -> bool:
    try:
        gitio.git(repo, "cat-file", "-e", f"{commit}^{{commit}}")
        return True
    except gitio.GitError:
        return False


def _export(repo: Path, commit: str, dest: Path) -> None:
    """The commit's tree written file by file (what `git archive` would give, without its
    export-ignore/export-subst rewrites), then each submodule from the clone's own checkout of it."""
    dest.mkdir(parents=True)
    _write_entries(repo, dest, [e for e in _tree_entries(repo, commit) if e[0] != GITLINK])
    for path, sha in _submodules(repo, commit).items():
        _export_submodule(repo, path, sha, dest)


GITLINK, SYMLINK = "160000", "120000"
BLOB_BATCH = 2000  # blobs per `git cat-file --batch`: bounds what one read holds in memory


def _tree_entries(repo: Path, commit: str, paths: list[str] | None = None) -> list[tuple[str, str, str]]:
    """(mode, sha, path) of every entry of the commit's tree (gitlinks included), each path
    checked (treepaths.UnsafePath for the first that cannot be a file name)."""
    out = gitio.git(repo, "ls-tree", "-r", "-z", "--full-tree", commit, *(["--", *paths] if paths else []))
    entries = []
    for rec in out.split("\0"):
        if rec:
            meta, path = rec.split("\t", 1)
            mode, _, sha = meta.split()
            entries.append((mode, sha, treepaths.check(path)))
    return entries


def _write_entries(repo: Path, root: Path, entries: list[tuple[str, str, str]]) -> None:
    """The one writer of tree entries into a checkout: each destination made by
    treepaths.replace_target (checked, inside `root` after resolving the links already written,
    whatever was there removed, never followed). A symlink is written as a link: its text is data
    (never resolved by the worker; every later write still checks its parents); the sandboxed build
    sees it in its own mount tree."""
    for start in range(0, len(entries), BLOB_BATCH):
        batch = entries[start:start + BLOB_BATCH]
        blobs = gitio.cat_blobs(repo, sorted({sha for _, sha, _ in batch}))
        for mode, sha, path in batch:
            if sha not in blobs:
                raise gitio.GitError(f"{path}: blob {sha} is not in the repository")
            target = treepaths.replace_target(root, path)
            if mode == SYMLINK:
                text = blobs[sha].decode(errors="surrogateescape")
                if "\0" in text or not text:
                    raise treepaths.UnsafePath(f"{path!r}: a symbolic link with an empty or NUL target")
                os.symlink(text, target)
            else:
                target.write_bytes(blobs[sha])
                target.chmod(0o755 if mode == "100755" else 0o644)


def _submodules(repo: Path, commit: str, paths: list[str] | None = None) -> dict[str, str]:
    return {path: sha for mode, sha, path in _tree_entries(repo, commit, paths) if mode == GITLINK}


def _export_submodule(repo: Path, path: str, sha: str, dest: Path) -> None:
    """The submodule at `sha` from the clone's own checkout of it (<repo>/<path>), its entries
    through the same writer; a submodule the clone has not got leaves a marker saying so."""
    target = treepaths.inside(dest, path)
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    try:
        module = treepaths.inside(repo, path)
        _write_entries(module, target, [e for e in _tree_entries(module, sha) if e[0] != GITLINK])
    except gitio.GitError as exc:  # not checked out in the clone: the build says what is missing
        (target / ".etriage-missing-submodule").write_text(f"{path} at {sha}: {exc}\n")


def _apply_diff(repo: Path, old: str, new: str, src: Path) -> str:
    raw = gitio.git(repo, "diff", "--raw", "-z", "--no-renames", "--no-abbrev", old, new)
    fields = raw.split("\0")
    writes, deletes, modules = [], [], []
    i = 0
    while i + 1 < len(fields):
        meta, path = fields[i], treepaths.check(fields[i + 1])  # every path, before anything moves
        i += 2
        old_mode, new_mode, _, new_sha, status = meta.lstrip(":").split()
        if status == "D":
            deletes.append(path)
        elif new_mode == GITLINK:
            modules.append(path)
        else:
            if old_mode == GITLINK:
                deletes.append(path)
            writes.append((new_mode, new_sha, path))
    for path in deletes:
        target = treepaths.inside(src, path)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
    _write_entries(repo, src, writes)
    for path, sha in _submodules(repo, new, modules).items():
        _export_submodule(repo, path, sha, src)
    return f"{len(writes)} file(s) written, {len(deletes)} removed, {len(modules)} submodule(s) moved"


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


# ---- the build folder ----------------------------------------------------------------------

def read_cmake_cache(path: Path) -> dict[str, str]:
    """KEY -> value of a CMakeCache.txt; ValueError when a line is not `KEY:TYPE=VALUE`."""
    values = {}
    for n, line in enumerate(path.read_text(errors="strict").splitlines(), 1):
        if not line.strip() or line.startswith(("#", "//")):
            continue
        m = re.match(r"^([^:=\s][^:=]*):([A-Z_]+)=(.*)$", line) or re.match(r'^"([^"]+)":([A-Z_]+)=(.*)$', line)
        if not m:
            raise ValueError(f"{path}:{n}: not a cache entry: {line[:80]!r}")
        values[m.group(1)] = m.group(3)
    return values


def _cmake_bool(value: str) -> str:
    v = value.strip().upper()
    return "ON" if v in ("ON", "1", "YES", "TRUE", "Y") else "OFF" if v in ("OFF", "0", "NO", "FALSE", "N", "") else value


def foreign_reason(build: Path, src: Path, configure: list[str]) -> str:
    """Why `build` cannot be reused for this source dir and configure command ("" if it can)."""
    cache = build / "CMakeCache.txt"
    if not build.exists():
        return "no build folder yet"
    if not cache.is_file():
        return "the build folder has no CMakeCache.txt"
    try:
        values = read_cmake_cache(cache)
    except (ValueError, UnicodeDecodeError) as exc:
        return f"its CMakeCache.txt does not parse ({exc})"
    home = values.get("CMAKE_HOME_DIRECTORY") or values.get("ExecuTorch_SOURCE_DIR", "")
    if Path(home) != src:
        return f"it was configured from another source directory ({home or 'unknown'})"
    for arg in configure:
        m = re.match(r"^-D([A-Za-z0-9_]+)(?::[A-Z]+)?=(.*)$", arg)
        if not m:
            continue
        key, want = m.groups()
        have = values.get(key)
        if have is None:
            if key == "CMAKE_TOOLCHAIN_FILE":
                return "it was configured with another toolchain (none)"
            return f"it was configured without {key}"
        if have != want and _cmake_bool(have) != _cmake_bool(want):
            what = "toolchain" if key == "CMAKE_TOOLCHAIN_FILE" else "recipe flag"
            return f"it was configured with another {what}: {key}={have} (wants {want})"
    if "CMAKE_TOOLCHAIN_FILE" in values and not any(a.startswith("-DCMAKE_TOOLCHAIN_FILE") for a in configure):
        return f"it was configured with another toolchain ({values['CMAKE_TOOLCHAIN_FILE']})"
    if not (build / "build.ninja").is_file() and not (build / "Makefile").is_file():
        return "its configure step never finished (no build.ninja or Makefile)"
    return ""


def layout_change(repo: Path, configured_at: str, commit: str, recipe: Recipe) -> str:
    """Why a reused build folder, last configured at `configured_at`, must be configured again
    for `commit`: files of the recipe's inputs added or removed between the two; "" if none."""
    if configured_at == commit:
        return ""
    if not re.fullmatch(r"[0-9a-f]{40}", configured_at) or not _has_commit(repo, configured_at):
        return "the commit its configure saw is not known"
    out = gitio.git(repo, "diff", "--name-only", "-z", "--no-renames", "--diff-filter=AD", configured_at, commit)
    moved = [treepaths.check(path) for path in out.split("\0") if path and recipe.covers(path)]
    if not moved:
        return ""
    more = f" and {len(moved) - 1} more" if len(moved) > 1 else ""
    return f"files added or removed since {configured_at[:12]}: {moved[0]}{more}"


# ---- building --------------------------------------------------------------------------------

@dataclass(frozen=True)
class BuildSpec:
    """Where and with what: the workspace's parts a native build needs."""

    repo: Path
    data_dir: Path
    run_dir: Path
    python: str
    sandbox: object
    jobs: int = 2
    timeout: float = 3600
    use_cache: bool = True
    tool_env: tuple[tuple[str, str], ...] = ()
    shared_ccache: Path | None = None  # a directory build machines share: ccache's file: remote storage


def build(spec: BuildSpec, recipe: Recipe, commit: str, classify, toolchain: Toolchain = TOOLCHAINS["host"],
          progress=lambda msg: None) -> tuple[NativeBuild, list]:
    """Build `recipe` at `commit` -> (NativeBuild, the engine's failures of a failed build)."""
    result = NativeBuild(recipe.name, toolchain.name, commit, "ok")
    missing = [k for k in recipe.requires_env if not dict(spec.tool_env).get(k)]
    if missing:
        result.status, result.reason = "not_run", f"needs {', '.join(missing)} on this worker"
        return result, []
    start = time.monotonic()
    root = native_dir(spec.data_dir)
    key = build_key(spec.repo, recipe, toolchain, commit)
    artifacts = Path(spec.data_dir) / "build-cache" / f"{recipe.name}-{toolchain.name}-{key}"
    result.steps["key"] = round(time.monotonic() - start, 2)
    if spec.use_cache and (artifacts / "build.json").is_file():
        result.cached, result.artifacts_dir = True, str(artifacts)
        return result, []
    if not spec.use_cache:
        artifacts = spec.run_dir / "native" / artifacts.name
    repo_dir = root / repo_id(spec.repo, commit)
    src = repo_dir / "src" / "executorch"  # CMake wants the folder named executorch
    folder = repo_dir / "build" / f"{recipe.name}-{toolchain.name}"
    ccache_dir = root / "ccache"
    ccache_dir.mkdir(parents=True, exist_ok=True)
    with locked(repo_dir / ".lock"):
        t = time.monotonic()
        how = sync_checkout(spec.repo, commit, src, repo_dir / "src.json")
        result.steps["checkout"] = round(time.monotonic() - t, 2)
        progress(f"native {recipe.name}: checkout at {commit[:12]}: {how}")
        if needs_googletest(recipe):
            missing_gtest = provide_googletest(src)
            if missing_gtest:
                result.status, result.reason = "not_run", missing_gtest
                return result, []
        values = {"src": str(src), "build": str(folder), "jobs": str(spec.jobs), "python": spec.python}
        commands = [_expand(c, values, toolchain.cmake_args(root)) for c in recipe.commands]
        toolchain_dir = [root / "toolchains"] if toolchain.toolchain_file else []  # the sandbox reads the file
        configure, build_steps = commands[0], commands[1:]
        # a sub-build that writes into its own sources (flatcc puts lib/ and bin/ there): those
        # directories, made in our checkout, are the only writable part of it
        in_sources = [treepaths.replace_target(src, rel + "/.etriage-writable").parent for rel in recipe.writable_sources]
        for path in in_sources:
            path.mkdir(parents=True, exist_ok=True)
        result.fresh_folder = foreign_reason(folder, src, configure)
        configured = folder.with_name(folder.name + ".json")  # outside the sandbox's writable folder
        if result.fresh_folder:
            if folder.exists():
                shutil.rmtree(folder)
            folder.mkdir(parents=True)
        else:
            result.reconfigured = layout_change(spec.repo, str(_read_json(configured).get("commit", "")),
                                                commit, recipe)
        statslog = spec.run_dir / "native" / f"ccache-{recipe.name}-{commit[:12]}.log"
        statslog.parent.mkdir(parents=True, exist_ok=True)
        statslog.write_text("")
        env = scrubbed_env(spec.run_dir, sandbox=spec.sandbox, python=spec.python, pass_through=dict(spec.tool_env),
                           extra={"CCACHE_DIR": str(ccache_dir), "CCACHE_BASEDIR": str(root),
                                  "CCACHE_MAXSIZE": CACHE_MAX_SIZE, "CCACHE_STATSLOG": str(statslog),
                                  "CMAKE_C_COMPILER_LAUNCHER": "ccache", "CMAKE_CXX_COMPILER_LAUNCHER": "ccache",
                                  "CMAKE_BUILD_PARALLEL_LEVEL": str(spec.jobs),
                                  # another build machine's objects: ccache's remote storage is a
                                  # shared directory (the sandbox has no network for its redis:)
                                  **({"CCACHE_REMOTE_STORAGE": f"file:{spec.shared_ccache}"}
                                     if spec.shared_ccache else {})})
        shared = [Path(spec.shared_ccache)] if spec.shared_ccache else []
        for path in shared:
            path.mkdir(parents=True, exist_ok=True)
        steps = ([("configure", configure)] if result.fresh_folder or result.reconfigured else []) + \
            [(f"build{'' if i == 0 else i + 1}", c) for i, c in enumerate(build_steps)]
        for name, cmd in steps:
            t = time.monotonic()
            done = run_logged(cmd, cwd=folder, env=env, log_path=spec.run_dir / "native" /
                              f"{recipe.name}-{commit[:12]}-{name}.log", timeout=spec.timeout,
                              sandbox=spec.sandbox, python=spec.python, readable=[src, *toolchain_dir],
                              writable=[folder, ccache_dir, *in_sources, *shared], outputs=[statslog])
            result.steps[name] = round(time.monotonic() - t, 2)
            progress(f"native {recipe.name}: {name} {'ok' if done.returncode == 0 else 'FAILED'} "
                     f"in {done.seconds:.1f} s")
            if done.returncode != 0:
                _read_stats(result, statslog, src)
                text = relative_paths(done.tail(LOG_READ), src)
                if done.limit:
                    text += f"\n[etriage] stopped at the sandbox's {done.limit}\n"
                result.status, result.log = "failed", text
                result.reason = f"{recipe.name}: {name} failed" + (f" ({done.limit})" if done.limit else "")
                if name == "configure":  # never reuse a half-configured folder
                    shutil.rmtree(folder, ignore_errors=True)
                    configured.unlink(missing_ok=True)
                return result, list(classify(text, job_name=f"build {recipe.name}", failed=True))
            if name == "configure":
                configured.write_text(json.dumps({"commit": commit}))
        _read_stats(result, statslog, src)
        t = time.monotonic()
        result.artifacts_dir = str(_store(folder, recipe, artifacts, result, spec.use_cache))
        result.steps["store"] = round(time.monotonic() - t, 2)
    return result, []


def _expand(command, values: dict[str, str], toolchain_args: list[str]) -> list[str]:
    out = []
    for arg in command:
        if arg == "{toolchain}":
            out += toolchain_args
        else:
            out.append(arg.format(**values))
    return out


def relative_paths(text: str, src: Path) -> str:
    """Compiler messages name files relative to the source root (what the diff and the
    annotations use): the checkout's absolute path and the ../../src/executorch/ that the
    compiler cache's base dir makes both go."""
    text = text.replace(f"{src}/", "")
    return re.sub(r"(?:\.\./)+src/executorch/", "", text)


def _read_stats(result: NativeBuild, statslog: Path, src: Path) -> None:
    """ccache's stats log: "# <source>" then the counters of that compilation."""
    counters: dict[str, int] = {}
    current = ""
    try:
        lines = tail_text(statslog, LOG_READ).splitlines()  # the sandbox writes it
    except OSError:
        return
    for line in lines:
        if line.startswith("# "):
            current = relative_paths(line[2:].strip(), src)
            continue
        name = line.strip()
        if not name:
            continue
        counters[name] = counters.get(name, 0) + 1
        if name in ("direct_cache_hit", "preprocessed_cache_hit"):
            result.from_ccache.append(current)
        elif name in ("cache_miss", "compile_failed"):
            result.compiled.append(current)
    result.ccache = counters


def artifact_files(folder: Path, rel: str) -> list[Path]:
    """The files one `artifacts` entry names in the build folder: a path or a glob, or several
    separated by `|`, the first that names any file winning (a module the sources renamed:
    ExecuTorch's pybindings are `_portable_lib*.so` in 1.4 and `_C*.so` on main since #21816)."""
    for choice in rel.split("|"):
        found = sorted(folder.glob(choice)) if glob.has_magic(choice) else [folder / choice]
        found = [path for path in found if path.exists() or path.is_symlink()]
        if found:
            return found
    return []


def _store(folder: Path, recipe: Recipe, artifacts: Path, result: NativeBuild, use_cache: bool) -> Path:
    """Copy the recipe's artifacts out of the build folder (which the next commit rewrites)."""
    tmp = artifacts.with_name(artifacts.name + f".tmp{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for rel in recipe.artifacts:  # a glob names files whose ABI tag is the interpreter's
        found = artifact_files(folder, rel)
        if not found:
            raise FileNotFoundError(f"{recipe.name}: the build left no {' or '.join(rel.split('|'))} in {folder}")
        for path in found:  # the build folder is the sandbox's to write: a link there is refused
            try:
                source = treepaths.regular_file_inside(folder, path.relative_to(folder).as_posix())
            except (treepaths.UnsafePath, ValueError) as unsafe:
                raise OSError(f"{recipe.name}: artefact {rel} not collected: {unsafe}") from None
            shutil.copy2(source, treepaths.replace_target(tmp, path.name), follow_symlinks=False)
    (tmp / "build.json").write_text(json.dumps({"recipe": recipe.name, "toolchain": result.toolchain,
                                                "commit": result.commit, "steps": result.steps,
                                                "compiled": len(result.compiled),
                                                "from_ccache": len(result.from_ccache)}))
    if not use_cache:  # the run's own copy, gone with the run's directory
        shutil.rmtree(artifacts, ignore_errors=True)
        os.rename(tmp, artifacts)
        return artifacts
    try:
        os.rename(tmp, artifacts)  # atomic; another run may have stored the same key first
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return artifacts
