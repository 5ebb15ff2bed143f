"""The full emulated arm64 device (tasks/devices/userland.py): a real arm64 Debian userland
(debootstrap, minbase + openssh-server) whose own aarch64 sshd runs under QEMU user mode,
chrooted, inside a network namespace the test creates, reached over a veth pair like any SSH
device. Always on: the debootstrap command line and cache key, the launch's files and command
lines, and (root + binfmt_misc) the netns launcher run for real with a tiny static aarch64
program in place of sshd. Behind --run-slow (building the userland takes minutes, once; it is
cached under the data dir): the health check sees aarch64 natively, the op_add.cpp sign bug is
new on the device through `etriage triage`, and the device's sshd stopped mid-run is
device_infra."""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tasks.devices import emulated, userland
from tasks.devices.connect import DeviceSettings, health_check, open_transport
from tests.devices.conftest import _run, userland_problem
from tests.devices.test_emulated_arm64 import hello_aarch64, triage_on_both  # noqa: F401 (fixture)
from tests.native.conftest import native_data, native_tools, source_repo  # noqa: F401 (fixtures)
from tests.native.test_native_triage import OP_ADD, REAL_ADD, second

ARGV_C = r"""
#include <stdio.h>
#include <sys/utsname.h>
#include <unistd.h>
int main(int argc, char** argv) {
  struct utsname u; uname(&u);
  printf("machine=%s uid=%d", u.machine, (int)getuid());
  for (int i = 1; i < argc; i++) printf(" %s", argv[i]);
  printf("\n");
  return 0;
}
"""


def test_the_debootstrap_command_and_cache_key(tmp_path):
    release = tmp_path / "os-release"
    release.write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_CODENAME=bookworm\nID=debian\n')
    assert userland.host_suite(release) == "bookworm"
    release.write_text("ID=something\n")
    with pytest.raises(ValueError, match="VERSION_CODENAME"):
        userland.host_suite(release)

    land = userland.Userland("bookworm")
    assert land.debootstrap_command(Path("/x/root")) == [
        "debootstrap", "--arch=arm64", "--variant=minbase", "--include=openssh-server", "bookworm", "/x/root",
        "http://deb.debian.org/debian"]
    # keyed by suite, mirror and package set (not their order or repeats)
    assert land.key.startswith("bookworm-")
    assert userland.Userland("bookworm", ("openssh-server", "procps")).key == \
        userland.Userland("bookworm", ("procps", "openssh-server", "procps")).key != land.key
    assert userland.Userland("trixie").key != land.key
    assert userland.Userland("bookworm", mirror="http://mirror.example/debian").key != land.key
    assert land.path(tmp_path) == tmp_path / "arm64-userland" / land.key
    assert not land.built(tmp_path)


def test_a_build_is_cached_and_an_interrupted_one_leaves_nothing(tmp_path):
    """`build` with a stand-in for debootstrap that lays out what it would: run once, then
    cached; a failing run leaves no userland (nor a later 'built')."""
    land = userland.Userland("bookworm")
    calls = []

    def fake_debootstrap(cmd):
        calls.append(cmd)
        target = Path(cmd[-2])
        (target / "usr/sbin").mkdir(parents=True)
        (target / "usr/sbin/sshd").write_text("")
        (target / "etc/ssh").mkdir(parents=True)
        (target / "etc/ssh/ssh_host_ed25519_key").write_text("the package's own")

    def failing(cmd):
        Path(cmd[-2]).mkdir(parents=True)
        raise RuntimeError("debootstrap exited 1")

    with pytest.raises(RuntimeError):
        land.build(tmp_path, failing)
    assert not land.built(tmp_path) and not land.path(tmp_path).exists()
    root = land.build(tmp_path, fake_debootstrap)
    assert root == land.path(tmp_path) and land.built(tmp_path)
    assert (root / "run/sshd").is_dir() and not list((root / "etc/ssh").glob("ssh_host_*"))
    assert land.build(tmp_path, fake_debootstrap) == root and len(calls) == 1
    assert "debootstrap --arch=arm64" in (root / ".etriage-complete").read_text()


def _fake_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for folder in ("etc", "dev", "proc", "tmp", "run", "home", "usr/sbin"):
        (root / folder).mkdir(parents=True)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\ndevice:x:1:1::/old:/bin/false\n")
    (root / "etc/group").write_text("root:x:0:\n")
    return root


def test_the_launch_files_and_command_lines(tmp_path):
    root = _fake_root(tmp_path)
    network = userland.Network("etriage-emu-t", 5)
    assert (network.host_ip, network.device_ip) == ("10.213.0.21", "10.213.0.22")
    assert userland.Network("n", 70).device_ip == "10.213.1.26"
    assert network.up_commands()[0] == ["ip", "netns", "add", "etriage-emu-t"]
    assert ["ip", "link", "add", "etr5h", "type", "veth", "peer", "name", "etr5d", "netns", "etriage-emu-t"] \
        in network.up_commands()
    launch = userland.Launch(root=root, state=tmp_path / "state", network=network)
    host_key = tmp_path / "key"
    host_key.write_text("PRIVATE")
    if os.geteuid() != 0:
        pytest.skip("the launch's files are chowned to the device user (root)")
    launch.write_files(host_key, "ssh-ed25519 AAAA client\n")
    config = (launch.state / "etc-ssh/sshd_config").read_text()
    assert "ListenAddress 10.213.0.22" in config and "AllowUsers device" in config
    assert "AuthorizedKeysFile /etc/ssh/etriage/authorized_keys" in config
    passwd = (launch.state / "passwd").read_text().splitlines()
    assert passwd == ["root:x:0:0:root:/root:/bin/sh", "device:x:4242:4242::/home/device:/bin/sh"]
    assert (root / "etc/passwd").read_text().count("device:") == 1  # the userland itself is untouched
    argv = launch.sshd_command()
    assert argv[:6] == ["ip", "netns", "exec", "etriage-emu-t", "unshare", "--mount"]
    assert argv[-1].endswith(f"exec chroot {root} /usr/sbin/sshd -D -e -f /etc/ssh/etriage/sshd_config")
    assert f"mount --bind {launch.state}/passwd {root}/etc/passwd" in argv[-1]
    assert launch.address() == "device@10.213.0.22:22"
    assert launch.known_hosts_line("ssh-ed25519 AAAAkey comment") == "10.213.0.22 ssh-ed25519 AAAAkey\n"


def test_the_netns_launcher_runs_an_aarch64_program_chrooted(tmp_path):
    """The launcher's real command line, with a tiny static aarch64 program in sshd's place:
    binfmt_misc (F flag) runs it inside the chroot in the new namespace, with sshd's arguments;
    the namespace has the veth end with the device's address, and the host reaches it."""
    problem = userland_problem()
    if problem:
        pytest.skip(problem)
    if not shutil.which("aarch64-linux-gnu-gcc"):
        pytest.skip("needs aarch64-linux-gnu-gcc (scripts/system-deps.sh)")
    try:
        emulated.register_binfmt()
    except OSError as error:
        pytest.skip(f"binfmt_misc unavailable here ({error})")
    root = _fake_root(tmp_path)
    (tmp_path / "argv.c").write_text(ARGV_C)
    subprocess.run(["aarch64-linux-gnu-gcc", "-static", "-O1", "-o", str(root / "usr/sbin/sshd"),
                    str(tmp_path / "argv.c")], check=True)
    network = userland.Network(f"etriage-emu-t{os.getpid()}", os.getpid() % 200 + 20)
    launch = userland.Launch(root=root, state=tmp_path / "state", network=network)
    (tmp_path / "key").write_text("PRIVATE")
    launch.write_files(tmp_path / "key", "")
    try:
        userland.network_up(network, _run)
        done = subprocess.run(launch.sshd_command(), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "machine=aarch64 uid=0 -D -e -f /etc/ssh/etriage/sshd_config\n"
        inside = subprocess.run(["ip", "netns", "exec", network.name, "ip", "-o", "-4", "addr"],
                                capture_output=True, text=True, check=True).stdout
        assert f"{network.device_ip}/30" in inside and "127.0.0.1/8" in inside
        if shutil.which("ping"):  # the host's end answers from inside the namespace
            ping = subprocess.run(["ip", "netns", "exec", network.name, "ping", "-c1", "-W2", network.host_ip],
                                  capture_output=True, text=True)
            assert ping.returncode == 0, ping.stdout + ping.stderr
    finally:
        for cmd in network.down_commands():
            subprocess.run(cmd, capture_output=True)
    # the binds were the namespace's only: the userland's own passwd is as it was
    assert (root / "etc/passwd").read_text() == "root:x:0:0:root:/root:/bin/sh\ndevice:x:1:1::/old:/bin/false\n"


# --- behind --run-slow: the real userland --------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_the_health_check_sees_aarch64_natively(emulated_userland, hello_aarch64):
    device = emulated_userland.device()
    health_check(device, DeviceSettings())
    with open_transport(device, DeviceSettings()) as transport:
        assert transport.check(["uname", "-m"]).strip() == "aarch64"
        emulation = emulated.probe(transport, device)
        assert (emulation.how, emulation.machine) == ("native", "aarch64")
        assert emulated.runner_prefix(transport, device) == []
        with transport.workdir() as remote:
            transport.push(hello_aarch64, remote)
            ran = transport.run([f"{remote}/{hello_aarch64.name}", "100"], timeout=120)
    assert ran.returncode == 0 and ran.output.strip() == "aarch64 sum=5050 ptr=8", ran.output


@pytest.mark.slow
@pytest.mark.executorch
@pytest.mark.timeout(3000)
def test_the_op_add_sign_bug_is_new_on_the_arm64_userland(emulated_userland, source_repo, native_data, tmp_path):
    """`etriage triage --target host --target emulated-arm64`: the change's static aarch64
    executor_runner runs in the userland with no prefix, and the sign bug is new there."""
    device = emulated_userland.device()
    head = source_repo.branch("arm64-userland-add-sign", {OP_ADD: second(REAL_ADD, "return val_a - val_alpha * val_b;")})
    data, log = triage_on_both(source_repo, native_data, head, device, tmp_path)
    new = [r for r in data["results"] if r["verdict"] == "new" and r["target"] == "emulated-arm64"]
    assert new, (data["summary"], log[-3000:])
    for verdict in new:
        assert verdict["base"] == "passed" and verdict["suspects"][0]["path"] == OP_ADD
        line = (verdict.get("failure") or {}).get("line") or verdict.get("primary_line", "")
        assert f"on device {device.id} (SoC emulated-arm64" in line and "runner rebuilt" in line, line


@pytest.mark.slow
@pytest.mark.executorch
@pytest.mark.timeout(3000)
def test_the_emulated_sshd_stopped_mid_run_is_device_infra(emulated_userland, source_repo, native_data, tmp_path):
    """The device's sshd (and everything under it) killed once the first bundle is on the
    device: the device's fault, retried, then device_infra; nothing blamed on the change."""
    device = emulated_userland.device()
    head = source_repo.branch("arm64-userland-comment", {OP_ADD: lambda t: t.replace(
        " * All rights reserved.", " * All rights reserved.\n * (a comment, userland)", 1)})
    work = emulated_userland.state / "home" / "work"  # the device's work root, seen from the host
    stop = threading.Event()

    def pull_the_plug_once_a_run_starts():
        while not stop.is_set():
            if any(work.iterdir()):
                emulated_userland.pull_the_plug()
                return
            time.sleep(0.05)

    killer = threading.Thread(target=pull_the_plug_once_a_run_starts, daemon=True)
    killer.start()
    try:
        data, log = triage_on_both(source_repo, native_data, head, device, tmp_path)
    finally:
        stop.set()
        killer.join()
    assert emulated_userland.proc is None, "the run never reached the device"
    on_device = [r for r in data["results"] if r["target"] == "emulated-arm64"]
    assert on_device, log[-3000:]
    for verdict in on_device:
        failure = verdict.get("failure") or {}
        assert (verdict["verdict"], failure.get("category")) == ("environment", "device_infra"), (verdict, log[-3000:])
        assert "connection lost mid-run" in failure["line"] and device.id in failure["line"], failure["line"]
    assert data["summary"].get("new", 0) == 0
