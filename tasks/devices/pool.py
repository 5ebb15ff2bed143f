"""The device pool: leases in Redis, one job per device at a time, waiting jobs served in order
per device class (SoC), a health check before each lease, quarantine after repeated infra faults.

    pool = Pool(redis, inventory, health=check)        # inventory: {id: Device}
    with pool.lease("SM8750", job="pr-12/abc") as lease:
        ... lease.device ...; lease.lost.is_set() if the lease was taken away
    pool.record(device_id, fault_or_None)               # after the run

Redis keys (prefix `etriage:devices:`):
    lease:<device>      the holder's token, with a TTL a heartbeat thread renews (a dead worker's
                        device comes back when it expires)
    queue:<class>       waiting tickets (sorted set, score = ticket); only the first live ticket
                        may take a device: first come, first served per class
    ticket:<class>      the ticket counter
    waiter:<ticket>     a waiting job's own heartbeat: a dead waiter leaves the queue
    failures:<device>   infra faults in a row; quarantine:<device> once it reaches the limit
    wake:<class>:<ticket>  the first in line's wake-up: a release, or the one before it taking a
                        device or leaving, wakes whoever is first now (all also look again every
                        `poll` seconds, which only a dead first waiter should ever need)
"""
from __future__ import annotations

import contextlib
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from redis.exceptions import RedisError

from tasks.devices.faults import DeviceFault
from tasks.devices.inventory import Device

PREFIX = "etriage:devices:"

# Wake whoever is first in line now (KEYS[1] the queue, ARGV[1] the class's wake prefix). A list,
# so a wake-up pushed before its waiter sleeps is not lost.
_WAKE_FIRST = """
local function wake_first(queue, wake)
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  if head then
    redis.call('RPUSH', wake .. head, '1')
    redis.call('PEXPIRE', wake .. head, 60000)
  end
end
"""
# KEYS: queue. ARGV: prefix, ticket, token, ttl_ms, wake prefix, device ids...
_ACQUIRE = _WAKE_FIRST + """
local prefix, ticket, token, ttl, wake = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local removed = false
while true do
  local head = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
  if not head then return false end
  if head == ticket then break end
  if redis.call('EXISTS', prefix .. 'waiter:' .. head) == 1 then
    if removed then wake_first(KEYS[1], wake) end  -- it waited behind a dead ticket
    return false
  end
  redis.call('ZREM', KEYS[1], head)
  removed = true
end
for i = 6, #ARGV do
  local id = ARGV[i]
  if redis.call('EXISTS', prefix .. 'quarantine:' .. id) == 0
     and redis.call('SET', prefix .. 'lease:' .. id, token, 'NX', 'PX', ttl) then
    redis.call('ZREM', KEYS[1], ticket)
    wake_first(KEYS[1], wake)  -- the next in line may find another device free
    return id
  end
end
return false
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
# KEYS: lease, queue. ARGV: token, wake prefix.
_RELEASE = _WAKE_FIRST + """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  wake_first(KEYS[2], ARGV[2])
  return 1
end
return 0
"""
# KEYS: queue. ARGV: ticket, wake prefix. A waiter leaving (leased, timed out, failed) hands on.
_LEAVE = _WAKE_FIRST + """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', ARGV[2] .. ARGV[1])
wake_first(KEYS[1], ARGV[2])
return 1
"""


class NoDevice(RuntimeError):
    """No device of the class could be leased in time (none configured, all quarantined, busy)."""


@dataclass
class Lease:
    device: Device
    token: str
    job: str
    lost: threading.Event = field(default_factory=threading.Event)  # the TTL ran out under us
    problem: str = ""  # why `lost` was set


class Pool:
    def __init__(self, redis, inventory: dict[str, Device], *, ttl: float = 60.0, quarantine_after: int = 3,
                 health: Callable[[Device], None] | None = None, prefix: str = PREFIX, poll: float = 1.0):
        self.redis, self.inventory, self.prefix, self.poll = redis, inventory, prefix, poll
        self.ttl_ms, self.quarantine_after, self.health = int(ttl * 1000), quarantine_after, health
        self._acquire = redis.register_script(_ACQUIRE)
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)
        self._leave = redis.register_script(_LEAVE)

    def devices_of(self, device_class: str) -> list[Device]:
        return [d for d in self.inventory.values() if d.enabled and d.device_class == device_class]

    def _key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    # --- leasing ------------------------------------------------------------------------

    @contextlib.contextmanager
    def lease(self, device_class: str, job: str, *, wait: float = 3600.0, on_wait=None, only=None):
        lease = self.acquire(device_class, job, wait=wait, on_wait=on_wait, only=only)
        stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(lease, stop), daemon=True,
                                name=f"lease-{lease.device.id}")
        beat.start()
        try:
            yield lease
        finally:
            stop.set()
            beat.join()
            self.release(lease)

    def acquire(self, device_class: str, job: str, *, wait: float = 3600.0, on_wait=None, only=None) -> Lease:
        """Take the next free, healthy device of the class, in ticket order; NoDevice after `wait`.
        `only`: these device ids (a job that named its device waits in the class's queue too)."""
        candidates = [d for d in self.devices_of(device_class) if not only or d.id in only]
        if not candidates:
            raise NoDevice(f"no enabled device of class {device_class} in the inventory"
                           + (f" among {', '.join(sorted(only))}" if only else ""))
        queue, wake = self._key("queue", device_class), self._key("wake", device_class, "")
        ticket = self.redis.incr(self._key("ticket", device_class))
        waiter = self._key("waiter", str(ticket))
        waiter_ttl = max(self.ttl_ms, 5_000, int(self.poll * 3000))  # renewed at least every `poll` below
        self.redis.set(waiter, job, px=waiter_ttl)
        self.redis.zadd(queue, {str(ticket): ticket})
        token = f"{job}|{uuid.uuid4().hex}"
        deadline = time.monotonic() + wait
        told = False
        try:
            while True:
                self.redis.pexpire(waiter, waiter_ttl)
                ids = [d.id for d in candidates]
                got = self._acquire(keys=[queue], args=[self.prefix, str(ticket), token, self.ttl_ms, wake, *ids])
                if got:
                    device = self.inventory[got.decode() if isinstance(got, bytes) else got]
                    lease = Lease(device, token, job)
                    problem = self._check(device)
                    if problem is None:
                        return lease
                    self.record(device.id, problem)
                    self.release(lease)
                    self.redis.zadd(queue, {str(ticket): ticket})  # keep our place at the front
                    continue
                if not any(not self.is_quarantined(d.id) for d in candidates):
                    raise NoDevice(f"every device of class {device_class} is quarantined: "
                                   + ", ".join(d.id for d in candidates))
                if time.monotonic() > deadline:
                    raise NoDevice(f"no device of class {device_class} free within {wait:.0f} s")
                if on_wait and not told:
                    on_wait(f"waiting for a {device_class} device ({self.redis.zrank(queue, str(ticket))} ahead)")
                    told = True
                self.redis.blpop([wake + str(ticket)], timeout=self.poll)
        finally:
            self._leave(keys=[queue], args=[str(ticket), wake])
            self.redis.delete(waiter)

    def _check(self, device: Device) -> DeviceFault | None:
        if self.health is None:
            return None
        try:
            self.health(device)
        except DeviceFault as fault:
            return fault
        return None

    def _heartbeat(self, lease: Lease, stop: threading.Event) -> None:
        key = self._key("lease", lease.device.id)
        while not stop.wait(self.ttl_ms / 3000):
            try:
                renewed = self._renew(keys=[key], args=[lease.token, self.ttl_ms])
            except RedisError as error:  # Redis unreachable: the lease may lapse; say so, keep trying
                lease.problem = f"heartbeat failed: {error}"
                lease.lost.set()
                continue
            if not renewed:
                lease.problem = "the lease expired (the heartbeat came too late) and may be another job's now"
                lease.lost.set()
                return

    def release(self, lease: Lease) -> bool:
        device_class = lease.device.device_class
        return bool(self._release(keys=[self._key("lease", lease.device.id), self._key("queue", device_class)],
                                  args=[lease.token, self._key("wake", device_class, "")]))

    def holder(self, device_id: str) -> str | None:
        token = self.redis.get(self._key("lease", device_id))
        return (token.decode() if isinstance(token, bytes) else token).split("|")[0] if token else None

    # --- health record ------------------------------------------------------------------

    def record(self, device_id: str, fault: DeviceFault | None) -> None:
        """After a run (or a failed health check): infra faults in a row quarantine a device."""
        failures = self._key("failures", device_id)
        if fault is None:
            self.redis.delete(failures)
            return
        count = self.redis.incr(failures)
        if count >= self.quarantine_after or fault.kind in ("host_key", "soc_mismatch", "auth"):
            self.redis.set(self._key("quarantine", device_id), f"{fault.kind}: {fault.detail}"[:500])

    def is_quarantined(self, device_id: str) -> bool:
        return bool(self.redis.exists(self._key("quarantine", device_id)))

    def unquarantine(self, device_id: str) -> None:
        self.redis.delete(self._key("quarantine", device_id), self._key("failures", device_id))

    def status(self) -> dict[str, dict]:
        """Per device: class, enabled, holder, quarantine reason, faults in a row."""
        out = {}
        for device in self.inventory.values():
            reason = self.redis.get(self._key("quarantine", device.id))
            out[device.id] = {"class": device.device_class, "enabled": device.enabled,
                              "holder": self.holder(device.id),
                              "quarantined": (reason.decode() if isinstance(reason, bytes) else reason) or "",
                              "failures": int(self.redis.get(self._key("failures", device.id)) or 0)}
        return out
