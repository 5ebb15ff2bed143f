"""adb: `adb devices -l` states from real recorded output (tests/devices/recordings/adb.yaml, each
with its source), the adb server's own errors, and Debian's real adb server on its own port."""
from __future__ import annotations

import shutil
import socket
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from tasks.devices.android import AdbServer, device_fault, parse_devices, qnn_environment
from tasks.devices.faults import DeviceFault

RECORDINGS = yaml.safe_load((Path(__file__).parent / "recordings" / "adb.yaml").read_text())


@pytest.mark.parametrize("case", RECORDINGS["listings"], ids=lambda c: c["source"].split("github.com/")[-1])
def test_recorded_listings(case):
    devices = parse_devices(case["text"])
    assert [d.serial for d in devices] == [e["serial"] for e in case["expect"]]
    for device, expect in zip(devices, case["expect"]):
        assert device.state == expect["state"]
        for key in ("model", "transport_id"):
            if key in expect:
                assert device.attributes[key] == expect[key]
        fault = device_fault(device.serial, devices)
        assert (fault.kind if fault else None) == expect["fault"]


def test_a_serial_not_listed_is_missing():
    devices = parse_devices(RECORDINGS["listings"][0]["text"])
    fault = device_fault("R5CT1234ABC", devices, "phone-1 (SM8750)")
    assert fault.kind == "missing" and fault.retryable
    assert "device 'R5CT1234ABC' not found" in fault.line() and "phone-1 (SM8750)" in fault.line()


def test_no_permissions_keeps_adbs_hint():
    [device] = parse_devices(RECORDINGS["listings"][7]["text"])
    assert device.note.startswith("(missing udev rules?")
    assert "udev" in device_fault(device.serial, [device]).line()


def test_qnn_environment_points_both_library_paths_at_the_work_dir():
    assert qnn_environment("/data/local/tmp/etriage/j1") == {
        "LD_LIBRARY_PATH": "/data/local/tmp/etriage/j1", "ADSP_LIBRARY_PATH": "/data/local/tmp/etriage/j1"}


def _replay_server(answer: bytes) -> tuple[int, threading.Thread]:
    """A socket that answers the first request with a recorded adb server reply."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        with listener, listener.accept()[0] as conn:
            length = int(conn.recv(4), 16)
            conn.recv(length)
            conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return port, thread


@pytest.mark.parametrize("case", RECORDINGS["transport_errors"], ids=lambda c: c["source"].split("github.com/")[-1])
def test_recorded_transport_errors(case):
    message = case["text"].encode()
    port, thread = _replay_server(b"FAIL" + f"{len(message):04x}".encode() + message)
    with pytest.raises(DeviceFault) as caught:
        AdbServer("127.0.0.1", port).shell("13141FDD40019J", "true")
    thread.join(timeout=10)
    assert caught.value.kind == case["fault"]


def test_no_adb_server_is_connection_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DeviceFault) as caught:
        AdbServer("127.0.0.1", port).devices()
    assert caught.value.kind == "refused" and "adb server not running" in str(caught.value)


def test_the_real_adb_server(adb_server):
    """Debian's adb server: its device list over the protocol is what `adb devices -l` prints,
    and asking for a serial it does not have is `missing`, in adb's own words."""
    adb, port, server = adb_server
    cli = subprocess.run([adb, "-P", str(port), "devices", "-l"], capture_output=True, text=True, timeout=60)
    assert cli.stdout.startswith("List of devices attached")
    assert server.devices() == parse_devices(cli.stdout)
    with pytest.raises(DeviceFault) as caught:
        server.shell("ETRIAGE-NO-SUCH-SERIAL", "true")
    assert caught.value.kind == "missing" and "not found" in str(caught.value)
