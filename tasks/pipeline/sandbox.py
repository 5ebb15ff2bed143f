"""How the pipeline runs code from a change: the one door every stage goes through.

`run_logged` runs a command from (or over) a change's tree inside bubblewrap:
- new PID, mount, IPC, UTS, network (no interface but its own loopback) and cgroup
  namespaces; a new user namespace where the run is uid/gid 65534 with no capabilities,
  no_new_privs, and no further user namespaces;
- a root that holds only what a run needs: /usr (and the /bin, /lib* links), a few /etc
  files, the interpreter (venv + base install) and etriage's probe and pytest-plugin code,
  read-only; the paths the caller names read-only (`readable`: the overlay, sources) or
  writable (`writable`: the run's own work directory); a size-limited tmpfs /tmp that is
  also HOME and TMPDIR; a private /proc and a minimal /dev. Nothing else exists in there;
- limits: wall-clock (the whole process tree is killed), CPU time, address space, processes,
  file size, and the tmpfs size.
When the worker runs as root, bubblewrap starts privileged only to build that root, and the
run then drops to the unprivileged `etriage-sandbox` user (scripts/system-deps.sh creates it)
before its user namespace is made: files root owns stay root's, so a 0600 file stays
unreadable even if it were bound. docs/SANDBOX.md says what this blocks and what it does not.

Where bubblewrap cannot start, `Sandbox.problem()` says why and `run_logged` refuses to run
anything (`SandboxUnavailable`): there is no bare fallback. `Sandbox(enabled=False)` is for
`etriage triage --no-sandbox` on a developer's own checkout, never for the service.
The environment is scrubbed either way: no token, key or proxy of the bot's reaches a run.
"""
from __future__ import annotations

import functools
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# Variables a worker may pass through on purpose (not secrets: tool locations).
PASS_THROUGH = ("QNN_SDK_ROOT", "ANDROID_NDK_ROOT", "LD_LIBRARY_PATH")
SANDBOX_UID = 65534
SANDBOX_USER = "etriage-sandbox"
TASKS_DIR = Path(__file__).resolve().parents[1]
# etriage's own code a sandboxed run imports: `python -m tasks.probes` (its QNN probes use
# tasks/qnn/) and the pytest plugin.
OWN_CODE = (TASKS_DIR / "__init__.py", TASKS_DIR / "probes", TASKS_DIR / "qnn", TASKS_DIR / "pipeline" / "pytest_plugin")
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime")


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot start here; nothing of the change was run."""


@dataclass(frozen=True)
class Limits:
    cpu_seconds: int = 3600
    memory_bytes: int = 8 << 30  # RLIMIT_AS: torch maps ~2-3 GB of address space on import
    processes: int = 256  # RLIMIT_NPROC inside the run's user namespace (threads count)
    file_bytes: int = 2 << 30  # RLIMIT_FSIZE: any one file, the run's log included
    tmp_bytes: int = 1 << 30  # the tmpfs /tmp (HOME, TMPDIR, pytest's tmp_path)


@dataclass(frozen=True)
class Sandbox:
    enabled: bool = True  # False only for `etriage triage --no-sandbox` on one's own checkout
    limits: Limits = field(default_factory=Limits)
    user: str = SANDBOX_USER  # who runs the change when the worker is root
    bwrap: str = "bwrap"

    def problem(self) -> str | None:
        """None when a sandboxed run can start here, else why not (cached per process)."""
        return _problem(self) if self.enabled else None

    def command(self, cmd: list[str], *, cwd: Path, python: str, readable=(), writable=()) -> list[str]:
        """The argv that runs `cmd` inside the sandbox."""
        binds = [("ro", p) for p in _runtime_paths(python)] + [("ro", Path(p)) for p in readable] \
            + [("rw", Path(p)) for p in writable]
        mounts = ["--ro-bind", "/usr", "/usr"]
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            top = Path("/") / name
            if top.is_symlink():
                mounts += ["--symlink", os.readlink(top), str(top)]
            elif top.is_dir():
                mounts += ["--ro-bind", str(top), str(top)]
        mounts += ["--perms", "0755", "--dir", "/etc"]
        for name in ETC_FILES:
            mounts += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        mounts += ["--proc", "/proc", "--dev", "/dev",
                   "--perms", "1777", "--size", str(self.limits.tmp_bytes), "--tmpfs", "/tmp"]
        dests = []
        for mode, path in binds:
            if str(path) in dests or not path.exists():
                continue
            dests.append(str(path))
            mounts += ["--ro-bind" if mode == "ro" else "--bind", str(path), str(path)]
        # bubblewrap makes the parents of each mount point 0700: open them for the run's user
        for parent in sorted({str(a) for d in dests for a in Path(d).parents if str(a) != "/"}):
            if not any(parent == d or parent.startswith(d + "/") for d in dests) and not parent.startswith("/usr"):
                mounts += ["--chmod", "1777" if parent == "/tmp" else "0755", parent]
        mounts += ["--remount-ro", "/", "--chdir", str(cwd)]
        limits = ["/usr/bin/prlimit", f"--cpu={self.limits.cpu_seconds}", f"--as={self.limits.memory_bytes}",
                  f"--nproc={self.limits.processes}", f"--fsize={self.limits.file_bytes}", "--core=0", "--"]
        isolate = ["--die-with-parent", "--new-session", "--hostname", "etriage-sandbox"]
        if os.geteuid() != 0:
            return [self.bwrap, "--unshare-all", "--disable-userns", "--uid", str(SANDBOX_UID),
                    "--gid", str(SANDBOX_UID), "--cap-drop", "ALL", *isolate, *mounts, "--", *limits, *cmd]
        # root: a privileged bwrap builds the root and namespaces (keeping its caps only long
        # enough for setpriv to drop to the sandbox user), whose own bwrap makes the user
        # namespace (uid 65534 inside, every capability dropped).
        user = pwd.getpwnam(self.user)
        return [self.bwrap, "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-pid",
                "--unshare-cgroup-try", *isolate, *mounts, "--",
                "/usr/bin/setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
                self.bwrap, "--unshare-user", "--disable-userns", "--uid", str(SANDBOX_UID),
                "--gid", str(SANDBOX_UID), "--dev-bind", "/", "/", "--die-with-parent", "--cap-drop", "ALL",
                "--chdir", str(cwd),
                "--", *limits, *cmd]

    def give(self, paths) -> None:
        """Make the writable paths the sandbox user's (root worker only)."""
        if os.geteuid() != 0:
            return
        user = pwd.getpwnam(self.user)
        for path in paths:
            os.lchown(path, user.pw_uid, user.pw_gid)
            for root, dirs, files in os.walk(path):
                for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                    os.lchown(name, user.pw_uid, user.pw_gid)


def _runtime_paths(python: str) -> list[Path]:
    """The interpreter a run uses: its venv and its base installation, and etriage's own code."""
    exe = Path(python)
    paths = []
    if (exe.parent.parent / "pyvenv.cfg").is_file():
        paths.append(exe.parent.parent)
    base = exe.resolve().parent.parent
    if not str(base).startswith("/usr/"):
        paths.append(base)
    return paths + [p for p in OWN_CODE if p.exists()]


@functools.lru_cache(maxsize=None)
def _problem(sandbox: Sandbox) -> str | None:
    if not shutil.which(sandbox.bwrap):
        return "bubblewrap (bwrap) is not installed; scripts/system-deps.sh installs it"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(sandbox.user)
        except KeyError:
            return f"the unprivileged user {sandbox.user!r} does not exist; scripts/system-deps.sh creates it"
    cmd = sandbox.command(["/bin/true"], cwd=Path("/"), python=sys.executable)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bubblewrap could not start: {error}"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        return f"bubblewrap could not start here ({last})"
    return None


def scrubbed_env(run_dir: Path, *, sandbox: Sandbox | None = None, pythonpath: list[str] | None = None,
                 extra: dict[str, str] | None = None,
                 pass_through: dict[str, str] | None = None, python: str = sys.executable) -> dict[str, str]:
    """Only what a run needs. In the sandbox HOME and TMPDIR are its tmpfs /tmp; without it
    (--no-sandbox), <run_dir>/home and <run_dir>/tmp."""
    if sandbox is None or sandbox.enabled:
        home = tmp = Path("/tmp")
    else:
        home, tmp = run_dir / "home", run_dir / "tmp"
        home.mkdir(parents=True, exist_ok=True)
        tmp.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.pathsep.join([str(Path(python).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LOGNAME": "etriage-sandbox",  # getpass.getuser(): there is no passwd file inside
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        # Read the installed package's .pyc files but never write into the shared venv.
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    for key, value in (pass_through or {}).items():
        if key in PASS_THROUGH and value:
            env[key] = value
    env.update(extra or {})
    return env


@dataclass
class Completed:
    returncode: int | None  # None: killed at the wall-clock limit
    seconds: float
    log_path: Path
    limit: str = ""  # the limit the run hit, in words ("" when none is known)

    def tail(self, limit: int = 6000) -> str:
        return tail_text(self.log_path, limit)


# What a run that hit a limit leaves in its log or exit status, and how the report names it.
LIMIT_SIGNS = (
    ("MemoryError", "memory limit (address space {memory})"),
    ("Cannot allocate memory", "memory limit (address space {memory})"),
    ("No space left on device", "disk limit (tmpfs /tmp of {tmp})"),
    ("File too large", "file-size limit ({file})"),
    ("Resource temporarily unavailable", "process limit ({processes} processes)"),
    ("can't start new thread", "process limit ({processes} processes)"),
)


def _limit_hit(sandbox: Sandbox, returncode: int | None, log_text: str) -> str:
    lim = sandbox.limits
    words = {"memory": _size(lim.memory_bytes), "tmp": _size(lim.tmp_bytes), "file": _size(lim.file_bytes),
             "processes": lim.processes}
    if returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        return f"CPU-time limit ({lim.cpu_seconds} s)"
    if returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        return f"file-size limit ({words['file']})"
    if returncode == 0:
        return ""
    for sign, name in LIMIT_SIGNS:
        if sign in log_text:
            return name.format(**words)
    return ""


def _size(n: int) -> str:
    return f"{n / (1 << 30):g} GiB" if n >= 1 << 30 else f"{n / (1 << 20):g} MiB"


def run_logged(cmd: list[str], *, cwd: Path, env: dict[str, str], log_path: Path, timeout: float,
               sandbox: Sandbox | None = None, readable=(), writable=(), outputs=(),
               python: str = sys.executable) -> Completed:
    """Run cmd (in the sandbox) with stdout+stderr into log_path; never raises on failure or
    timeout. Raises SandboxUnavailable, having run nothing, when the sandbox cannot start.

    `readable` paths are bound read-only, `writable` directories read-write (no quota beyond
    the file-size limit: use them only for builds that must persist), `outputs` are single
    files the run may rewrite (a JUnit report) inside otherwise read-only directories."""
    sandbox = sandbox or Sandbox()
    start = time.monotonic()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv = cmd
    if sandbox.enabled:
        problem = sandbox.problem()
        if problem:
            raise SandboxUnavailable(problem)
        writable = [Path(p) for p in writable] + [Path(p) for p in outputs]
        for output in outputs:
            Path(output).write_bytes(b"")
        sandbox.give(writable)
        argv = sandbox.command(cmd, cwd=cwd, python=python, readable=readable, writable=writable)
    with open(log_path, "wb") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(argv, cwd=cwd if not sandbox.enabled else "/", env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_tree(proc)
            returncode = None
    limit = f"wall-clock limit ({timeout:.0f} s)" if returncode is None else \
        _limit_hit(sandbox, returncode, _tail_bytes(log_path)) if sandbox.enabled else ""
    if limit:
        with open(log_path, "ab") as log:
            log.write(f"\n[etriage] stopped at the sandbox's {limit}\n".encode())
    return Completed(returncode, time.monotonic() - start, log_path, limit)


TREE_GONE_WAIT = 15.0  # seconds a stopped run's processes may take to be gone (a fork bomb's, under load)


def descendants(root: int) -> list[int]:
    """Every live process below `root`, from /proc's parent links (a new session or PID
    namespace inside the sandbox does not hide them from the worker's side)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie runs nothing; its parent or the kernel reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop_tree(proc: subprocess.Popen, wait: float = TREE_GONE_WAIT) -> list[int]:
    """Kill a run's whole process tree and return once none of it runs any more: the group,
    and every process below it (the sandbox's inner session and PID namespace, which
    --die-with-parent would only take down asynchronously). Returns the pids still running
    after `wait` seconds (none, unless the kernel is that slow)."""
    tree = descendants(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()
    deadline = time.monotonic() + wait
    while True:
        left = [pid for pid in tree if running(pid)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


LOG_READ = 1 << 20  # characters of a log the worker reads to classify or search it (its end)


def tail_text(path: Path, limit: int) -> str:
    """The last `limit` characters of a run's log, read by seeking from its end: what is held is
    bounded by `limit` (at most 4 bytes a character) whatever the file's apparent size. A run
    writes its own log, and a sparse 2 GiB one is 8 KB on disk; its holes read as NUL, which are
    dropped (no text store takes them)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            want = min(size, 4 * limit)
            handle.seek(size - want)
            data = handle.read(want)
    except FileNotFoundError:
        return ""
    return data.decode(errors="replace").replace("\0", "")[-limit:]


def _tail_bytes(path: Path, size: int = 20000) -> str:
    return tail_text(path, size)
