"""The ssh transport against a real OpenSSH server on loopback (tests/devices/conftest.py):
push, run, pull, clean up; and each fault made for real and named as the device's."""
from __future__ import annotations

import errno
import os
import re
import socket
import struct
import threading
import time

import pytest

from tasks.devices.connect import DeviceSettings, health_check
from tasks.devices.faults import DeviceFault
from tasks.devices.ssh import SshTransport


def test_push_run_pull_and_cleanup(sshd, tmp_path):
    bundle = tmp_path / "bundle"
    (bundle / "inputs").mkdir(parents=True)
    (bundle / "inputs" / "x.bin").write_bytes(bytes(range(256)) * 4)
    (bundle / "run.sh").write_text("#!/bin/sh\nmkdir -p out && cat inputs/x.bin inputs/x.bin > out/y.bin && uname -m\n")
    (bundle / "run.sh").chmod(0o755)
    with SshTransport(sshd.device(), sshd.options) as ssh:
        with ssh.workdir() as work:
            assert work.startswith(str(sshd.work_root))
            assert ssh.push(bundle, work) == 1024 + len((bundle / "run.sh").read_bytes())
            ran = ssh.run(["./run.sh"], cwd=f"{work}/bundle", timeout=30)
            assert ran.returncode == 0, ran.output
            assert ran.output.strip() == ssh.machine()
            ssh.pull(f"{work}/bundle/out", tmp_path / "out")
        assert (tmp_path / "out" / "y.bin").read_bytes() == (bytes(range(256)) * 4) * 2
        assert list(sshd.work_root.iterdir()) == []  # the work dir is gone


def test_a_failing_program_is_its_exit_code_not_a_fault(sshd):
    with SshTransport(sshd.device(), sshd.options) as ssh:
        ran = ssh.run(["sh", "-c", "echo boom >&2; exit 3"], timeout=30)
    assert (ran.returncode, ran.output.strip()) == (3, "boom")


def test_environment_reaches_the_program(sshd):
    with SshTransport(sshd.device(), sshd.options) as ssh:
        ran = ssh.run(["sh", "-c", 'echo "$ET_X"'], timeout=30, env={"ET_X": "a b'c"})
    assert ran.output.strip() == "a b'c"


def test_stopped_sshd_is_connection_refused(sshd):
    sshd.stop()
    # the port stays bound (never listening) here, so no other test's sshd is given it (ports
    # come from binding port 0, which skips a bound one); one started on the freed port answered
    # instead once (paramiko's EOFError, below). SO_REUSEADDR: the port's closed connections wait.
    # Another process's outgoing connection may have taken the freed port as its own (EADDRINUSE,
    # seen once in a fresh clone's suite): then a port bound here and never listened on stands in
    # for it, refusing as the stopped sshd's does.
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            holder.bind(("127.0.0.1", sshd.port))
        except OSError as taken:
            if taken.errno != errno.EADDRINUSE:
                raise
            holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        device = sshd.device(address=f"{sshd.user.pw_name}@127.0.0.1:{port}")
        with pytest.raises(DeviceFault) as caught:
            SshTransport(device, sshd.options).connect()
    assert caught.value.kind == "refused" and caught.value.retryable
    assert "loop-1" in str(caught.value) and "Connection refused" in str(caught.value)


def test_a_port_that_accepts_and_closes_at_once_is_a_protocol_fault(sshd):
    """Something accepts on the device's port and closes before the ssh banner (an sshd dying,
    or over its MaxStartups): a retryable device fault, never paramiko's bare EOFError."""
    sshd.stop()
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", sshd.port))
        listener.listen()

        def accept_and_close():  # with a reset: paramiko then fails writing its banner (EOFError)
            conn, _ = listener.accept()   # or reading the server's (SSHException), as the race goes
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
        closer = threading.Thread(target=accept_and_close, daemon=True)
        closer.start()
        with pytest.raises(DeviceFault) as caught:
            SshTransport(sshd.device(), sshd.options).connect()
        closer.join(timeout=10)
    assert caught.value.kind == "protocol" and caught.value.retryable
    assert re.search(r"closed during the ssh handshake|Error reading SSH protocol banner", str(caught.value))


@pytest.mark.parametrize("error, kind", [
    (ConnectionResetError(104, "Connection reset by peer"), "protocol"),
    (BrokenPipeError(32, "Broken pipe"), "protocol"),
    (ConnectionAbortedError(103, "Software caused connection abort"), "protocol"),
    (EOFError(), "protocol"),
    (OSError(113, "No route to host"), "unreachable"),
])
def test_which_error_the_handshake_race_surfaces_as_is_the_same_fault(sshd, monkeypatch, error, kind):
    """The race above surfaces, by timing, as EOFError, SSHException or the socket's own reset
    error (paramiko's transport thread keeps a socket error as it is): a reset after the
    connection was made is a protocol fault, whichever; only a connection never made is
    unreachable. Here each error is raised where paramiko raises it (a fresh clone met the
    ConnectionResetError once in the real race: `unreachable`, before)."""
    def connect(*args, **kwargs):
        raise error
    monkeypatch.setattr("paramiko.SSHClient.connect", connect)
    with pytest.raises(DeviceFault) as caught:
        SshTransport(sshd.device(), sshd.options).connect()
    assert caught.value.kind == kind and caught.value.retryable


def test_changed_host_key_is_refused_and_not_retried(sshd):
    sshd.new_host_key()
    with pytest.raises(DeviceFault) as caught:
        SshTransport(sshd.device(), sshd.options).connect()
    assert caught.value.kind == "host_key" and not caught.value.retryable


def test_unknown_client_key_is_auth(sshd, tmp_path):
    (sshd.root / "authorized_keys").write_text("")
    with pytest.raises(DeviceFault) as caught:
        SshTransport(sshd.device(), sshd.options).connect()
    assert caught.value.kind == "auth"


def test_run_killed_at_its_time_limit(sshd):
    with SshTransport(sshd.device(), sshd.options) as ssh:
        with pytest.raises(DeviceFault) as caught:
            ssh.run(["sleep", "31.5"], timeout=1)
        assert caught.value.kind == "timeout"
        # the device is still usable afterwards, and nothing is left running
        assert ssh.run(["sh", "-c", "pgrep -f '^sleep 31[.]5' -u $(id -u) || true"], timeout=30).output.strip() == ""


def test_device_offline_mid_run(sshd):
    """sshd and the session are killed while the program runs: a fault, not an exit code."""
    with SshTransport(sshd.device(), sshd.options) as ssh:
        def pull_the_plug():
            time.sleep(1.0)  # the program is running by then; if not, the fault is the same
            sshd.pull_the_plug()

        killer = threading.Thread(target=pull_the_plug)
        killer.start()
        with pytest.raises(DeviceFault) as caught:
            ssh.run(["sleep", "20"], timeout=60)
        killer.join()
    assert caught.value.kind == "offline" and caught.value.retryable


def test_disk_full_on_push(sshd, small_disk, tmp_path):
    big = tmp_path / "model.pte"
    big.write_bytes(b"\0" * (2 << 20))  # 2 MiB into a 512 KiB disk
    with SshTransport(sshd.device(work_root=str(small_disk)), sshd.options) as ssh:
        with ssh.workdir() as work:
            with pytest.raises(DeviceFault) as caught:
                ssh.push(big, work)
    assert caught.value.kind == "disk_full"
    assert "No space left on device" in str(caught.value)


def test_health_check_wants_the_inventorys_soc_and_free_space(sshd, small_disk):
    health_check(sshd.device(), DeviceSettings())  # x86_64 loopback, enough room: no fault
    with pytest.raises(DeviceFault) as caught:
        health_check(sshd.device(soc="arm64" if os.uname().machine != "aarch64" else "x86_64"), DeviceSettings())
    assert caught.value.kind == "soc_mismatch" and f"uname -m` says {os.uname().machine}" in str(caught.value)
    with pytest.raises(DeviceFault) as caught:
        health_check(sshd.device(work_root=str(small_disk), min_free_mb=1), DeviceSettings())
    assert caught.value.kind == "disk_full" and "KiB free" in str(caught.value)
