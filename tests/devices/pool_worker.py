"""A worker process for tests/devices/test_pool.py: leases devices from the real pool on a real
Redis and records what it did in Redis lists, so the test can check it from outside.

    python pool_worker.py REDIS_URL PREFIX INVENTORY.yaml CLASS JOB ROUNDS HOLD_SECONDS TTL [BARRIER [POLL]]

BARRIER 1: say ready (`test:ready`), then lease only once the test sets `test:go`, so that
workers started one after another on a busy machine still contend for the devices.
POLL: the pool's fallback look-again interval in seconds (default 1).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tasks.devices.inventory import load_inventory  # noqa: E402
from tasks.devices.pool import Pool  # noqa: E402


def main(url, prefix, inventory, device_class, job, rounds, hold, ttl, barrier="0", poll="1") -> None:
    client = redis.Redis.from_url(url)
    pool = Pool(client, load_inventory(inventory), ttl=float(ttl), prefix=prefix, poll=float(poll))
    if barrier == "1":
        client.rpush(f"{prefix}test:ready", job)
        deadline = time.monotonic() + 120
        while not client.exists(f"{prefix}test:go") and time.monotonic() < deadline:
            time.sleep(0.005)
    for i in range(int(rounds)):
        with pool.lease(device_class, f"{job}#{i}") as lease:
            device = lease.device.id
            # a second holder of the same device would find this key taken
            if not client.set(f"{prefix}test:inuse:{device}", job, nx=True):
                client.rpush(f"{prefix}test:violations", f"{job} and {client.get(f'{prefix}test:inuse:{device}')} "
                                                         f"on {device}")
            client.rpush(f"{prefix}test:events", json.dumps({"job": job, "device": device, "pid": os.getpid()}))
            time.sleep(float(hold))
            client.delete(f"{prefix}test:inuse:{device}")
    client.rpush(f"{prefix}test:done", job)


def hold_forever(url, prefix, inventory, device_class, job, ttl) -> None:
    client = redis.Redis.from_url(url)
    pool = Pool(client, load_inventory(inventory), ttl=float(ttl), prefix=prefix)
    with pool.lease(device_class, job) as lease:
        client.rpush(f"{prefix}test:events", json.dumps({"job": job, "device": lease.device.id, "pid": os.getpid()}))
        while True:
            time.sleep(1)


if __name__ == "__main__":
    if sys.argv[1] == "--hold-forever":
        hold_forever(*sys.argv[2:])
    else:
        main(*sys.argv[1:])
