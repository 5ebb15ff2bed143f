"""The ssh device target end to end: the probes' programs exported by the change's Python in the
sandbox, run with the real ExecuTorch runtime on a real (loopback) SSH device, compared with
eager on the host; and the device's faults reported as the device's."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import redis
import yaml

from tasks.devices.inventory import Device
from tasks.devices.pool import Pool
from tasks.devices.connect import DeviceSettings, health_check
from tasks.pipeline import compare, device_target, programs
from tasks.pipeline.device_target import DeviceTarget
from tasks.pipeline.overlay import installed_package_dir
from tasks.pipeline.suites import SuiteRun
from tasks.pipeline.tables import Suite, TargetSpec
from tasks.records import BuildResult
from tests.native.conftest import PROBE_KERNELS
from triage_rules import classify_text

ROOT = Path(__file__).resolve().parents[2]
SPEC = TargetSpec(name="ssh:loop-1", kind="ssh", backends=("portable", "xnnpack"), suite_kinds=("probes",))
PROBES = Suite(name="probes", kind="probes", backends=("portable", "xnnpack"))


def _run(tmp_path: Path, target="ssh:loop-1") -> SuiteRun:
    build = BuildResult(status="ok", kind="none", commit="c0ffee" * 6 + "abcd",
                        package_dir=str(installed_package_dir(sys.executable)))
    return SuiteRun(PROBES, build, target, tmp_path / "run")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One export of the installed executorch's probe programs (portable only), shared."""
    tmp = tmp_path_factory.mktemp("export")
    target = DeviceTarget(SPEC, {}, inventory={})
    run = _run(tmp)
    bundle, _ = target._export(run, run.work_dir(), ["portable"])
    assert bundle is not None, (run.work_dir() / "export.log").read_text()[-3000:]
    return bundle


def _target(device: Device, bundle: Path | None, run: SuiteRun, **kw) -> DeviceTarget:
    target = DeviceTarget(SPEC if ":" in run.target else TargetSpec(
        name=run.target, kind="ssh", backends=("portable",), suite_kinds=("probes",)), {},
        inventory={device.id: device} | kw.pop("more", {}), **kw)
    if bundle is not None:
        target.bundles[(run.build.commit, run.build.overlay_dir, ("portable",))] = bundle
    return target


def test_probes_run_on_the_device_and_match_eager(sshd, tmp_path):
    """The whole way: export in the sandbox, push, run every method (two methods; a KV cache
    over three steps of one Method), pull, compare; the device's work dir is gone after."""
    device = sshd.device(backends=("portable",))
    run = _run(tmp_path)
    result = _target(device, None, run).run(run)
    assert result.status == "ran", result.reason + result.log_excerpt
    assert {t.test: t.outcome for t in result.tests} == {
        "multi_method::two_methods_portable": "passed", "mutable_buffer::kv_cache_steps_portable": "passed"}
    assert all(t.target == "ssh:loop-1" for t in result.tests)
    assert "--out" in result.command  # the export ran (in the sandbox)
    assert list(sshd.work_root.iterdir()) == []


def test_the_portable_programs_call_only_the_kernels_the_short_native_tree_keeps(exported):
    """tests/native builds a tree with PROBE_KERNELS' kernels only: a probe program that calls
    another operator would fail there as "missing operator", so the list follows the programs."""
    # deferred: importing executorch at collection would cost every worker seconds
    from executorch.exir._serialize._program import deserialize_pte_binary

    stems = set()
    for program in programs.read_manifest(exported):
        pte = deserialize_pte_binary((exported / program.pte).read_bytes())
        for plan in getattr(pte, "program", pte).execution_plan:
            stems |= {op.name.partition("::")[2].rstrip("_") for op in plan.operators}
    assert stems and stems <= PROBE_KERNELS, stems - PROBE_KERNELS


def test_a_wrong_output_is_the_programs_failure_and_names_the_device(sshd, exported, tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(exported, bundle)
    kv = next(p for p in programs.read_manifest(bundle) if p.name == "kv_cache_steps_portable")
    last = kv.methods[0].steps[-1].expected[0]  # eager's output at the last step, made wrong
    wrong = np.frombuffer((bundle / last.file).read_bytes(), dtype=last.dtype) + 1.0
    (bundle / last.file).write_bytes(wrong.astype(last.dtype).tobytes())
    run = _run(tmp_path)
    result = _target(sshd.device(backends=("portable",)), bundle, run).run(run)
    outcome = {t.test: t for t in result.tests}
    assert outcome["multi_method::two_methods_portable"].outcome == "passed"
    failed = outcome["mutable_buffer::kv_cache_steps_portable"]
    assert failed.outcome == "failed"
    assert "step 3/3" in failed.message and "numerical mismatch" in failed.message
    assert "on device loop-1 (SoC x86_64" in failed.message
    [failure] = compare.classify_failing({("probes", run.target, failed.test): failed}, classify_text).values()
    assert not any(f.environment for f in failure)  # the program's, not the device's


def test_a_dead_device_is_retried_then_reported_as_device_infra(sshd, exported, tmp_path):
    sshd.stop()
    run = _run(tmp_path)
    result = _target(sshd.device(), exported, run).run(run)
    assert result.status == "crashed" and result.reason == "device fault (refused); 3 attempt(s)"
    assert result.log_excerpt.count("Connection refused") == 3
    head = compare.index([result])
    verdicts = compare.decide({}, head, compare.classify_failing(head, classify_text), {})
    assert [(v.verdict, v.category) for v in verdicts] == [("environment", "device_infra")]
    assert "loop-1 (x86_64)" in verdicts[0].primary_line


def test_a_run_killed_at_its_time_limit_is_the_devices(sshd, exported, tmp_path, monkeypatch):
    """A method that hangs on the device (its runtime sleeps) is killed at the time limit. The
    hang is the runtime's own, not a real method that happens to be slower than the limit (that
    one finished in under a second on a quiet machine: the test then saw it pass)."""
    monkeypatch.setattr(device_target, "METHOD_TIMEOUT", 1.0)
    run = _run(tmp_path)
    result = _target(sshd.device(runtime=("sh", "-c", "sleep 30")), exported, run).run(run)
    assert result.status == "crashed" and "device fault (timeout)" in result.reason
    assert list(sshd.work_root.iterdir()) == []  # cleaned up after each attempt


def test_with_the_pool_a_bad_device_is_skipped_and_quarantined(sshd, exported, tmp_path, redis_url):
    """Two devices of one class: the first's sshd is gone (health check fails), the run goes to
    the second; the pool counts the fault."""
    good = sshd.device("loop-good", backends=("portable",))
    dead = sshd.device("loop-dead", address=f"{sshd.user.pw_name}@127.0.0.1:1", backends=("portable",))
    inventory = {"loop-dead": dead, "loop-good": good}
    client = redis.Redis.from_url(redis_url)
    pool = Pool(client, inventory, prefix=f"etriage-test:{tmp_path.name}:", quarantine_after=1,
                health=lambda d: health_check(d, DeviceSettings()))
    run = _run(tmp_path, target="x86_64")
    target = _target(good, exported, run, more={"loop-dead": dead}, pool=pool)
    result = target.run(run)
    assert result.status == "ran" and all(t.outcome == "passed" for t in result.tests), result.reason
    assert result.reason == "on device loop-good (x86_64)"
    assert pool.is_quarantined("loop-dead") and not pool.is_quarantined("loop-good")
    assert pool.holder("loop-good") is None
    for key in client.scan_iter(f"etriage-test:{tmp_path.name}:*"):
        client.delete(key)


@pytest.mark.parametrize("inventory, name, reason", [
    (None, "ssh:loop-1", "no device inventory on this worker (ETRIAGE_DEVICES is not set)"),
    ({}, "ssh:nope", "no enabled ssh device named 'nope' in the inventory"),
    ({}, "emulated-arm64", "no enabled device for emulated-arm64 in the inventory"),
])
def test_not_run_says_why(inventory, name, reason, tmp_path):
    target = DeviceTarget(TargetSpec(name=name, kind=name.partition(":")[0] if ":" in name else "emulated",
                                     backends=("portable",), suite_kinds=("probes",)), {}, inventory=inventory)
    result = target.run(_run(tmp_path, target=name))
    assert (result.status, result.reason) == ("not_run", reason)


def test_a_phone_the_adb_server_does_not_have_is_missing(adb_server, exported, tmp_path):
    """android:<device> through Debian's real adb server, which has no phone here: the device's
    fault (missing), retried, then device_infra; nothing of the change is blamed."""
    _, port, _ = adb_server
    phone = Device(id="phone-1", transport="android", address="R5CT1234ABC", soc="SM8750",
                   adb_host=f"127.0.0.1:{port}", runner="/data/local/tmp/executor_runner")
    run = _run(tmp_path, target="android:phone-1")
    target = DeviceTarget(TargetSpec(name="android:phone-1", kind="android", backends=("portable",),
                                     suite_kinds=("probes",)), {}, inventory={"phone-1": phone})
    target.bundles[(run.build.commit, run.build.overlay_dir, ("portable",))] = exported
    result = target.run(run)
    assert result.status == "crashed" and result.reason == "device fault (missing); 3 attempt(s)"
    assert "device 'R5CT1234ABC' not found" in result.log_excerpt and "phone-1 (SM8750)" in result.log_excerpt
    head = compare.index([result])
    [verdict] = compare.decide({}, head, compare.classify_failing(head, classify_text), {})
    assert (verdict.verdict, verdict.category) == ("environment", "device_infra")


@pytest.mark.parametrize("text, reason", [
    ("devices:\n  x: {transport: ssh, address: a@b, soc: SM9999}\n", "devices.x: soc: Value error, unknown SoC 'SM9999'"),
    (None, "device inventory not found"),
])
def test_a_bad_inventory_file_is_a_clear_not_run(text, reason, tmp_path):
    path = tmp_path / "lab.yaml"
    if text is not None:
        path.write_text(text)
    target = DeviceTarget(SPEC, {"ETRIAGE_DEVICES": str(path)})
    result = target.run(_run(tmp_path))
    assert result.status == "not_run" and reason in result.reason and str(path) in result.reason


@pytest.fixture
def device_worker(sshd, redis_url, tmp_path):
    """A device host's real Celery worker (tasks/device_worker.py) on the loopback device's
    class queue, with its own inventory file, on the session's real Redis."""
    device = sshd.device("loop-1", backends=("portable",))
    inventory = tmp_path / "lab.yaml"
    inventory.write_text(yaml.safe_dump({"devices": {"loop-1": device.model_dump(mode="json", exclude={"id"})}}))
    env = dict(os.environ, ETRIAGE_DEVICES=str(inventory), ETRIAGE_DEVICE_BROKER_URL=redis_url,
               ETRIAGE_DEVICE_REDIS_URL=redis_url)
    proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "tasks.device_worker", "worker", "-Q",
                             device.queue, "-P", "solo", "--without-gossip", "--without-mingle",
                             "--without-heartbeat", "-n", f"device-test-{os.getpid()}@%h", "--loglevel", "WARNING"],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "worker.log", "wb"))
    yield device, inventory
    proc.terminate()
    proc.wait(timeout=30)


def test_the_device_class_queue_runs_the_bundle_on_the_device_host(device_worker, exported, redis_url, tmp_path):
    """The triage side has the inventory but not the devices: the bundle goes to queue
    device.x86_64, the device host's worker leases loop-1, runs and judges, answers."""
    device, inventory = device_worker
    run = _run(tmp_path)
    target = DeviceTarget(SPEC, {"ETRIAGE_DEVICES": str(inventory), "ETRIAGE_DEVICE_BROKER_URL": redis_url})
    target.bundles[(run.build.commit, run.build.overlay_dir, ("portable",))] = exported
    result = target.run(run)
    assert result.status == "ran", result.reason + result.log_excerpt
    assert result.reason == "on device loop-1 (x86_64)"
    assert {t.test: t.outcome for t in result.tests} == {
        "multi_method::two_methods_portable": "passed", "mutable_buffer::kv_cache_steps_portable": "passed"}
    assert Pool(redis.Redis.from_url(redis_url), {device.id: device}).holder("loop-1") is None  # lease returned


def test_no_worker_on_the_class_queue_is_the_devices_fault(sshd, exported, redis_url, tmp_path):
    device = sshd.device("arm-1", soc="arm64", backends=("portable",))  # no worker serves device.arm64
    inventory = tmp_path / "lab.yaml"
    inventory.write_text(yaml.safe_dump({"devices": {"arm-1": device.model_dump(mode="json", exclude={"id"})}}))
    run = replace(_run(tmp_path, target="ssh:arm-1"), timeout=2)
    target = DeviceTarget(TargetSpec(name="ssh:arm-1", kind="ssh", backends=("portable",), suite_kinds=("probes",)),
                          {"ETRIAGE_DEVICES": str(inventory), "ETRIAGE_DEVICE_BROKER_URL": redis_url})
    target.bundles[(run.build.commit, run.build.overlay_dir, ("portable",))] = exported
    result = target.run(run)
    assert result.status == "crashed" and result.reason == "device fault (timeout); 3 attempt(s)"
    assert "no answer from a worker of queue device.arm64" in result.log_excerpt


# As on main since #21816: the bindings are `_C` and there is no `_portable_lib`. The shim gives
# the runner the wheel's real bindings under that name only, and makes `_portable_lib` unimportable.
ONLY_C = """
import importlib.abc, runpy, sys
import executorch.extension.pybindings as package
from executorch.extension.pybindings import _portable_lib as real
sys.modules["executorch.extension.pybindings._C"] = package._C = real
del sys.modules["executorch.extension.pybindings._portable_lib"], package._portable_lib

class NoPortableLib(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.endswith("._portable_lib"):
            raise ImportError("no _portable_lib here (main)")

sys.meta_path.insert(0, NoPortableLib())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _local(argv: list[str], log: Path) -> tuple[int | None, float, str]:
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    log.write_text(proc.stdout)
    return proc.returncode, 0.0, proc.stdout


@pytest.mark.parametrize("bindings", ["_portable_lib", "_C"])
def test_the_pybind_runner_runs_every_probe_program_with_either_bindings_module(bindings, exported, tmp_path):
    """pybind_runner (a device's fallback runtime) imports the bindings as `_C` (main) or
    `_portable_lib` (1.4): with either, every portable probe program matches eager, every step."""
    from tasks.devices import pybind_runner

    # alone in its folder, as pushed to a device (beside tasks/devices/queue.py it would shadow
    # the standard library's `queue`)
    runner = tmp_path / "pushed" / "pybind_runner.py"
    runner.parent.mkdir()
    shutil.copy(pybind_runner.__file__, runner)
    shim = [sys.executable, "-c", ONLY_C] if bindings == "_C" else [sys.executable]
    runs = programs.run_bundle(exported, [*shim, str(runner)], tmp_path / "out", _local)
    outcomes = programs.judge(exported, tmp_path / "out", runs, {"portable"})
    assert outcomes and all(o.outcome == "passed" for o in outcomes), [(o.program.name, o.message) for o in outcomes]
    if bindings == "_C":  # the shim hides `_portable_lib`: the run above went through `_C`
        probe = tmp_path / "old_runner.py"
        probe.write_text("from executorch.extension.pybindings import _portable_lib\n")
        old = subprocess.run([*shim, str(probe)], capture_output=True, text=True, timeout=120)
        assert old.returncode != 0 and "no _portable_lib here (main)" in old.stderr, old.stderr[-2000:]
