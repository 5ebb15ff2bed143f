"""The leased pool with several real worker processes on one real Redis: never a device held
twice, a killed worker's device comes back after its TTL, waiting jobs served in order per SoC,
health checks and quarantine."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis

from tasks.devices.faults import DeviceFault
from tasks.devices.inventory import load_inventory
from tasks.devices.pool import NoDevice, Pool

WORKER = Path(__file__).with_name("pool_worker.py")
INVENTORY = """
devices:
  x86-a: {transport: ssh, address: "u@127.0.0.1:1", soc: x86_64}
  x86-b: {transport: ssh, address: "u@127.0.0.1:2", soc: x86_64}
  phone-1: {transport: android, address: SERIAL1, soc: SM8750}
  phone-off: {transport: android, address: SERIAL2, soc: SM8750, enabled: false}
  arm-1: {transport: ssh, address: "u@127.0.0.1:3", soc: arm64}
"""


@pytest.fixture
def lab(redis_url, tmp_path):
    path = tmp_path / "devices.yaml"
    path.write_text(INVENTORY)
    client = redis.Redis.from_url(redis_url)
    prefix = f"etriage-test:{uuid.uuid4().hex[:8]}:"
    procs: list[subprocess.Popen] = []

    class Lab:
        def __init__(self):
            self.url, self.path, self.client, self.prefix = redis_url, path, client, prefix

        def pool(self, **kw) -> Pool:
            return Pool(client, load_inventory(path), prefix=prefix, **kw)

        def worker(self, *args) -> subprocess.Popen:
            proc = subprocess.Popen([sys.executable, str(WORKER), *args[:1], redis_url, prefix, str(path), *args[1:]]
                                    if args[0] == "--hold-forever" else
                                    [sys.executable, str(WORKER), redis_url, prefix, str(path), *args])
            procs.append(proc)
            return proc

        def events(self, timeout=120) -> dict:
            got = client.blpop([f"{prefix}test:events"], timeout=timeout)
            assert got, "no worker event"
            return json.loads(got[1])

    yield Lab()
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)


def test_never_a_device_held_twice(lab):
    # the fallback poll is 30 s: a waiter first in line that is not woken when a device frees (or
    # when the one before it takes a device) stalls for 30 s, and the run overshoots its bound.
    # That was a real fault: one shared wake-up, taken by a waiter that was not first, left the
    # first asleep for its 1 s poll, so the four jobs took turns on x86-a and x86-b stood idle.
    jobs = [lab.worker("x86_64", f"job{i}", "6", "0.05", "5", "1", "30") for i in range(4)]
    for _ in jobs:  # all four lease from the same moment
        assert lab.client.blpop([f"{lab.prefix}test:ready"], timeout=120), "a worker never got ready"
    started = time.monotonic()
    lab.client.set(f"{lab.prefix}test:go", 1)
    for proc in jobs:
        assert proc.wait(timeout=300) == 0
    took = time.monotonic() - started
    events = [json.loads(e) for e in lab.client.lrange(f"{lab.prefix}test:events", 0, -1)]
    assert lab.client.lrange(f"{lab.prefix}test:violations", 0, -1) == []
    assert len(events) == 24
    assert {e["device"] for e in events} <= {"x86-a", "x86-b"}  # nothing of another class
    assert took < 25, f"24 leases of 0.05 s took {took:.1f} s: a waiter was left asleep"
    assert all(v["holder"] is None for v in lab.pool().status().values())


def test_two_devices_freed_together_go_to_the_two_jobs_in_line(lab):
    # x86-a and x86-b both held; two jobs queue, then both devices are freed at once. The second
    # in line may wake before the first has taken its device, find it is not first, and sleep
    # again: the first taking x86-a must wake it, or x86-b stays idle for the 30 s poll.
    pool = lab.pool(ttl=60, poll=30)
    held = [pool.acquire("x86_64", "holder-a"), pool.acquire("x86_64", "holder-b")]
    queue = f"{lab.prefix}queue:x86_64"
    for i in range(2):
        lab.worker("x86_64", f"w{i}", "1", "60", "60", "0", "30")
        deadline = time.monotonic() + 120
        while lab.client.zcard(queue) < i + 1:
            assert time.monotonic() < deadline, f"w{i} never queued"
            lab.client.blpop([f"{lab.prefix}test:never"], timeout=0.05)
    lab.client.blpop([f"{lab.prefix}test:never"], timeout=0.5)  # both asleep in their wait
    pool.release(held[0])
    pool.release(held[1])
    got = [lab.events(timeout=20), lab.events(timeout=20)]
    assert sorted(e["job"] for e in got) == ["w0", "w1"]
    assert sorted(e["device"] for e in got) == ["x86-a", "x86-b"]


def test_a_killed_workers_device_comes_back_after_the_ttl(lab):
    dead = lab.worker("--hold-forever", "SM8750", "doomed", "1.5")
    assert lab.events()["device"] == "phone-1"
    pool = lab.pool(ttl=1.5)
    assert pool.holder("phone-1") == "doomed"  # heartbeats keep it while the worker lives
    os.kill(dead.pid, signal.SIGKILL)
    dead.wait()
    lease = pool.acquire("SM8750", "next", wait=60)
    assert lease.device.id == "phone-1" and pool.holder("phone-1") == "next"
    pool.release(lease)


def test_the_heartbeat_keeps_a_lease_past_its_ttl(lab):
    # 1 s: a beat every 0.33 s, so a pause of 0.67 s (the other test worker busy) still renews it
    pool = lab.pool(ttl=1)
    with pool.lease("arm64", "long-job") as lease:
        lab.client.blpop([f"{lab.prefix}test:never"], timeout=4)  # a run four TTLs long
        assert not lease.lost.is_set()
        assert pool.holder("arm-1") == "long-job"
    assert pool.holder("arm-1") is None


def test_waiting_jobs_are_served_in_order_per_soc(lab):
    # TTLs far beyond a busy machine's pauses: a waiter whose ticket lapsed while the next worker
    # was still starting would leave the queue (that is test_a_dead_waiter_leaves_the_queue)
    pool = lab.pool(ttl=60)
    queue = f"{lab.prefix}queue:SM8750"
    held = pool.acquire("SM8750", "holder")
    order = []
    for i in range(3):  # each one queued before the next starts
        order.append(f"w{i}")
        worker = lab.worker("SM8750", f"w{i}", "1", "0.05", "60")
        deadline = time.monotonic() + 120
        while lab.client.zcard(queue) < i + 1:
            assert worker.poll() is None and time.monotonic() < deadline, f"w{i} never queued"
            lab.client.blpop([f"{lab.prefix}test:never"], timeout=0.05)
    # another SoC's devices are not held up by this queue
    other = pool.acquire("x86_64", "other-soc", wait=5)
    pool.release(other)
    pool.release(held)
    served = [lab.events()["job"] for _ in order]
    assert served == order


def test_a_dead_waiter_leaves_the_queue(lab):
    pool = lab.pool(ttl=1)
    held = pool.acquire("arm64", "holder")
    doomed = lab.worker("arm64", "doomed", "1", "0", "1")
    while lab.client.zcard(f"{lab.prefix}queue:arm64") < 1:
        lab.client.blpop([f"{lab.prefix}test:never"], timeout=0.05)
    doomed.kill()
    doomed.wait()
    pool.release(held)
    lease = pool.acquire("arm64", "after", wait=60)  # not stuck behind the dead ticket
    assert lease.device.id == "arm-1"
    pool.release(lease)


def test_health_check_skips_a_bad_device_and_quarantine_follows(lab):
    checked = []

    def health(device):
        checked.append(device.id)
        if device.id == "x86-a":
            raise DeviceFault("refused", "ssh: connect to host 127.0.0.1 port 1: Connection refused")

    pool = lab.pool(health=health, quarantine_after=2)
    for round_ in range(3):
        lease = pool.acquire("x86_64", f"job{round_}", wait=10)
        assert lease.device.id == "x86-b"
        pool.release(lease)
    assert pool.is_quarantined("x86-a") and not pool.is_quarantined("x86-b")
    assert checked.count("x86-a") == 2  # quarantined after two faults in a row: no longer tried
    assert "Connection refused" in pool.status()["x86-a"]["quarantined"]
    pool.unquarantine("x86-a")
    assert not pool.is_quarantined("x86-a")


def test_a_changed_host_key_quarantines_at_once_and_success_resets_the_count(lab):
    pool = lab.pool(quarantine_after=3)
    pool.record("x86-a", DeviceFault("timeout", "killed"))
    pool.record("x86-a", None)
    pool.record("x86-a", DeviceFault("timeout", "killed"))
    assert not pool.is_quarantined("x86-a") and pool.status()["x86-a"]["failures"] == 1
    pool.record("x86-b", DeviceFault("host_key", "changed"))
    assert pool.is_quarantined("x86-b")


def test_no_device_errors_say_why(lab):
    pool = lab.pool()
    with pytest.raises(NoDevice, match="no enabled device of class SM8650"):
        pool.acquire("SM8650", "j")
    pool.record("arm-1", DeviceFault("soc_mismatch", "uname -m says x86_64"))
    with pytest.raises(NoDevice, match="quarantined: arm-1"):
        pool.acquire("arm64", "j", wait=5)
    held = pool.acquire("SM8750", "j1")
    with pytest.raises(NoDevice, match="free within"):
        pool.acquire("SM8750", "j2", wait=1)
    pool.release(held)


def test_a_job_that_names_its_device_gets_that_one(lab):
    pool = lab.pool()
    lease = pool.acquire("x86_64", "named", only={"x86-b"})
    assert lease.device.id == "x86-b" and pool.holder("x86-a") is None
    with pytest.raises(NoDevice, match="free within"):
        pool.acquire("x86_64", "also-named", only={"x86-b"}, wait=1)
    pool.release(lease)
