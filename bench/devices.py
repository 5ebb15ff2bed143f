"""What a device target costs per run: a real loopback SSH device (sshd started here, as the
tests do) running the probes' programs with the executorch pybindings, and the pool's lease.

    .venv/bin/python bench/devices.py [-n 3] [--backends portable[,xnnpack]] [--redis URL]

Prints, per stage: the export of the programs on the host (the change's Python, in the sandbox,
once per commit), then per run on the device: connect + health check + push + every method +
pull + judge (median of n), the seconds spent in the methods themselves, and a lease's round
trip on Redis (acquire + release, median of 200). Asserts nothing about speed.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "devices"))

import redis  # noqa: E402
from conftest import Sshd  # noqa: E402  the tests' loopback sshd

from tasks.devices.pool import Pool  # noqa: E402
from tasks.pipeline.device_target import DeviceTarget  # noqa: E402
from tasks.pipeline.overlay import installed_package_dir  # noqa: E402
from tasks.pipeline.suites import SuiteRun  # noqa: E402
from tasks.pipeline.tables import Suite, TargetSpec  # noqa: E402
from tasks.records import BuildResult  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=3)
    parser.add_argument("--backends", default="portable")
    parser.add_argument("--redis", default="", help="a Redis URL for the lease figure (default: embedded)")
    args = parser.parse_args()
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
        totals, methods = [], []
        for _ in range(args.n):
            start = time.monotonic()
            result = target.run(run)
            totals.append(time.monotonic() - start)
            methods.append(sum(t.seconds for t in result.tests))
            if result.status != "ran" or any(t.outcome != "passed" for t in result.tests):
                print(f"run failed: {result.status} {result.reason} {[(t.test, t.outcome) for t in result.tests]}")
                return 1
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
