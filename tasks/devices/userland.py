"""A real arm64 Debian userland run under QEMU user mode: the full version of the emulated
arm64 device. The userland is built once with debootstrap (`--arch=arm64 --variant=minbase`,
openssh-server included; its second stage runs the userland's own aarch64 programs through
binfmt_misc's qemu-aarch64, registered with the F flag by tasks.devices.emulated) and cached
under the data dir, keyed by the Debian suite, the mirror and the package list. A launcher then
starts the userland's own aarch64 `sshd` chrooted into it, inside a network namespace with a
veth pair to the host: the device is reached over SSH like any device, and `uname -m` there
says aarch64 with no prefix (QEMU user mode reports the guest's machine).

This module writes files and builds command lines; it starts no process itself (only
tasks.pipeline.sandbox and the fixed programs of tests/sandbox/test_one_door.py do). The device
host's setup code (tests/devices/conftest.py, bench/devices.py) runs them with a `run` callable
(argv -> None, raising on failure).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ARCH = "arm64"
VARIANT = "minbase"
MIRROR = "http://deb.debian.org/debian"
# openssh-server brings sshd and its sftp-server; minbase has coreutils (df), tar, sh.
PACKAGES = ("openssh-server",)
DEVICE_USER = "device"
DEVICE_UID = 4242
SSHD_CONFIG = "/etc/ssh/etriage/sshd_config"  # inside the userland: bound from the launch's folder
Run = Callable[[list[str]], None]


def host_suite(os_release: Path = Path("/etc/os-release")) -> str:
    """The host's Debian suite (VERSION_CODENAME): the userland uses the same one."""
    try:
        fields = dict(line.partition("=")[::2] for line in os_release.read_text().splitlines() if "=" in line)
    except OSError as error:
        raise ValueError(f"cannot read {os_release}: {error}") from error
    suite = fields.get("VERSION_CODENAME", "").strip('"')
    if not suite:
        raise ValueError(f"{os_release} names no VERSION_CODENAME (not a Debian-like host?)")
    return suite


@dataclass(frozen=True)
class Userland:
    suite: str
    packages: tuple[str, ...] = PACKAGES
    mirror: str = MIRROR

    @property
    def key(self) -> str:
        what = "\n".join([ARCH, VARIANT, self.suite, self.mirror, *sorted(set(self.packages))])
        return f"{self.suite}-{hashlib.sha256(what.encode()).hexdigest()[:12]}"

    def path(self, data_dir: Path) -> Path:
        return Path(data_dir) / "arm64-userland" / self.key

    def debootstrap_command(self, target: Path) -> list[str]:
        return ["debootstrap", f"--arch={ARCH}", f"--variant={VARIANT}",
                f"--include={','.join(sorted(set(self.packages)))}", self.suite, str(target), self.mirror]

    def built(self, data_dir: Path) -> bool:
        return (self.path(data_dir) / ".etriage-complete").exists()

    def build(self, data_dir: Path, run: Run) -> Path:
        """The cached userland, built first when it is not there (one builder at a time, into a
        scratch folder renamed at the end: an interrupted build leaves no half userland)."""
        final = self.path(data_dir)
        final.parent.mkdir(parents=True, exist_ok=True)
        with open(final.parent / f"{self.key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.built(data_dir):
                return final
            scratch = final.parent / f"{self.key}.building"
            if scratch.exists():
                shutil.rmtree(scratch)
            start = time.monotonic()
            run(self.debootstrap_command(scratch))
            if not (scratch / "usr/sbin/sshd").exists():
                raise RuntimeError(f"debootstrap finished but {scratch}/usr/sbin/sshd is not there")
            # sshd's privilege separation folder; no host keys of the package's own (launches bring theirs)
            (scratch / "run/sshd").mkdir(parents=True, exist_ok=True)
            for key in (scratch / "etc/ssh").glob("ssh_host_*"):
                key.unlink()
            (scratch / ".etriage-complete").write_text(
                f"{' '.join(self.debootstrap_command(final))}\nbuilt in {time.monotonic() - start:.0f} s\n")
            os.rename(scratch, final)
        return final


# --- launching the userland's sshd in a network namespace -----------------------------------

@dataclass(frozen=True)
class Network:
    """A named network namespace and a veth pair: host side `host_ip`, device side `device_ip`
    (a /30 of 10.213.0.0/16 picked from `index`)."""

    name: str
    index: int

    @property
    def host_if(self) -> str:
        return f"etr{self.index}h"

    @property
    def device_if(self) -> str:
        return f"etr{self.index}d"

    @property
    def host_ip(self) -> str:
        return f"10.213.{self.index // 64}.{(self.index % 64) * 4 + 1}"

    @property
    def device_ip(self) -> str:
        return f"10.213.{self.index // 64}.{(self.index % 64) * 4 + 2}"

    def up_commands(self) -> list[list[str]]:
        ns = ["ip", "netns", "exec", self.name, "ip"]
        return [["ip", "netns", "add", self.name],
                ["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.device_if,
                 "netns", self.name],
                ["ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if],
                ["ip", "link", "set", self.host_if, "up"],
                [*ns, "addr", "add", f"{self.device_ip}/30", "dev", self.device_if],
                [*ns, "link", "set", self.device_if, "up"],
                [*ns, "link", "set", "lo", "up"]]

    def down_commands(self) -> list[list[str]]:
        # deleting the namespace deletes its veth end, and with it the host's
        return [["ip", "netns", "delete", self.name]]


@dataclass(frozen=True)
class Launch:
    """One emulated device: the userland at `root`, this launch's own files in `state` (host
    key, authorized_keys, sshd_config, passwd/group with the device user, the work folder),
    bound over the userland in a private mount namespace so the cached userland stays clean."""

    root: Path
    state: Path
    network: Network
    port: int = 22

    @property
    def work_root(self) -> str:
        return f"/home/{DEVICE_USER}/work"

    def write_files(self, host_key: Path, authorized_keys: str) -> None:
        etc = self.state / "etc-ssh"
        etc.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(host_key, etc / "host_key")
        (etc / "host_key").chmod(0o600)
        (etc / "authorized_keys").write_text(authorized_keys)
        (etc / "sshd_config").write_text("\n".join([
            f"Port {self.port}", f"ListenAddress {self.network.device_ip}",
            "HostKey /etc/ssh/etriage/host_key", "AuthorizedKeysFile /etc/ssh/etriage/authorized_keys",
            "PidFile none", "StrictModes no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "UsePAM no", "PermitRootLogin no", f"AllowUsers {DEVICE_USER}",
            "Subsystem sftp internal-sftp", "LogLevel ERROR", "MaxSessions 50", "MaxStartups 50", ""]))
        for name, extra in (("passwd", f"{DEVICE_USER}:x:{DEVICE_UID}:{DEVICE_UID}::/home/{DEVICE_USER}:/bin/sh\n"),
                            ("group", f"{DEVICE_USER}:x:{DEVICE_UID}:\n")):
            lines = [line for line in (self.root / "etc" / name).read_text().splitlines(keepends=True)
                     if not line.startswith(f"{DEVICE_USER}:")]
            (self.state / name).write_text("".join(lines) + extra)
        home = self.state / "home"
        (home / "work").mkdir(parents=True, exist_ok=True)
        for path in (home, home / "work"):
            os.chown(path, DEVICE_UID, DEVICE_UID)

    def mounts_script(self) -> str:
        """Run inside `ip netns exec` (which gives a private, slave mount namespace): bind this
        launch's files over the userland, then the userland's own sshd, chrooted, in front."""
        root, state = shlex.quote(str(self.root)), self.state
        binds = [(state / "etc-ssh", "/etc/ssh/etriage"), (state / "passwd", "/etc/passwd"),
                 (state / "group", "/etc/group"), (state / "home", f"/home/{DEVICE_USER}")]
        lines = ["set -e", "mount --make-rprivate /",
                 f"mkdir -p {root}/etc/ssh/etriage {root}/home/{DEVICE_USER}",
                 f"mount --rbind /dev {root}/dev", f"mount -t proc proc {root}/proc",
                 f"mount -t tmpfs -o mode=1777 tmpfs {root}/tmp",
                 f"mount -t tmpfs -o mode=0755 tmpfs {root}/run", f"mkdir -m 0755 {root}/run/sshd"]
        lines += [f"mount --bind {shlex.quote(str(src))} {root}{dst}" for src, dst in binds]
        lines.append(f"exec chroot {root} /usr/sbin/sshd -D -e -f {SSHD_CONFIG}")
        return "\n".join(lines)

    def sshd_command(self) -> list[str]:
        return ["ip", "netns", "exec", self.network.name, "unshare", "--mount", "--",
                "sh", "-c", self.mounts_script()]

    def address(self) -> str:
        return f"{DEVICE_USER}@{self.network.device_ip}:{self.port}"

    def known_hosts_line(self, host_key_pub: str) -> str:
        kind, key = host_key_pub.split()[:2]
        host = self.network.device_ip if self.port == 22 else f"[{self.network.device_ip}]:{self.port}"
        return f"{host} {kind} {key}\n"


def network_up(network: Network, run: Run) -> None:
    with contextlib.suppress(Exception):
        for cmd in network.down_commands():
            run(cmd)
    for cmd in network.up_commands():
        run(cmd)
