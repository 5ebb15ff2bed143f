"""A real OpenSSH server on loopback, started per test module: its own port, host keys,
authorized_keys and work root. It runs unprivileged: as the `etriage-device` user when the
tests run as root (scripts/system-deps.sh creates it; so does this fixture), else as the
current user. The device's runtime is this venv's Python with the executorch pybindings."""
from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import pytest

from tasks.devices import emulated, userland
from tasks.devices.android import AdbServer
from tasks.devices.faults import DeviceFault
from tasks.devices.inventory import Device
from tasks.devices.ssh import SshOptions

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
DEVICE_USER = "etriage-device"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def _device_user() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid())
    try:
        return pwd.getpwnam(DEVICE_USER)
    except KeyError:
        # not check=True: another test worker may have created the user first (getpwnam then finds it)
        made = subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                               "--shell", "/bin/sh", DEVICE_USER], capture_output=True, text=True)
        try:
            return pwd.getpwnam(DEVICE_USER)
        except KeyError:
            pytest.fail(f"useradd {DEVICE_USER} failed: {made.stderr.strip()}")


class Sshd:
    """One sshd; start(), stop(), new_host_key() (a device re-imaged: its key changes)."""

    def __init__(self, root: Path):
        if not Path(SSHD).exists():
            pytest.skip("OpenSSH server not installed (scripts/system-deps.sh installs openssh-server)")
        self.root, self.port, self.proc = root, _free_port(), None
        self.user = _device_user()
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)
        self.client_key = root / "client_key"
        self.host_key = root / "host_key"
        _keygen(self.client_key)
        _keygen(self.host_key)
        (root / "authorized_keys").write_text(Path(f"{self.client_key}.pub").read_text())
        self.known_hosts = root / "known_hosts"
        self._record_host_key()
        self.work_root = root / "device-tmp"
        self.work_root.mkdir(exist_ok=True)
        (root / "sshd_config").write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {self.host_key}",
            f"AuthorizedKeysFile {root / 'authorized_keys'}", f"PidFile {root / 'sshd.pid'}",
            "StrictModes no", "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
            "Subsystem sftp internal-sftp", "LogLevel ERROR", "MaxSessions 50", "MaxStartups 50", ""]))
        for path in (self.host_key, self.work_root, root / "authorized_keys"):
            os.chown(path, self.user.pw_uid, self.user.pw_gid)
        self.host_key.chmod(0o600)
        os.chown(root, self.user.pw_uid, self.user.pw_gid)

    def _record_host_key(self) -> None:
        key = Path(f"{self.host_key}.pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {key[0]} {key[1]}\n")

    def start(self) -> None:
        drop = [] if os.geteuid() != 0 else [
            "setpriv", f"--reuid={self.user.pw_uid}", f"--regid={self.user.pw_gid}", "--clear-groups", "--"]
        self.proc = subprocess.Popen([*drop, SSHD, "-D", "-e", "-f", str(self.root / "sshd_config")],
                                     stdout=subprocess.DEVNULL, stderr=open(self.root / "sshd.log", "ab"))
        for _ in range(200):  # until it listens (or has died)
            if self.proc.poll() is not None:
                pytest.fail(f"sshd exited: {(self.root / 'sshd.log').read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            time.sleep(0.05)
        pytest.fail("sshd did not start listening")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.proc = None

    def pull_the_plug(self) -> None:
        """The device vanishes: SIGKILL to this sshd and every process under it (sessions, the
        programs they run), by process id."""
        if not self.proc:
            return
        children: dict[int, list[int]] = {}
        for stat_file in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = stat_file.read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(stat_file.parent.name))
        doomed, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            doomed.append(pid)
            todo += children.get(pid, [])
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def new_host_key(self) -> None:
        """Replace the server's host key (known_hosts keeps the old one) and restart."""
        self.stop()
        self.host_key.unlink()
        Path(f"{self.host_key}.pub").unlink()
        _keygen(self.host_key)
        os.chown(self.host_key, self.user.pw_uid, self.user.pw_gid)
        self.start()

    def runtime(self) -> tuple[str, ...]:
        """The device's Python with executorch: this venv's interpreter when the device user may
        run it; for etriage-device (root's interpreter lives under a 0700 /root), the system
        Python of the same version over this venv's packages."""
        if os.geteuid() != 0:
            return (sys.executable,)
        system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
        if not Path(system).exists():
            pytest.skip(f"no {system} for the device user (the venv's interpreter is under /root)")
        return ("env", f"PYTHONPATH={sysconfig.get_paths()['purelib']}", system)

    def device(self, device_id: str = "loop-1", **fields) -> Device:
        values = dict(transport="ssh", address=f"{self.user.pw_name}@127.0.0.1:{self.port}",
                      soc=os.uname().machine, runtime=self.runtime(), work_root=str(self.work_root),
                      min_free_mb=1, identity=str(self.client_key), known_hosts=str(self.known_hosts),
                      backends=("portable", "xnnpack"))
        values.update(fields)
        return Device(id=device_id, **values)

    @property
    def options(self) -> SshOptions:
        return SshOptions(identity=str(self.client_key), known_hosts=str(self.known_hosts), connect_timeout=5)


@pytest.fixture
def sshd():
    # not under pytest's tmp dir: its 0700 parents would keep the device user out
    root = Path(tempfile.mkdtemp(prefix="etriage-sshd-"))
    server = Sshd(root)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def small_disk(sshd):
    """A 512 KiB tmpfs the device user owns: the device's disk, nearly full from the start."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = sshd.root / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=512k,uid={sshd.user.pw_uid},mode=0755",
                           "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def adb_server():
    adb = shutil.which("adb")
    if not adb:
        pytest.skip("adb not installed (scripts/system-deps.sh installs it)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([adb, "-P", str(port), "nodaemon", "server"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    server = AdbServer("127.0.0.1", port)
    for _ in range(200):
        try:
            server.devices()
            break
        except DeviceFault:
            if proc.poll() is not None:
                pytest.skip("the adb server did not start here")
            time.sleep(0.05)
    yield adb, port, server
    proc.terminate()
    proc.wait(timeout=10)


# --- the emulated arm64 userland (tasks/devices/userland.py): its own sshd in a network namespace

def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])}... exited {done.returncode}: {(done.stdout + done.stderr)[-2000:]}")


def userland_problem() -> str:
    """Why this machine cannot host the arm64 userland device ('' when it can)."""
    if os.geteuid() != 0:
        return "the arm64 userland device needs root (debootstrap, a network namespace, chroot)"
    missing = [tool for tool in ("debootstrap", "qemu-aarch64-static", "ip", "unshare", "chroot")
               if not shutil.which(tool)]
    if missing:
        return f"needs {', '.join(missing)} (scripts/system-deps.sh)"
    return ""


def build_userland(data_dir: Path | None = None) -> Path:
    """The cached arm64 userland (built on first use: minutes). Registers qemu-aarch64 in
    binfmt_misc (F flag) first: debootstrap's second stage runs the userland's programs."""
    problem = userland_problem()
    if problem:
        pytest.skip(problem)
    try:
        emulated.register_binfmt()
    except OSError as error:
        pytest.skip(f"binfmt_misc unavailable here ({error})")
    data_dir = data_dir or Path(os.environ.get("ETRIAGE_DATA_DIR") or Path.home() / ".cache" / "etriage")
    return userland.Userland(userland.host_suite()).build(data_dir, _run)


class EmulatedUserland:
    """The userland's own aarch64 sshd, chrooted, in a fresh network namespace reached over a
    veth pair; start(), stop(), pull_the_plug() (SIGKILL to it and everything under it)."""

    def __init__(self, root: Path, state: Path):
        self.state = state
        state.mkdir(parents=True, exist_ok=True)
        index = os.getpid() % 200 + 20
        network = userland.Network(f"etriage-emu-{os.getpid()}-{index}", index)
        self.launch = userland.Launch(root=root, state=state, network=network)
        self.client_key, self.host_key = state / "client_key", state / "host_key"
        _keygen(self.client_key)
        _keygen(self.host_key)
        self.launch.write_files(self.host_key, Path(f"{self.client_key}.pub").read_text())
        self.known_hosts = state / "known_hosts"
        self.known_hosts.write_text(self.launch.known_hosts_line(Path(f"{self.host_key}.pub").read_text()))
        userland.network_up(network, _run)
        self.proc = None

    def start(self) -> None:
        ip = self.launch.network.device_ip
        self.proc = subprocess.Popen(self.launch.sshd_command(), stdout=subprocess.DEVNULL,
                                     stderr=open(self.state / "sshd.log", "ab"), start_new_session=True)
        for _ in range(1200):  # an emulated sshd starts in seconds, not milliseconds
            if self.proc.poll() is not None:
                pytest.fail(f"the emulated sshd exited: {(self.state / 'sshd.log').read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection((ip, self.launch.port), timeout=1):
                return
            time.sleep(0.05)
        pytest.fail("the emulated sshd did not start listening")

    # the device vanishes: SIGKILL to its sshd and every process under it (sessions call setsid)
    pull_the_plug = stop = Sshd.pull_the_plug

    def close(self) -> None:
        self.stop()
        for cmd in self.launch.network.down_commands():
            subprocess.run(cmd, capture_output=True)

    def device(self, device_id: str = "arm64-1", **fields) -> Device:
        values = dict(transport="emulated", address=self.launch.address(), soc="emulated-arm64", runner="rebuilt",
                      runtime=("false",), work_root=self.launch.work_root, min_free_mb=1,
                      identity=str(self.client_key), known_hosts=str(self.known_hosts), backends=("portable",))
        values.update(fields)
        return Device(id=device_id, **values)


@pytest.fixture(scope="module")
def arm64_userland():
    return build_userland()


@pytest.fixture
def emulated_userland(arm64_userland):
    state = Path(tempfile.mkdtemp(prefix="etriage-emu-"))
    server = EmulatedUserland(arm64_userland, state)
    try:
        server.start()
        yield server
    finally:
        server.close()
        shutil.rmtree(state, ignore_errors=True)
