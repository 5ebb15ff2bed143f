"""What a device target costs per run: a real loopback SSH device (sshd started here, as the
tests do) running the probes' programs with the executorch pybindings, and the pool's lease.

    .venv/bin/python bench/devices.py [-n 3] [--backends portable[,xnnpack]] [--redis URL]
    .venv/bin/python bench/devices.py --emulated [--cold] [--userland] [-n 3]

Prints, per stage: the export of the programs on the host (the change's Python, in the sandbox,
once per commit), then per run on the device: connect + health check + push + every method +
pull + judge (median of n), the seconds spent in the methods themselves, and a lease's round
trip on Redis (acquire + release, median of 200). With --emulated, the emulated-arm64 device
instead: the portable recipe's executor_runner cross-built for aarch64 from ExecuTorch's real
sources (../shared/executorch-src/; the native tests' data dir and compiler cache, or with --cold
an empty one), rebuilt after a one-.cpp change, and the portable programs run with it on the
loopback sshd under QEMU user mode, via binfmt_misc and via the runner prefix; with --userland
also on the arm64 Debian userland's own sshd in a network namespace (tasks/devices/userland.py:
its build, cold when not cached yet, and its sshd's start-up). Asserts nothing about speed.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "devices"))

import redis  # noqa: E402
from conftest import EmulatedUserland, Sshd, build_userland  # noqa: E402  the tests' sshd and arm64 userland

import tests.native.conftest as native_conftest  # noqa: E402  the native tests' sources and git settings
from tasks.devices import emulated  # noqa: E402
from tasks.devices.pool import Pool  # noqa: E402
from tasks.pipeline import native  # noqa: E402
from tasks.pipeline.sandbox import Sandbox  # noqa: E402
from tasks.pipeline.tables import load_tables  # noqa: E402
from triage_rules import classify_text  # noqa: E402
from tasks.pipeline.device_target import DeviceTarget  # noqa: E402
from tasks.pipeline.overlay import installed_package_dir  # noqa: E402
from tasks.pipeline.suites import SuiteRun  # noqa: E402
from tasks.pipeline.tables import Suite, TargetSpec  # noqa: E402
from tasks.records import BuildResult  # noqa: E402


def timed_runs(target, run, n: int):
    """n runs of `run` on `target`: (wall seconds, seconds inside the methods, the last result),
    or None (said why) when a run fails."""
    totals, methods = [], []
    for _ in range(n):
        start = time.monotonic()
        result = target.run(run)
        totals.append(time.monotonic() - start)
        methods.append(sum(t.seconds for t in result.tests))
        if result.status != "ran" or any(t.outcome != "passed" for t in result.tests):
            print(f"run failed: {result.status} {result.reason} "
                  f"{[(t.test, t.outcome, t.message) for t in result.tests]}")
            return None
    return totals, methods, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=3)
    parser.add_argument("--backends", default="portable")
    parser.add_argument("--redis", default="", help="a Redis URL for the lease figure (default: embedded)")
    parser.add_argument("--emulated", action="store_true", help="the emulated-arm64 device and its cross build")
    parser.add_argument("--cold", action="store_true", help="with --emulated: an empty compiler cache and data dir")
    parser.add_argument("--userland", action="store_true",
                        help="with --emulated: also the arm64 userland's own sshd in a network namespace")
    args = parser.parse_args()
    if args.emulated:
        return _emulated(args)
    backends = tuple(args.backends.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="etriage-bench-"))
    sshd_root = Path(tempfile.mkdtemp(prefix="etriage-sshd-"))  # the device user must reach it
    sshd = Sshd(sshd_root)
    sshd.start()
    try:
        device = sshd.device("bench-1", backends=backends)
        spec = TargetSpec(name="ssh:bench-1", kind="ssh", backends=backends, suite_kinds=("probes",))
        target = DeviceTarget(spec, {}, inventory={"bench-1": device})
        build = BuildResult(status="ok", kind="none", commit="b" * 40,
                            package_dir=str(installed_package_dir(sys.executable)))
        run = SuiteRun(Suite(name="probes", kind="probes", backends=backends), build, spec.name, tmp / "run")
        start = time.monotonic()
        bundle, _ = target._export(run, run.work_dir(), sorted(backends))
        export = time.monotonic() - start
        if bundle is None:
            print((run.work_dir() / "export.log").read_text()[-3000:])
            return 1
        target.bundles[(build.commit, build.overlay_dir, tuple(sorted(backends)))] = bundle
        size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
        timed = timed_runs(target, run, args.n)
        if timed is None:
            return 1
        totals, methods, result = timed
        programs_run = len(result.tests)
        print(f"device target ssh (loopback sshd, pybindings runner, backends {','.join(backends)}), "
              f"{programs_run} program(s), bundle {size / 1024:.0f} KiB")
        print(f"  export on the host (sandbox, once per commit): {export:.1f} s")
        print(f"  per run on the device (median of {args.n}): {statistics.median(totals):.1f} s "
              f"(min {min(totals):.1f}, max {max(totals):.1f}); in the methods: {statistics.median(methods):.1f} s")
        print(f"  first run of a commit = export + run: {export + statistics.median(totals):.1f} s")
        _lease_figure(args.redis, device)
    finally:
        sshd.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(sshd_root, ignore_errors=True)
    return 0


def _emulated(args) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="etriage-bench-"))
    repo = tmp / "src" / "executorch"

    def git(*argv: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *argv], capture_output=True, text=True, check=True,
                              env=native_conftest.GIT_ENV).stdout.strip()

    sshd_root = Path(tempfile.mkdtemp(prefix="etriage-sshd-"))
    sshd = Sshd(sshd_root)
    sshd.start()
    land = None
    try:
        with tarfile.open(native_conftest.TARBALL) as tar:
            tar.extractall(repo.parent, filter="data")
        git("init", "-q", "-b", "main")
        git("add", "-A", "--force")
        git("commit", "-q", "--no-gpg-sign", "-m", "ExecuTorch v1.4.1 sources")
        base = git("rev-parse", "HEAD")
        data = tmp / "data" if args.cold else (Path.home() / ".cache" / "etriage" / "test-native")
        spec = native.BuildSpec(repo, data, tmp / "run", sys.executable, Sandbox(), use_cache=False)
        recipe, toolchain = load_tables().recipes["portable"], native.TOOLCHAINS["aarch64-linux-gnu"]
        start = time.monotonic()
        built, _ = native.build(spec, recipe, base, classify_text, toolchain=toolchain)
        first = time.monotonic() - start
        if built.status != "ok":
            print(built.log[-3000:])
            return 1
        op_add = repo / "kernels/portable/cpu/op_add.cpp"
        op_add.write_text(op_add.read_text() + "\nnamespace { [[maybe_unused]] int etriage_bench_touch = 1; }\n")
        git("commit", "-q", "-a", "--no-gpg-sign", "-m", "one .cpp")
        start = time.monotonic()
        again, _ = native.build(spec, recipe, git("rev-parse", "HEAD"), classify_text, toolchain=toolchain)
        incremental = time.monotonic() - start
        if again.status != "ok":
            print(again.log[-3000:])
            return 1
        print(f"portable executor_runner for aarch64 ({'cold: empty compiler cache' if args.cold else 'warm cache'}):")
        print(f"  {built.summary()}\n  first build: {first:.1f} s")
        print(f"  {again.summary()}\n  one .cpp changed: {incremental:.1f} s")
        spec_t = TargetSpec(name="emulated-arm64", kind="emulated", backends=("portable",), suite_kinds=("probes",))
        build = BuildResult(status="ok", kind="overlay+cmake", commit="e" * 40,
                            package_dir=str(installed_package_dir(sys.executable)),
                            build_dirs={"portable@aarch64-linux-gnu": again.artifacts_dir})
        modes = [("runner prefix", ("qemu-aarch64-static",))]
        try:
            modes.insert(0, ("binfmt_misc", ()))
            print(f"  binfmt: {emulated.register_binfmt()}")
        except OSError as error:
            modes.pop(0)
            print(f"  binfmt_misc unavailable ({error})")
        devices = [(mode, sshd.device("emu-1", transport="emulated", soc="emulated-arm64", runner="rebuilt",
                                      backends=("portable",), runner_prefix=prefix)) for mode, prefix in modes]
        if args.userland:
            start = time.monotonic()
            root = build_userland()
            took = time.monotonic() - start
            built = (root / ".etriage-complete").read_text().splitlines()[-1]
            print(f"  arm64 userland {root.name}: {f'built now in {took:.0f} s' if took > 5 else f'cached ({built})'}")
            land = EmulatedUserland(root, tmp / "userland")
            starts = []
            for _ in range(args.n):
                start = time.monotonic()
                land.start()
                starts.append(time.monotonic() - start)
                land.stop()
            print(f"  start-up of the userland's sshd until it accepts a connection (median of {args.n}): "
                  f"{statistics.median(starts):.2f} s")
            land.start()
            devices.append(("the arm64 userland's own sshd (netns, no prefix)", land.device("emu-1")))
        bundle = None
        for index, (mode, device) in enumerate(devices):
            target = DeviceTarget(spec_t, {}, inventory={"emu-1": device})
            run = SuiteRun(Suite(name="probes", kind="probes", backends=("portable",)), build, spec_t.name,
                           tmp / f"run-{index}")
            if bundle is None:
                start = time.monotonic()
                bundle, _ = target._export(run, run.work_dir(), ["portable"])
                print(f"  export of the portable programs on the host: {time.monotonic() - start:.1f} s")
            target.bundles[(build.commit, build.overlay_dir, ("portable",))] = bundle
            timed = timed_runs(target, run, args.n)
            if timed is None:
                return 1
            totals, methods, result = timed
            print(f"  one run of the {len(result.tests)} portable programs on emulated-arm64 via {mode} "
                  f"(median of {args.n}): {statistics.median(totals):.2f} s "
                  f"(min {min(totals):.2f}, max {max(totals):.2f}); in the methods: {statistics.median(methods):.2f} s")
    finally:
        sshd.stop()
        if land:
            land.close()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(sshd_root, ignore_errors=True)
    return 0


def _lease_figure(url: str, device) -> None:
    def measure(client) -> None:
        pool = Pool(client, {device.id: device}, prefix="etriage-bench:")
        times = []
        for i in range(200):
            start = time.monotonic()
            lease = pool.acquire(device.device_class, f"bench-{i}")
            pool.release(lease)
            times.append(time.monotonic() - start)
        print(f"  a lease on Redis (acquire + release, no health check): median "
              f"{statistics.median(times) * 1000:.2f} ms over 200")
        for key in client.scan_iter("etriage-bench:*"):
            client.delete(key)

    if url:
        measure(redis.Redis.from_url(url))
        return
    from etriage.embedded_redis import EmbeddedRedis  # deferred: only without --redis

    with EmbeddedRedis() as embedded:
        measure(redis.Redis.from_url(embedded))


if __name__ == "__main__":
    sys.exit(main())
