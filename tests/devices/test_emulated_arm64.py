"""The emulated arm64 device: an account on the real loopback sshd whose aarch64 programs run
under QEMU user mode, via binfmt_misc (registered with the F flag) or the inventory's runner
prefix (qemu-aarch64-static). Always on: a tiny C++ program cross-compiled through the native
recipes' aarch64 toolchain file (statically linked) runs on the device both ways, and the health
check takes the device for the aarch64 it emulates. Behind --run-slow: the change's portable
executor_runner cross-built from ExecuTorch's real sources runs the probes' programs there."""
from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks.devices import emulated
from tasks.devices.connect import DeviceSettings, health_check, open_transport
from tasks.devices.faults import DeviceFault
from tasks.pipeline import native
from tasks.pipeline.report import to_markdown
from tasks.records import Report
from tests.native.conftest import native_data, native_tools, source_repo  # noqa: F401 (fixtures)
from tests.native.test_native_triage import OP_ADD, REAL_ADD, second

ROOT = Path(__file__).resolve().parents[2]

HELLO = r"""
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>
int main(int argc, char** argv) {
  std::vector<int> v(argc > 1 ? std::stoi(argv[1]) : 10);
  std::iota(v.begin(), v.end(), 1);
#if defined(__aarch64__)
  const char* arch = "aarch64";
#else
  const char* arch = "other";
#endif
  std::printf("%s sum=%d ptr=%zu\n", arch, std::accumulate(v.begin(), v.end(), 0), sizeof(void*));
  return 0;
}
"""


def _need(*tools: str) -> None:
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (scripts/system-deps.sh)")


def has_interpreter(elf: bytes) -> bool:
    """Whether a 64-bit little-endian ELF has a PT_INTERP program header (a dynamic loader)."""
    phoff, = struct.unpack_from("<Q", elf, 32)
    phentsize, phnum = struct.unpack_from("<HH", elf, 54)
    return any(struct.unpack_from("<I", elf, phoff + i * phentsize)[0] == 3 for i in range(phnum))


@pytest.fixture(scope="module")
def hello_aarch64(tmp_path_factory) -> Path:
    """hello.cpp built with CMake and the aarch64 toolchain file native.py writes for its recipes."""
    _need("cmake", "ninja", "aarch64-linux-gnu-g++")
    tmp = tmp_path_factory.mktemp("hello")
    (tmp / "src").mkdir()
    (tmp / "src" / "hello.cpp").write_text(HELLO)
    (tmp / "src" / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(hello CXX)\nadd_executable(hello hello.cpp)\n")
    args = native.TOOLCHAINS["aarch64-linux-gnu"].cmake_args(tmp / "native")
    for cmd in (["cmake", "-S", str(tmp / "src"), "-B", str(tmp / "build"), "-G", "Ninja", *args],
                ["cmake", "--build", str(tmp / "build")]):
        done = subprocess.run(cmd, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    binary = tmp / "build" / "hello"
    data = binary.read_bytes()
    assert data[:4] == b"\x7fELF" and data[18] == 183  # e_machine: EM_AARCH64
    assert not has_interpreter(data)  # statically linked: no loader, no libstdc++ on the device
    return binary


@pytest.fixture(scope="module")
def binfmt():
    """qemu-aarch64 registered in this machine's binfmt_misc (F flag), or skip saying why."""
    _need("qemu-aarch64-static")
    try:
        print(emulated.register_binfmt())
    except OSError as error:
        pytest.skip(f"binfmt_misc unavailable here ({error}); the runner prefix still works")
    return True


def emulated_device(sshd, **fields):
    return sshd.device("emu-1", transport="emulated", soc="emulated-arm64", runner="rebuilt",
                       backends=("portable",), **fields)


def run_on_device(device, binary: Path, *args: str) -> tuple[emulated.Emulation, list[str], str]:
    with open_transport(device, DeviceSettings()) as transport:
        emulation = emulated.probe(transport, device)
        prefix = emulated.runner_prefix(transport, device)
        with transport.workdir() as remote:
            transport.push(binary, remote)
            ran = transport.run([*prefix, f"{remote}/{binary.name}", *args], timeout=60)
    assert ran.returncode == 0, ran.output
    return emulation, prefix, ran.output.strip()


def test_the_probe_reads_what_the_device_has():
    assert emulated.parse_probe("aarch64\nbinfmt=no\nqemu=\nprefix=yes\n").how == "native"
    via_binfmt = emulated.parse_probe("x86_64\nbinfmt=yes\nqemu=/usr/bin/qemu-aarch64-static\nprefix=yes\n")
    assert (via_binfmt.how, via_binfmt.prefix, via_binfmt.machine) == ("binfmt", (), "aarch64")
    via_path = emulated.parse_probe("x86_64\nbinfmt=no\nqemu=/usr/bin/qemu-aarch64-static\nprefix=yes\n")
    assert (via_path.how, via_path.prefix) == ("prefix", ("/usr/bin/qemu-aarch64-static",))
    told = emulated.parse_probe("x86_64\nbinfmt=yes\nqemu=\nprefix=yes\n", ("qemu-aarch64", "-cpu", "max"))
    assert (told.how, told.prefix) == ("prefix", ("qemu-aarch64", "-cpu", "max"))  # the inventory wins
    absent = emulated.parse_probe("x86_64\nbinfmt=yes\nqemu=\nprefix=no\n", ("/opt/qemu-aarch64",))
    assert absent.how == "none" and "/opt/qemu-aarch64 is not there" in absent.describe()
    nothing = emulated.parse_probe("x86_64\nbinfmt=no\nqemu=\nprefix=yes\n")
    assert (nothing.how, nothing.machine) == ("none", "x86_64")
    assert "no QEMU" in nothing.describe()


def test_with_the_runner_prefix_the_cross_built_program_runs_on_the_device(sshd, hello_aarch64):
    _need("qemu-aarch64-static")
    device = emulated_device(sshd, runner_prefix=("qemu-aarch64-static",))
    health_check(device, DeviceSettings())  # aarch64 through QEMU: the emulated-arm64 class accepts it
    emulation, prefix, output = run_on_device(device, hello_aarch64, "100")
    assert prefix == ["qemu-aarch64-static"] and emulation.how == "prefix"
    assert output == "aarch64 sum=5050 ptr=8"


def test_with_binfmt_misc_the_program_runs_as_it_is(sshd, hello_aarch64, binfmt):
    device = emulated_device(sshd)
    health_check(device, DeviceSettings())
    emulation, prefix, output = run_on_device(device, hello_aarch64)
    assert prefix == [] and emulation.how == "binfmt", emulation
    assert "binfmt_misc" in emulation.describe()
    assert output == "aarch64 sum=55 ptr=8"


def test_an_x86_64_account_is_not_an_arm64_device(sshd):
    """The same account as a plain ssh device of class emulated-arm64 (no emulation asked for):
    the health check refuses it as the wrong SoC, naming both machines."""
    device = sshd.device("emu-1", soc="emulated-arm64", backends=("portable",))
    with pytest.raises(DeviceFault) as caught:
        health_check(device, DeviceSettings())
    assert caught.value.kind == "soc_mismatch"
    assert "x86_64" in str(caught.value) and "aarch64" in str(caught.value)


def test_a_runner_prefix_that_is_not_there_fails_the_health_check(sshd):
    device = emulated_device(sshd, runner_prefix=("/nonexistent/qemu-aarch64",))
    with pytest.raises(DeviceFault) as caught:
        health_check(device, DeviceSettings())
    assert caught.value.kind == "soc_mismatch"
    assert "runner prefix /nonexistent/qemu-aarch64 is not there" in str(caught.value)


# --- the change's own runtime on the emulated device (ExecuTorch's real sources) -------------

def triage_on_both(source_repo, native_data, head: str, device, tmp_path: Path) -> tuple[dict, str]:
    """`etriage triage --target host --target emulated-arm64` through the command line; the
    compiler cache and build folders are the native tests' (warm), results are not cached."""
    inventory = tmp_path / "devices.yaml"
    inventory.write_text(yaml.safe_dump({"devices": {device.id: device.model_dump(mode="json", exclude={"id"})}}))
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "etriage.cli", "triage", "--repo", str(source_repo.path),
                           "--base", "main", "--head", head, "--suite", "probes", "--target", "host",
                           "--target", "emulated-arm64", "--devices", str(inventory), "--data-dir", str(native_data),
                           "--format", "json", "--no-cache", "--out", str(out)],
                          capture_output=True, text=True, timeout=3000, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text()), done.stderr


@pytest.mark.slow
@pytest.mark.executorch
@pytest.mark.timeout(3000)
def test_the_portable_runtime_cross_built_from_the_change_runs_on_the_emulated_device(
        sshd, source_repo, native_data, tmp_path):
    """A comment-only change: both toolchains build (the compiler cache's), every program passes
    on the host and on the emulated arm64 device; the matrix has both columns."""
    _need("aarch64-linux-gnu-g++", "qemu-aarch64-static")
    head = source_repo.branch("arm64-comment", {OP_ADD: lambda t: t.replace(
        " * All rights reserved.", " * All rights reserved.\n * (a comment)", 1)})
    data, log = triage_on_both(source_repo, native_data, head, emulated_device(sshd), tmp_path)
    reason = data["build"]["reason"]
    assert f"portable (aarch64-linux-gnu) at {head[:12]}: ok" in reason, reason
    device_suite = next(s for s in data["suites"] if s["target"] == "emulated-arm64")
    assert device_suite["status"] == "ran", (device_suite, log[-3000:])
    assert {t["test"]: t["outcome"] for t in device_suite["tests"]} == {
        "multi_method::two_methods_portable": "passed", "mutable_buffer::kv_cache_steps_portable": "passed"}
    assert data["summary"].get("new", 0) == 0, data["summary"]
    markdown = to_markdown(Report.from_dict(data))
    assert "| test | host | emulated-arm64<br><sub>emu-1 (emulated-arm64)</sub> |" in markdown


@pytest.mark.slow
@pytest.mark.executorch
@pytest.mark.timeout(3000)
@pytest.mark.parametrize("mode", ["binfmt", "prefix"])
def test_a_bug_in_a_portable_kernel_is_new_on_the_emulated_device_at_that_cpp(sshd, source_repo, native_data,
                                                                            tmp_path, mode, request):
    """The sign bug of tests/native (op_add.cpp): new on the emulated device, naming it, with
    op_add.cpp the top suspect; the runner started by binfmt_misc, then by the inventory's prefix."""
    _need("aarch64-linux-gnu-g++", "qemu-aarch64-static")
    if mode == "binfmt":
        request.getfixturevalue("binfmt")
    device = emulated_device(sshd, runner_prefix=("qemu-aarch64-static",) if mode == "prefix" else ())
    head = source_repo.branch(f"arm64-add-sign-{mode}",
                              {OP_ADD: second(REAL_ADD, "return val_a - val_alpha * val_b;")})
    data, log = triage_on_both(source_repo, native_data, head, device, tmp_path)
    new = [r for r in data["results"] if r["verdict"] == "new" and r["target"] == "emulated-arm64"]
    assert new, (data["summary"], log[-3000:])
    for verdict in new:
        assert verdict["base"] == "passed"
        assert verdict["suspects"][0]["path"] == OP_ADD
        line = (verdict.get("failure") or {}).get("line") or verdict.get("primary_line", "")
        assert "on device emu-1 (SoC emulated-arm64" in line and "runner rebuilt" in line, line
