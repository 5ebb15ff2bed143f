"""Benchmark: how long POST /webhook takes to verify, dedupe and enqueue a delivery.

Real parts: the Flask app under werkzeug's threaded server, a real redis-server (embedded, or
$REDIS_URL), the real `bot.publisher.Publisher` publishing Celery messages to it. No worker consumes
them: this measures the webhook's own answer, which GitHub cuts off after 10 s. Sends GitHub's
real `pull_request.synchronize` payload, signed, each with a fresh delivery id, plus redeliveries.
Prints latency percentiles; asserts nothing.

    .venv/bin/python bench/webhook.py [--count 1000]
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import logging
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from werkzeug.serving import make_server  # noqa: E402

from bot.app import create_app  # noqa: E402
from etriage.embedded_redis import EmbeddedRedis  # noqa: E402
from bot.settings import Settings  # noqa: E402
from tasks import celery_app  # noqa: E402

PAYLOAD = ROOT / "etriage" / "dev" / "fixtures" / "github" / "webhooks" / "pull_request" / "opened.json"
SECRET = "bench-secret"


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


def post(connection: http.client.HTTPConnection, body: bytes, delivery: str) -> tuple[int, float]:
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    start = time.perf_counter()
    connection.request("POST", "/webhook", body=body, headers={
        "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": signature, "Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    return response.status, (time.perf_counter() - start) * 1000


def run(redis_url: str, count: int) -> None:
    settings = Settings.from_mapping({"webhook_secrets": (SECRET,), "github_token": "bench",
                                      "redis_url": redis_url, "data_dir": "/tmp/etriage-bench-webhook"})
    celery_app.configure(settings)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request on the console
    server = make_server("127.0.0.1", 0, create_app(settings), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    body = PAYLOAD.read_bytes()
    connection = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
    try:
        post(connection, body, str(uuid.uuid4()))  # warm-up: imports, broker connection
        fresh, statuses = [], {}
        for _ in range(count):
            status, ms = post(connection, body, str(uuid.uuid4()))
            statuses[status] = statuses.get(status, 0) + 1
            fresh.append(ms)
        delivery = str(uuid.uuid4())
        post(connection, body, delivery)
        redelivered = [post(connection, body, delivery)[1] for _ in range(count // 10 or 1)]
    finally:
        server.shutdown()
    print(f"deliveries: {count} new (statuses {statuses}), {len(redelivered)} redeliveries of one id")
    for label, values in (("new delivery (verify + dedupe + enqueue)", fresh),
                          ("redelivery (verify + dedupe)", redelivered)):
        print(f"{label}: p50 {statistics.median(values):.2f} ms, p95 {percentile(values, 95):.2f} ms, "
              f"p99 {percentile(values, 99):.2f} ms, max {max(values):.2f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    args = parser.parse_args()
    if os.environ.get("REDIS_URL"):
        run(os.environ["REDIS_URL"], args.count)
    else:
        with EmbeddedRedis() as url:
            run(url, args.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
