"""Android devices over adb, spoken to the adb server's socket protocol (what `adb [-H host
-P port] -s SERIAL ...` sends to port 5037), so no adb child process is started.

- `parse_devices(text)`: `adb devices -l` output (or the server's `host:devices-l` answer) ->
  AdbDevice(serial, state, attributes). States: device, offline, unauthorized, authorizing,
  connecting, no permissions, recovery, sideload, bootloader, rescue, host, unknown.
- `device_fault(serial, listed)`: why a listed (or missing) device cannot run a job, as the
  DeviceFault the pool and the report use: missing, offline, unauthorized.
- `AdbServer(host, port)`: devices(), shell(serial, command), push(serial, local, remote),
  pull(serial, remote, local) over the server's protocol (4-hex-digit length prefixes, OKAY/FAIL,
  `host:transport:<serial>`, `shell:`, `sync:` SEND/RECV/DATA/DONE).

What runs on a phone mirrors ExecuTorch's own helper (backends/qualcomm/tests/utils.py's
SimpleADB): the .pte, the runner and the QNN libraries for the SoC's HTP arch go to
/data/local/tmp/etriage/<job>, and the runner starts with LD_LIBRARY_PATH and
ADSP_LIBRARY_PATH pointing there (`qnn_environment`).
"""
from __future__ import annotations

import contextlib
import re
import shlex
import socket
import struct
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tasks.devices.faults import DeviceFault
from tasks.devices.ssh import Ran

STATES = ("device", "offline", "unauthorized", "authorizing", "connecting", "no permissions", "recovery",
          "sideload", "bootloader", "rescue", "host", "unknown")
_LINE = re.compile(r"^(?P<serial>\S+)\s+(?P<state>no permissions|[a-z]+)(?P<rest>.*)$")
_ATTR = re.compile(r"\b(usb|product|model|device|transport_id|features):(\S+)")
EXIT_MARKER = "ETRIAGE_EXIT="


@dataclass(frozen=True)
class AdbDevice:
    serial: str
    state: str
    attributes: dict = field(default_factory=dict)  # usb, product, model, device, transport_id
    note: str = ""  # e.g. "(missing udev rules? user is in the plugdev group); see [...]"


def parse_devices(text: str) -> list[AdbDevice]:
    devices = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("List of devices", "* daemon", "adb server", "adb: ")):
            continue
        found = _LINE.match(line)
        if not found or found["state"] not in STATES:
            continue
        rest = found["rest"]
        attributes = dict(_ATTR.findall(rest))
        note = _ATTR.sub("", rest).strip() if found["state"] == "no permissions" else ""
        devices.append(AdbDevice(found["serial"], found["state"], attributes, note))
    return devices


def device_fault(serial: str, listed: list[AdbDevice], describe: str = "") -> DeviceFault | None:
    """None when `serial` is listed and ready ("device"), else what is wrong."""
    who = describe or serial
    match = next((d for d in listed if d.serial == serial), None)
    if match is None:
        return DeviceFault("missing", f"error: device '{serial}' not found (adb devices -l lists "
                                      f"{', '.join(d.serial for d in listed) or 'no device'})", who)
    if match.state == "device":
        return None
    if match.state in ("unauthorized", "authorizing", "no permissions"):
        return DeviceFault("unauthorized", f"error: device {match.state} {match.note}".strip()
                           + " (accept the debugging prompt on the phone, or fix the host's udev rules)", who)
    return DeviceFault("offline", f"error: device {match.state}" + ("" if match.state == "offline" else
                                                                   f" (the phone is in {match.state} mode)"), who)


def qnn_environment(remote_dir: str) -> dict[str, str]:
    """What ExecuTorch's runner needs to find the QNN libraries pushed beside it."""
    return {"LD_LIBRARY_PATH": remote_dir, "ADSP_LIBRARY_PATH": remote_dir}


class AdbServer:
    """A client of one adb server (`adb -H host -P port`)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 5037, timeout: float = 30.0):
        self.host, self.port, self.timeout = host, port, timeout

    @classmethod
    def at(cls, address: str) -> "AdbServer":
        host, _, port = (address or "127.0.0.1:5037").rpartition(":")
        return cls(host or "127.0.0.1", int(port or 5037))

    def _connect(self) -> socket.socket:
        try:
            return socket.create_connection((self.host, self.port), timeout=self.timeout)
        except ConnectionRefusedError:
            raise DeviceFault("refused", f"cannot connect to {self.host}:{self.port}: Connection refused "
                                         "(adb server not running)") from None
        except OSError as error:
            raise DeviceFault("unreachable", f"cannot connect to {self.host}:{self.port}: {error}") from None

    @staticmethod
    def _send(sock: socket.socket, request: str) -> None:
        data = request.encode()
        sock.sendall(f"{len(data):04x}".encode() + data)

    @staticmethod
    def _read(sock: socket.socket, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = sock.recv(left)
            if not chunk:
                raise DeviceFault("protocol", "the adb server closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _status(self, sock: socket.socket, serial: str = "") -> None:
        status = self._read(sock, 4)
        if status == b"OKAY":
            return
        message = self._read(sock, int(self._read(sock, 4), 16)).decode(errors="replace")
        kind = ("missing" if "not found" in message else "unauthorized" if "unauthorized" in message
                else "offline" if "offline" in message else "protocol")
        raise DeviceFault(kind, f"adb: error: {message.strip()}", serial)

    def devices(self) -> list[AdbDevice]:
        with self._connect() as sock:
            self._send(sock, "host:devices-l")
            self._status(sock)
            return parse_devices(self._read(sock, int(self._read(sock, 4), 16)).decode(errors="replace"))

    def _transport(self, serial: str) -> socket.socket:
        sock = self._connect()
        try:
            self._send(sock, f"host:transport:{serial}")
            self._status(sock, serial)
        except BaseException:
            sock.close()
            raise
        return sock

    def shell(self, serial: str, command: str, timeout: float = 600) -> tuple[int, str]:
        """Run `command` with the device's sh; (exit code, output)."""
        with self._transport(serial) as sock:
            sock.settimeout(timeout)
            self._send(sock, f"shell:{command}; echo {EXIT_MARKER}$?")
            self._status(sock, serial)
            chunks = []
            try:
                while chunk := sock.recv(65536):
                    chunks.append(chunk)
            except socket.timeout:
                raise DeviceFault("timeout", f"adb shell timed out after {timeout:.0f} s: {command[:200]}",
                                  serial) from None
        output = b"".join(chunks).decode(errors="replace")
        head, marker, code = output.rpartition(EXIT_MARKER)
        if not marker:
            raise DeviceFault("offline", f"adb shell ended without an exit status (device lost): {command[:200]}",
                              serial)
        return int(code.strip() or 255), head

    def push(self, serial: str, local: Path, remote: str, mode: int = 0o755) -> None:
        data = Path(local).read_bytes()
        with self._transport(serial) as sock:
            self._send(sock, "sync:")
            self._status(sock, serial)
            target = f"{remote},{mode}".encode()
            sock.sendall(b"SEND" + struct.pack("<I", len(target)) + target)
            for start in range(0, len(data), 64 * 1024):
                chunk = data[start:start + 64 * 1024]
                sock.sendall(b"DATA" + struct.pack("<I", len(chunk)) + chunk)
            sock.sendall(b"DONE" + struct.pack("<I", int(time.time())))
            status, length = self._read(sock, 4), struct.unpack("<I", self._read(sock, 4))[0]
            if status != b"OKAY":
                message = self._read(sock, length).decode(errors="replace")
                kind = "disk_full" if "No space left" in message else "protocol"
                raise DeviceFault(kind, f"adb: error: failed to copy '{local}' to '{remote}': {message}", serial)

    def pull(self, serial: str, remote: str, local: Path) -> None:
        with self._transport(serial) as sock:
            self._send(sock, "sync:")
            self._status(sock, serial)
            path = remote.encode()
            sock.sendall(b"RECV" + struct.pack("<I", len(path)) + path)
            chunks = []
            while True:
                kind, length = self._read(sock, 4), struct.unpack("<I", self._read(sock, 4))[0]
                if kind == b"DATA":
                    chunks.append(self._read(sock, length))
                elif kind == b"DONE":
                    break
                else:
                    message = self._read(sock, length).decode(errors="replace")
                    raise DeviceFault("protocol", f"adb: error: failed to pull '{remote}': {message}", serial)
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        Path(local).write_bytes(b"".join(chunks))


class AdbTransport:
    """The transport interface of tasks/devices/ssh.py (workdir, push, run, pull, machine,
    free_kib, check) over an adb server, for one phone. Connecting checks the phone's state."""

    def __init__(self, device, server: AdbServer):
        self.device, self.server, self.serial = device, server, device.address

    def __enter__(self) -> "AdbTransport":
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        return None

    def connect(self) -> None:
        fault = device_fault(self.serial, self.server.devices(), self.device.describe())
        if fault is not None:
            raise fault

    def run(self, argv: list[str], *, timeout: float, cwd: str = "", env: dict[str, str] | None = None):
        prefix = f"cd {shlex.quote(cwd)} && " if cwd else ""
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        start = time.monotonic()
        code, output = self.server.shell(self.serial, f"{prefix}{assignments + ' ' if assignments else ''}"
                                                      f"timeout {max(1, int(timeout))} {shlex.join(argv)} 2>&1",
                                         timeout=timeout + 15)
        if code in (124, 137):
            raise DeviceFault("timeout", f"killed at the time limit ({timeout:.0f} s): {shlex.join(argv)[:200]}",
                              self.device.describe())
        return Ran(code, output, round(time.monotonic() - start, 3))

    def check(self, argv: list[str], *, timeout: float = 60) -> str:
        ran = self.run(argv, timeout=timeout)
        if ran.returncode != 0:
            raise DeviceFault("protocol", f"{shlex.join(argv)} exited {ran.returncode}: {ran.output.strip()[-300:]}",
                              self.device.describe())
        return ran.output

    def machine(self) -> str:
        return self.check(["uname", "-m"]).strip()

    def soc_model(self) -> str:
        """What the phone says it carries (Android 12+: ro.soc.model, e.g. SM8750)."""
        return self.check(["getprop", "ro.soc.model"]).strip()

    def free_kib(self, path: str) -> int:
        return int(self.check(["df", "-k", path]).strip().splitlines()[-1].split()[3])

    @contextlib.contextmanager
    def workdir(self):
        path = f"{self.device.root.rstrip('/')}/etriage-{uuid.uuid4().hex[:12]}"
        self.check(["mkdir", "-p", path])
        try:
            yield path
        finally:
            with contextlib.suppress(DeviceFault):
                self.run(["rm", "-rf", path], timeout=60)

    def push(self, local: Path, remote_dir: str) -> int:
        local, sent = Path(local), 0
        base = local.parent
        for item in [local] if local.is_file() else [local, *sorted(local.rglob("*"))]:
            target = f"{remote_dir}/{item.relative_to(base).as_posix()}"
            if item.is_dir():
                self.check(["mkdir", "-p", target])
            else:
                self.server.push(self.serial, item, target, item.stat().st_mode & 0o777)
                sent += item.stat().st_size
        return sent

    def pull(self, remote: str, local: Path) -> None:
        listing = self.check(["find", remote, "-type", "f"])
        for path in filter(None, (line.strip() for line in listing.splitlines())):
            self.server.pull(self.serial, path, Path(local) / path[len(remote):].lstrip("/"))
