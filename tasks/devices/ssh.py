"""The ssh transport: a Linux device (a board, a device host, the emulated arm64 userland) over
SSH with paramiko, in this process (no `ssh` child process): make a work dir, push, run, pull,
clean up. Host keys are checked against the lab's known_hosts and an unknown or changed key is
refused; only key authentication is used.

Every failure comes out as a DeviceFault: refused / unreachable (connect), host_key, auth,
offline (the connection dropped mid-run), timeout (the device-side `timeout` killed the run, or
the host gave up waiting), disk_full (a push failed with the work dir's file system full).
"""
from __future__ import annotations

import contextlib
import errno
import os
import shlex
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko

from tasks.devices.faults import DeviceFault
from tasks.devices.inventory import Device

OUTPUT_LIMIT = 4 << 20  # keep the last 4 MiB of a run's output
SFTP_TIMEOUT = 120.0  # one file operation with no progress for this long: the device is gone
GRACE_SECONDS = 15  # after the device-side time limit, how long the host still waits


@dataclass
class Ran:
    returncode: int
    output: str  # stdout and stderr, interleaved as the device wrote them
    seconds: float


@dataclass(frozen=True)
class SshOptions:
    identity: str  # private key file
    known_hosts: str  # the lab's known_hosts
    connect_timeout: float = 10.0


class SshTransport:
    """One connection to one device; a context manager."""

    def __init__(self, device: Device, options: SshOptions):
        self.device, self.options = device, options
        self.client: paramiko.SSHClient | None = None

    def __enter__(self) -> "SshTransport":
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _fault(self, kind: str, detail: str) -> DeviceFault:
        return DeviceFault(kind, detail, self.device.describe())

    def connect(self) -> None:
        user, host, port = self.device.ssh_parts()
        client = paramiko.SSHClient()
        if not Path(self.options.known_hosts).is_file():
            raise self._fault("host_key", f"no known_hosts file at {self.options.known_hosts}")
        client.load_host_keys(self.options.known_hosts)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        t = self.options.connect_timeout
        try:
            client.connect(host, port, username=user, key_filename=self.options.identity, timeout=t,
                           banner_timeout=t, auth_timeout=t, allow_agent=False, look_for_keys=False)
        except paramiko.BadHostKeyException as error:
            raise self._fault("host_key", f"ssh host key of {host} port {port} changed "
                                          f"(got {error.key.get_fingerprint().hex()})") from None
        except paramiko.AuthenticationException as error:
            raise self._fault("auth", f"ssh {user}@{host} port {port}: {error}") from None
        except paramiko.ssh_exception.NoValidConnectionsError as error:
            refused = all(e.errno == errno.ECONNREFUSED for e in error.errors.values())
            raise self._fault("refused" if refused else "unreachable",
                              f"ssh: connect to host {host} port {port}: "
                              f"{'Connection refused' if refused else error}") from None
        except (socket.timeout, TimeoutError):
            raise self._fault("unreachable", f"ssh: connect to host {host} port {port}: "
                                             "Connection timed out") from None
        except paramiko.SSHException as error:
            kind = "host_key" if "known_hosts" in str(error) else "protocol"
            raise self._fault(kind, f"ssh {host} port {port}: {error}") from None
        except (EOFError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
            # accepted, then closed or reset before the ssh banner (a dying or busy sshd): which
            # of these paramiko raises depends on whether the reset meets its write or its read;
            # a connection never made is NoValidConnectionsError or a timeout, above
            raise self._fault("protocol", f"ssh {host} port {port}: the connection was closed "
                                          "during the ssh handshake") from None
        except OSError as error:
            raise self._fault("unreachable", f"ssh: connect to host {host} port {port}: {error}") from None
        self.client = client

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    def _sftp(self) -> paramiko.SFTPClient:
        if self.client is None:
            raise self._fault("offline", "not connected")
        sftp = self.client.open_sftp()
        sftp.get_channel().settimeout(SFTP_TIMEOUT)
        return sftp

    def _transport(self) -> paramiko.Transport:
        transport = self.client.get_transport() if self.client else None
        if transport is None or not transport.is_active():
            raise self._fault("offline", "the ssh connection is closed")
        return transport

    # --- commands -----------------------------------------------------------------------

    def run(self, argv: list[str], *, timeout: float, cwd: str = "", env: dict[str, str] | None = None) -> Ran:
        """Run argv on the device; the device's `timeout` kills it at `timeout` seconds.
        A non-zero exit is returned (the program's failure); a lost connection or the
        time limit raise DeviceFault."""
        prefix = f"cd {shlex.quote(cwd)} && " if cwd else ""
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        command = (f"{prefix}exec timeout -k 5 {max(1, int(timeout))} "
                   + (f"env {assignments} " if assignments else "") + f"{shlex.join(argv)} 2>&1")
        start = time.monotonic()
        try:
            channel = self._transport().open_session()
            channel.settimeout(1.0)
            channel.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as error:
            raise self._fault("offline", f"could not start a command: {error}") from None
        chunks, size, deadline = [], 0, start + timeout + GRACE_SECONDS
        try:
            while True:
                try:
                    data = channel.recv(65536)
                except socket.timeout:
                    if time.monotonic() > deadline:
                        raise self._fault("timeout", f"no end after {timeout:.0f} s (+{GRACE_SECONDS} s grace): "
                                                     f"{shlex.join(argv)[:200]}") from None
                    if not self._transport().is_active():
                        raise self._fault("offline", f"during {shlex.join(argv)[:200]}") from None
                    continue
                if not data:
                    break
                chunks.append(data)
                size += len(data)
                while size > OUTPUT_LIMIT and len(chunks) > 1:
                    size -= len(chunks.pop(0))
            waited = time.monotonic()
            while not channel.exit_status_ready():
                if not self._transport().is_active() or time.monotonic() - waited > GRACE_SECONDS:
                    raise self._fault("offline", f"no exit status from {shlex.join(argv)[:200]}")
                time.sleep(0.05)
            code = channel.recv_exit_status()
        except (EOFError, paramiko.SSHException, OSError) as error:
            if isinstance(error, DeviceFault):
                raise
            raise self._fault("offline", f"during {shlex.join(argv)[:200]}: {error or type(error).__name__}") from None
        finally:
            with contextlib.suppress(EOFError, OSError, paramiko.SSHException):
                channel.close()  # on a dead connection closing fails too; the fault says why
        output = b"".join(chunks).decode(errors="replace")
        if code == -1:
            # No exit status: the connection went down (offline), or the program was killed by a
            # signal (sshd sends exit-signal, which paramiko does not keep): the program's end.
            try:
                self._transport().open_session(timeout=GRACE_SECONDS).close()
            except (paramiko.SSHException, OSError, EOFError) as error:
                raise self._fault("offline", f"during {shlex.join(argv)[:200]}: the session ended without "
                                             f"an exit status and the connection is gone ({error})") from None
            output += "\n[etriage] the program was killed by a signal (no exit status)\n"
        if code in (124, 137):  # coreutils timeout: TERM then KILL
            raise self._fault("timeout", f"killed at the time limit ({timeout:.0f} s): {shlex.join(argv)[:200]}")
        return Ran(code, output, round(time.monotonic() - start, 3))

    def check(self, argv: list[str], *, timeout: float = 60) -> str:
        """A housekeeping command that must succeed (mkdir, df, uname): its output."""
        ran = self.run(argv, timeout=timeout)
        if ran.returncode != 0:
            raise self._fault("protocol", f"{shlex.join(argv)} exited {ran.returncode}: {ran.output.strip()[-300:]}")
        return ran.output

    def machine(self) -> str:
        return self.check(["uname", "-m"]).strip()

    def free_kib(self, path: str) -> int:
        lines = self.check(["df", "-Pk", path]).strip().splitlines()
        return int(lines[-1].split()[3])

    @contextlib.contextmanager
    def workdir(self):
        """A fresh directory under the device's work root, removed afterwards (even after a
        fault, when the device is still there)."""
        path = self.check(["mktemp", "-d", f"{self.device.root.rstrip('/')}/etriage.XXXXXXXX"]).strip()
        try:
            yield path
        finally:
            with contextlib.suppress(DeviceFault):
                self.run(["rm", "-rf", path], timeout=60)

    # --- files --------------------------------------------------------------------------

    def push(self, local: Path, remote_dir: str) -> int:
        """Copy a file or a directory tree into remote_dir; returns the bytes sent."""
        local = Path(local)
        sent = 0
        try:
            with contextlib.closing(self._sftp()) as sftp:
                items = [local] if local.is_file() else sorted(local.rglob("*"))
                base = local.parent if local.is_file() else local
                if local.is_dir():
                    _mkdir(sftp, f"{remote_dir}/{local.name}")
                    base = local.parent
                for item in items:
                    target = f"{remote_dir}/{item.relative_to(base).as_posix()}"
                    if item.is_dir():
                        _mkdir(sftp, target)
                    else:
                        sftp.put(str(item), target)
                        sftp.chmod(target, item.stat().st_mode & 0o777)
                        sent += item.stat().st_size
        except DeviceFault:
            raise
        except (OSError, EOFError, paramiko.SSHException) as error:
            raise self._push_fault(local, remote_dir, error) from None
        return sent

    def _push_fault(self, local: Path, remote_dir: str, error: Exception) -> DeviceFault:
        """Why a push failed: the device's disk, or the connection."""
        needed = sum(p.stat().st_size for p in ([local] if local.is_file() else local.rglob("*")) if p.is_file())
        with contextlib.suppress(DeviceFault, ValueError, IndexError):
            free = self.free_kib(remote_dir)
            if free * 1024 < needed or free < 64:
                return self._fault("disk_full", f"No space left on device: {free} KiB free in {remote_dir}, "
                                                f"{needed // 1024} KiB to push ({error})")
        return self._fault("offline", f"push of {local.name} to {remote_dir} failed: {error}")

    def pull(self, remote: str, local: Path) -> None:
        """Copy a remote file or directory tree to `local` (created)."""
        try:
            with contextlib.closing(self._sftp()) as sftp:
                _pull(sftp, remote, Path(local))
        except DeviceFault:
            raise
        except (OSError, EOFError, paramiko.SSHException) as error:
            raise self._fault("offline", f"pull of {remote} failed: {error}") from None


def _mkdir(sftp: paramiko.SFTPClient, path: str) -> None:
    try:
        sftp.mkdir(path)
    except OSError:
        if not stat.S_ISDIR(sftp.stat(path).st_mode):
            raise


def _pull(sftp: paramiko.SFTPClient, remote: str, local: Path) -> None:
    """Directories and regular files only (a fifo would block the read forever)."""
    mode = sftp.stat(remote).st_mode
    if stat.S_ISDIR(mode):
        local.mkdir(parents=True, exist_ok=True)
        for entry in sftp.listdir_attr(remote):
            _pull(sftp, f"{remote}/{entry.filename}", local / entry.filename)
    elif stat.S_ISREG(mode):
        local.parent.mkdir(parents=True, exist_ok=True)
        sftp.get(remote, str(local))


def options_from_env(device: Device, environ=os.environ) -> SshOptions:
    """The key and known_hosts a device uses: its own, else the worker's configured ones."""
    return SshOptions(identity=device.identity or environ.get("ETRIAGE_DEVICE_KEY", ""),
                      known_hosts=device.known_hosts or environ.get("ETRIAGE_DEVICE_KNOWN_HOSTS", ""))
