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

import re
import socket
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from tasks.devices.faults import DeviceFault

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
