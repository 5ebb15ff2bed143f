"""Webhook deliveries counted per web process, added to one Redis hash in batches (see
bot.dashboard.metrics, which reads the hash at scrape time)."""
from __future__ import annotations

import logging
import threading
from collections import Counter

import redis

log = logging.getLogger(__name__)
DELIVERIES = "etriage:metrics:deliveries"  # hash "event|outcome" -> count


class DeliveryCounts:
    """Webhook deliveries by (event, outcome) counted in this process; `flush` adds them to the
    shared Redis hash in one round trip, and a daemon thread started on the first count flushes
    every `interval` seconds. Counts a failed flush could not add are kept for the next one."""

    def __init__(self, redis_client, interval: float = 1.0):
        self.redis, self.interval = redis_client, interval
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._failing = False  # warn once per outage, not every second

    def add(self, event: str, outcome: str) -> None:
        with self._lock:
            self._counts[f"{event}|{outcome}"] += 1
            if self._thread is None:  # started in the serving process (after gunicorn's fork)
                self._thread = threading.Thread(target=self._run, name="etriage-delivery-counts", daemon=True)
                self._thread.start()

    def flush(self) -> int:
        with self._lock:
            counts, self._counts = self._counts, Counter()
        if not counts:
            return 0
        try:
            with self.redis.pipeline(transaction=False) as pipe:
                for key, count in counts.items():
                    pipe.hincrby(DELIVERIES, key, count)
                pipe.execute()
        except redis.RedisError as error:
            with self._lock:
                self._counts.update(counts)
            if not self._failing:
                log.warning("delivery counts not added to Redis yet (kept for the next try): %s", error)
            self._failing = True
            return 0
        self._failing = False
        return sum(counts.values())

    def _run(self) -> None:
        stop = threading.Event()
        while not stop.wait(self.interval):
            self.flush()
