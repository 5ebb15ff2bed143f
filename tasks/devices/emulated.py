"""The emulated arm64 device (device class `emulated-arm64`): an account reached over SSH like
any device, whose aarch64 programs run under QEMU user mode. Two ways, both supported:

- **binfmt_misc**: the device's kernel has `qemu-aarch64` registered (with the F flag: the
  interpreter is opened at registration, so it works in any mount namespace or chroot), and an
  aarch64 ELF simply runs. `register_binfmt()` mounts binfmt_misc and registers it (root).
- **a runner prefix**: the runner is started as `qemu-aarch64-static <runner> ...`: the
  inventory's `runner_prefix`, else the `qemu-aarch64-static` (or `qemu-aarch64`) found on the
  device's PATH.

With a real arm64 userland (tasks/devices/userland.py: debootstrap, its own sshd chrooted in a
network namespace) `uname -m` itself says aarch64 and the probe says `native`. On an x86
host account it says x86_64: the device is then an emulated aarch64 only when one of the two ways
above is there, and the health check (tasks/devices/connect.py) asks `machine()` here, which
says `aarch64` only then. The change's executor_runner for it is the native recipes'
`aarch64-linux-gnu` build (statically linked, so no arm64 libstdc++ or loader is needed).
"""
from __future__ import annotations

import ctypes
import os
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tasks.devices.faults import DeviceFault

MACHINE = "aarch64"
QEMU_NAMES = ("qemu-aarch64-static", "qemu-aarch64")
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
BINFMT_NAME = "qemu-aarch64"
# The ELF header of an aarch64 executable (e_ident class 64, little endian; e_machine 183), as
# QEMU's own scripts/qemu-binfmt-conf.sh registers it.
AARCH64_MAGIC = r"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"
AARCH64_MASK = r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff"

def probe_command(runner_prefix: tuple[str, ...] = ()) -> str:
    """One round trip: the machine, whether binfmt_misc runs aarch64 ELFs, a QEMU on PATH, and
    whether the inventory's prefix (if any) is there."""
    wanted = shlex.quote(runner_prefix[0]) if runner_prefix else "true"
    return ("uname -m; "
            f"if grep -qx enabled {BINFMT_DIR}/{BINFMT_NAME} 2>/dev/null && "
            f"grep -qx enabled {BINFMT_DIR}/status 2>/dev/null; then echo binfmt=yes; else echo binfmt=no; fi; "
            "echo qemu=$(" + " || ".join(f"command -v {q}" for q in QEMU_NAMES) + "); "
            f"if command -v {wanted} >/dev/null; then echo prefix=yes; else echo prefix=no; fi")


@dataclass(frozen=True)
class Emulation:
    """How a device runs aarch64 programs: `native` (it is aarch64, or a userland under binfmt),
    `binfmt` (the kernel hands aarch64 ELFs to QEMU), `prefix` (the runner is started under QEMU),
    or `none`."""

    uname: str
    how: str
    prefix: tuple[str, ...] = field(default=())

    @property
    def machine(self) -> str:
        return MACHINE if self.how != "none" else self.uname

    def describe(self) -> str:
        return {"native": f"{self.uname}",
                "binfmt": f"{MACHINE} under QEMU user mode via binfmt_misc (host {self.uname})",
                "prefix": f"{MACHINE} under QEMU user mode via the runner prefix {' '.join(self.prefix)} "
                          f"(host {self.uname})",
                "none": f"{self.uname}, with no QEMU for aarch64"
                        + (f" ({' '.join(self.prefix)} is not there)" if self.prefix else "")}[self.how]


def parse_probe(output: str, runner_prefix: tuple[str, ...] = ()) -> Emulation:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        raise ValueError("the device's probe printed nothing")
    uname, facts = lines[0], dict(line.partition("=")[::2] for line in lines[1:] if "=" in line)
    if uname == MACHINE:
        return Emulation(uname, "native")
    if runner_prefix:  # the inventory says how: it wins over what the device has, if it is there
        return Emulation(uname, "prefix" if facts.get("prefix") == "yes" else "none", tuple(runner_prefix))
    if facts.get("binfmt") == "yes":
        return Emulation(uname, "binfmt")
    if facts.get("qemu"):
        return Emulation(uname, "prefix", (facts["qemu"],))
    return Emulation(uname, "none")


def probe(transport, device) -> Emulation:
    """Ask the device (one command over its transport) how it runs aarch64 programs."""
    prefix = tuple(device.runner_prefix)
    return parse_probe(transport.check(["sh", "-c", probe_command(prefix)]), prefix)


def machine(transport, device) -> str:
    """What `uname -m` the health check should compare: aarch64 when the device can run it."""
    emulation = probe(transport, device)
    if emulation.how == "none":
        how = (f"the inventory's runner prefix {' '.join(emulation.prefix)} is not there" if emulation.prefix
               else f"neither binfmt_misc's {BINFMT_NAME} nor {' / '.join(QEMU_NAMES)} is there")
        raise DeviceFault("soc_mismatch", f"`uname -m` says {emulation.uname}, and {how}: the inventory's "
                                          f"{device.soc} means {MACHINE}", device.describe())
    return emulation.machine


def runner_prefix(transport, device) -> list[str]:
    """What goes before the runner on this device ([] when aarch64 programs run as they are)."""
    if device.transport != "emulated":
        return list(device.runner_prefix)
    return list(probe(transport, device).prefix)


# --- this machine's binfmt_misc (root: a device host sets itself up) ------------------------

def binfmt_registered(binfmt_dir: Path = BINFMT_DIR) -> bool:
    entry = binfmt_dir / BINFMT_NAME
    try:
        return entry.read_text().splitlines()[0].strip() == "enabled" and \
            (binfmt_dir / "status").read_text().strip() == "enabled"
    except (OSError, IndexError):
        return False


def register_binfmt(interpreter: str | None = None, binfmt_dir: Path = BINFMT_DIR) -> str:
    """Mount binfmt_misc if it is not, and register qemu-aarch64 with the F flag. Returns what
    was done; raises OSError (with the reason) when this machine does not allow it."""
    interpreter = interpreter or next(filter(None, map(shutil.which, QEMU_NAMES)), None)
    if not interpreter:
        raise OSError(f"no {' or '.join(QEMU_NAMES)} on PATH (scripts/system-deps.sh installs qemu-user-static)")
    if binfmt_registered(binfmt_dir):
        return f"{BINFMT_NAME} already registered"
    if not (binfmt_dir / "register").exists():
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mount(b"binfmt_misc", str(binfmt_dir).encode(), b"binfmt_misc", 0, None) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"cannot mount binfmt_misc on {binfmt_dir}: {os.strerror(errno)}")
    if (binfmt_dir / BINFMT_NAME).exists():  # registered but disabled: enable it
        (binfmt_dir / BINFMT_NAME).write_text("1")
        return f"{BINFMT_NAME} enabled"
    rule = f":{BINFMT_NAME}:M::{AARCH64_MAGIC}:{AARCH64_MASK}:{os.path.realpath(interpreter)}:F"
    try:
        (binfmt_dir / "register").write_text(rule)
    except FileExistsError:  # another process registered it between the check and the write
        if not binfmt_registered(binfmt_dir):
            raise
        return f"{BINFMT_NAME} already registered"
    return f"{BINFMT_NAME} registered ({os.path.realpath(interpreter)}, F)"
