"""Device targets: the probes' programs, made on the host, run on a device.

    ssh:<id>          a Linux device or device host of the inventory, over SSH
    emulated-arm64    any device of the inventory's emulated arm64 class (QEMU user mode + sshd)
    android:<id>      a phone over adb (tasks/devices/android.py)

A run: (1) the change's Python exports the probes' programs as a bundle in the sandbox
(tasks/pipeline/programs.py: .pte, per-method per-step inputs and eager's outputs); (2) a device
is leased from the pool (when the worker has one) after its health check; (3) the bundle and the
runner go to a fresh work dir on the device, every method of every program runs there through
programs.run_bundle's scripts (mutable-buffer programs step by step on one Method), outputs come
back, the work dir is removed; (4) programs.judge compares with eager on the host. A device fault
is retried on the next device, a bounded number of times, then reported with the device's own
line (`device_infra`, the environment's) and never as the change's.
"""
from __future__ import annotations

import contextlib
import json
import platform
import shutil
import time
from pathlib import Path

import redis
from celery.exceptions import TimeoutError as CeleryTimeout
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from tasks.devices import emulated, pybind_runner
from tasks.devices.android import qnn_environment
from tasks.devices.connect import DeviceSettings, check_open, health_check, open_transport
from tasks.devices.faults import DeviceFault
from tasks.devices.inventory import Device, InventoryError, load_inventory
from tasks.devices.pool import NoDevice, Pool
from tasks.devices.queue import RUN_BUNDLE, make_client, pack, queue_for
from tasks.pipeline import programs
from tasks.pipeline import suites as suite_runner
from tasks.pipeline.sandbox import TASKS_DIR, run_logged, scrubbed_env, tail_text
from tasks.pipeline.suites import SuiteRun, run_each
from tasks.pipeline.tables import TargetSpec
from tasks.records import BuildResult, SuiteResult, TestResult

ATTEMPTS = 3  # a run meets at most this many device faults before it is reported
METHOD_TIMEOUT = 600.0
EXPORT_CODE = (TASKS_DIR / "pipeline" / "__init__.py", TASKS_DIR / "pipeline" / "programs.py")
# native.py's toolchain -> the `uname -m` its binaries run on
TOOLCHAIN_MACHINES = {"host": platform.machine(), "aarch64-linux-gnu": "aarch64"}
RECIPE_BACKENDS = {"xnnpack": {"portable", "xnnpack"}, "portable": {"portable"}}


class NoRunner(RuntimeError):
    """The device wants the change's rebuilt runner and this run has none for its machine."""


def rebuilt_runner(build: BuildResult, machine: str) -> tuple[Path, set[str]] | None:
    """The executor_runner this run rebuilt for `machine` (the recipe with the most backends)."""
    def backends(key: str) -> set[str]:  # "portable" or "portable@aarch64-linux-gnu"
        return set(RECIPE_BACKENDS.get(key.partition("@")[0], {"portable"}))

    for recipe, folder in sorted(build.build_dirs.items(), key=lambda kv: -len(backends(kv[0]))):
        runner, info = Path(folder) / "executor_runner", Path(folder) / "build.json"
        if runner.is_file() and info.is_file():
            toolchain = json.loads(info.read_text()).get("toolchain", "host")
            if TOOLCHAIN_MACHINES.get(toolchain) == machine:
                return runner, backends(recipe)
    return None


def not_run(run: SuiteRun, reason: str) -> SuiteResult:
    return SuiteResult(suite=run.suite.name, target=run.target, commit=run.build.commit,
                       status="not_run", reason=reason)


class DeviceTarget:
    """The Target interface (tasks/pipeline/targets.py): available(), run(), run_many()."""

    python_runtime = False  # programs run on the device's runner; Python only exports them

    def __init__(self, spec: TargetSpec, tool_env: dict[str, str], *,
                 inventory: dict[str, Device] | None = None, pool: Pool | None = None):
        self.spec, self.name, self.tool_env = spec, spec.name, tool_env
        self.settings = DeviceSettings.from_env(tool_env)
        self._inventory, self.pool = inventory, pool
        self.bundles: dict[tuple, Path] = {}  # (commit, overlay, backends) -> exported bundle: retries reuse it

    def env_for(self, run: SuiteRun) -> dict[str, str]:
        """The export's environment (the sandbox's; the device settings never reach it)."""
        return scrubbed_env(run.work_dir(), sandbox=run.sandbox, python=run.python,
                            pythonpath=[*run.pythonpath(), str(suite_runner.PLUGIN_DIR)],
                            pass_through=self.tool_env)

    def run_many(self, runs: list[SuiteRun]) -> list[tuple[list[SuiteResult], float, bool]]:
        return run_each(self, runs)

    # --- which devices -------------------------------------------------------------------

    def inventory(self) -> dict[str, Device]:
        if self._inventory is None:
            if not self.settings.inventory:
                raise InventoryError("no device inventory on this worker (ETRIAGE_DEVICES is not set)")
            self._inventory = load_inventory(self.settings.inventory)
        return self._inventory

    def devices(self) -> list[Device]:
        """`ssh:lab-1` -> that device; `emulated-arm64` -> every enabled device of that class."""
        template, _, wanted = self.name.partition(":")
        found = [d for d in self.inventory().values() if d.enabled and d.transport == self.spec.kind
                 and (d.id == wanted if wanted else d.soc == template or template == self.spec.kind)]
        return found

    def available(self) -> tuple[bool, str]:
        try:
            found = self.devices()
        except InventoryError as error:
            return False, str(error)
        if not found:
            return False, (f"no enabled {self.spec.kind} device named {self.name.partition(':')[2]!r} in the "
                           f"inventory" if ":" in self.name else f"no enabled device for {self.name} in the inventory")
        return True, ""

    def toolchains(self) -> list[str]:
        """The native toolchains the change's runner must be built with for this target's
        devices (`runner: rebuilt`): the build stage builds the cmake recipes with each."""
        try:
            found = self.devices()
        except InventoryError:
            return []
        machines = {machine: toolchain for toolchain, machine in TOOLCHAIN_MACHINES.items()}
        return sorted({machines[d.soc_info.machine] for d in found
                       if d.runner == "rebuilt" and d.soc_info.machine in machines})

    # --- a run ---------------------------------------------------------------------------

    def run(self, run: SuiteRun) -> SuiteResult:
        if run.suite.kind not in self.spec.suite_kinds:
            return not_run(run, f"target {self.name} does not run {run.suite.kind} suites")
        ok, reason = self.available()
        if not ok:
            return not_run(run, reason)
        start = time.monotonic()
        work = run.work_dir()
        devices = self.devices()
        backends = sorted({b for d in devices for b in d.backends} & {"portable", "xnnpack"}) or ["portable"]
        key = (run.build.commit, run.build.overlay_dir, tuple(backends))
        bundle, exported = (self.bundles[key], []) if key in self.bundles else self._export(run, work, backends)
        result = SuiteResult(suite=run.suite.name, target=self.name, commit=run.build.commit, status="ran",
                             command=exported)
        if bundle is not None:
            self.bundles[key] = bundle
        else:
            result.status, result.reason = "crashed", "the probes' programs could not be exported on the host"
            result.log_excerpt = tail_text(work / "export.log", 6000)
            return result
        faults: list[DeviceFault] = []
        while len(faults) < ATTEMPTS:
            try:
                device, outcomes = self._attempt(run, bundle, work / f"attempt{len(faults)}",
                                                 devices[len(faults) % len(devices):] + devices[:len(faults) % len(devices)])
            except NoRunner as error:
                return not_run(run, str(error))
            except NoDevice as error:
                faults.append(DeviceFault("missing", str(error), self.name))
                break
            except DeviceFault as fault:
                faults.append(fault)
                if not fault.retryable and len(devices) == 1:
                    break
                continue
            result.tests = [self._test(run, device, o) for o in outcomes]
            result.seconds = round(time.monotonic() - start, 2)
            result.reason = f"on device {device.describe()}" + (
                f", after {len(faults)} device fault(s): " + "; ".join(f.line() for f in faults) if faults else "")
            return result
        result.status = "crashed"
        result.reason = f"device fault ({faults[-1].kind}); {len(faults)} attempt(s)"
        result.log_excerpt = "\n".join(f.line() for f in faults)
        result.seconds = round(time.monotonic() - start, 2)
        return result

    def _export(self, run: SuiteRun, work: Path, backends: list[str]) -> tuple[Path | None, list[str]]:
        """The change's Python writes the bundle, in the sandbox."""
        bundle = work / "bundle"
        shutil.rmtree(bundle, ignore_errors=True)
        bundle.mkdir(parents=True)
        cmd = [run.python, "-m", "tasks.pipeline.programs", "export", "--out", str(bundle),
               "--backends", ",".join(backends)]
        done = run_logged(cmd, cwd=run.package_dir, env=self.env_for(run), log_path=work / "export.log",
                          timeout=min(run.timeout, 900), sandbox=run.sandbox, python=run.python,
                          readable=[*run.readable(), *EXPORT_CODE], writable=[bundle])
        ok = done.returncode == 0 and (bundle / programs.MANIFEST).is_file()
        return (bundle if ok else None), cmd

    def _attempt(self, run: SuiteRun, bundle: Path, out_dir: Path, devices: list[Device]):
        shutil.rmtree(out_dir, ignore_errors=True)
        out_dir.mkdir(parents=True)
        job = f"{run.build.commit[:12]}/{run.suite.name}/{run.phase}{run.attempt}"
        if self.settings.broker_url:  # the devices hang off another host: its queue runs them
            return self._dispatch(run, bundle, devices, job)
        if self.pool is None and self.settings.redis_url:
            self.pool = Pool(redis.Redis.from_url(self.settings.redis_url), self.inventory(),
                             health=lambda d: health_check(d, self.settings))
        return run_on_devices(bundle, out_dir, devices, self.pool, self.settings, run.build, job)

    def _dispatch(self, run: SuiteRun, bundle: Path, devices: list[Device], job: str):
        """Send the bundle to the device class's queue; the device host's worker leases, runs and
        judges; its answer comes back as outcomes (or the device's fault)."""
        queue = queue_for(devices[0].device_class)
        client = make_client(self.settings.broker_url, "etriage-device-client")
        sent = None
        try:
            sent = client.send_task(RUN_BUNDLE, args=[self.name, [d.id for d in devices], job, pack(bundle)],
                                    queue=queue)
            answer = sent.get(timeout=run.timeout, propagate=True)
            sent.forget()
        except CeleryTimeout:
            sent.revoke()
            raise DeviceFault("timeout", f"no answer from a worker of queue {queue} within {run.timeout:.0f} s "
                                         "(is a device host's worker running?)", self.name) from None
        except (OperationalError, RedisError) as error:
            raise DeviceFault("unreachable", f"the device queues' broker: {error}", self.name) from None
        finally:
            if sent is not None:  # the backend keeps pending results: let go of this one now,
                with contextlib.suppress(OperationalError, RedisError):  # not in __del__ at exit
                    sent.backend.remove_pending_result(sent)
                sent.backend = None
            client.close()
        if "fault" in answer:
            fault = answer["fault"]
            raise DeviceFault(fault["kind"], fault["detail"], fault["device"])
        device = Device(**answer["device"])
        programs_by_id = {p.test_id: p for p in programs.read_manifest(bundle)}
        outcomes = [programs.Outcome(programs_by_id[o["test"]], o["outcome"], o["message"], o["log"], o["seconds"])
                    for o in answer["outcomes"]]
        return device, outcomes

    def _test(self, run: SuiteRun, device: Device, outcome: programs.Outcome) -> TestResult:
        where = (f"on device {device.id} (SoC {device.soc}, {device.transport} {device.address}, "
                 f"runner {device.runner})")
        failed = outcome.outcome == "failed"
        message = f"{outcome.message} [{where}]" if failed else outcome.message
        return TestResult(suite=run.suite.name, test=outcome.program.test_id, target=self.name,
                          outcome=outcome.outcome, message=message[:500],
                          # the primary line the engine picks names the device and SoC
                          text=f"{message}\n{outcome.log}" if failed else "", seconds=outcome.seconds)


def run_on_devices(bundle: Path, out_dir: Path, devices: list[Device], pool: Pool | None, settings: DeviceSettings,
                   build: BuildResult | None, job: str) -> tuple[Device, list[programs.Outcome]]:
    """One attempt: a leased device (or, with no pool, the first one), the bundle run there and
    judged. Raises DeviceFault (recorded with the pool) or NoRunner."""
    if pool is not None:
        with pool.lease(devices[0].device_class, job, only={d.id for d in devices}) as lease:
            try:
                outcomes = run_on(lease.device, bundle, out_dir, settings, build)
            except DeviceFault as fault:
                pool.record(lease.device.id, fault)
                raise
            pool.record(lease.device.id, None)
            return lease.device, outcomes
    device = devices[0]  # no pool: this worker alone uses its devices (in turn after a fault)
    return device, run_on(device, bundle, out_dir, settings, build, check=True)


def run_on(device: Device, bundle: Path, out_dir: Path, settings: DeviceSettings, build: BuildResult | None,
           check: bool = False) -> list[programs.Outcome]:
    """Push the bundle and the runner into a fresh work dir on the device, run every method
    with programs.run_bundle's scripts, pull the outputs, judge them against eager."""
    with open_transport(device, settings) as transport:
        if check:
            check_open(transport, device)
        with transport.workdir() as remote:
            transport.push(bundle, remote)
            runner, has = _runner(transport, device, remote, build)
            remote_out = f"{remote}/out"
            # a phone's runner finds the QNN libraries pushed beside it (ExecuTorch's SimpleADB)
            env = qnn_environment(remote) if device.transport == "android" else None
            transport.check(["mkdir", "-p", remote_out])

            def execute(argv: list[str], log_path: Path):
                # argv: sh SCRIPT BUNDLE OUT RUNNER...; the same script, run on the device
                script = Path(argv[1])
                transport.push(script, remote)
                ran = transport.run(["sh", f"{remote}/{script.name}", f"{remote}/{bundle.name}", remote_out,
                                     *argv[4:]], timeout=METHOD_TIMEOUT, cwd=remote, env=env)
                log_path.write_text(ran.output)
                return ran.returncode, ran.seconds, ran.output

            runs = programs.run_bundle(bundle, runner, out_dir, execute)
            transport.pull(remote_out, out_dir)
    return programs.judge(bundle, out_dir, runs, has)


def _runner(transport, device: Device, remote: str, build: BuildResult | None) -> tuple[list[str], set[str]]:
    """The command that runs a method on the device, and the backends it has."""
    if device.runner == "pybind":
        transport.push(Path(pybind_runner.__file__), remote)
        return [*device.runtime, f"{remote}/pybind_runner.py"], set(device.backends)
    if device.runner == "rebuilt":
        found = rebuilt_runner(build, device.soc_info.machine or transport.machine()) if build else None
        if found is None:
            raise NoRunner(f"no executor_runner was rebuilt for {device.soc_info.machine or device.soc} in "
                           "this run (no native change, or no recipe for that machine)")
        runner, has = found
        transport.push(runner, remote)
        return [*emulated.runner_prefix(transport, device), f"{remote}/{runner.name}"], has
    return [*emulated.runner_prefix(transport, device), device.runner], set(device.backends)
