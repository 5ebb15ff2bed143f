"""/metrics: read at scrape time from Redis and the database, so every process's work counts."""
from __future__ import annotations

import hashlib
import hmac
import json
import time

import redis
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from bot.app import create_app
from bot.dashboard import DashboardConfig
from bot.dashboard.metrics import DELIVERIES
from bot.publisher import Publisher, publishing_app
from etriage.seed import PRIVATE
from tests.dashboard.conftest import make_app


def scrape(client) -> dict:
    answer = client.get("/metrics")
    assert answer.status_code == 200 and answer.mimetype == "text/plain"
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(answer.get_data(as_text=True)) for s in family.samples}


def signed(body: bytes) -> str:
    return "sha256=" + hmac.new(b"test-webhook-secret", body, hashlib.sha256).hexdigest()


def test_deliveries_by_event_and_outcome(seeded_sqlite, redis_url):
    redis.Redis.from_url(redis_url).delete(DELIVERIES)
    client = make_app(seeded_sqlite, redis_url).test_client()
    body = json.dumps({"zen": "Design for failure.", "hook_id": 1}).encode()
    assert client.post("/webhook", data=body, headers={
        "X-GitHub-Event": "ping", "X-GitHub-Delivery": "d-metrics-1", "X-Hub-Signature-256": signed(body),
        "Content-Type": "application/json"}).status_code == 200
    assert client.post("/webhook", data=body, headers={
        "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "d-metrics-2", "X-Hub-Signature-256": "sha256=00",
        "Content-Type": "application/json"}).status_code == 401
    assert client.application.extensions["etriage-dashboard"].deliveries.flush() == 2  # what the thread does each second
    other_process = make_app(seeded_sqlite, redis_url).test_client()  # another web worker's view
    samples = scrape(other_process)
    assert samples[("etriage_webhook_deliveries_total", (("event", "ping"), ("outcome", "accepted")))] == 1
    assert samples[("etriage_webhook_deliveries_total",
                    (("event", "pull_request"), ("outcome", "bad_signature")))] == 1


def test_delivery_counts_reach_redis_within_a_second_and_survive_an_outage(redis_url, unused_redis_url):
    from bot.dashboard.counts import DeliveryCounts

    client = redis.Redis.from_url(redis_url)
    client.delete(DELIVERIES)
    down = DeliveryCounts(redis.Redis.from_url(unused_redis_url), interval=3600)
    down.add("push", "accepted")
    assert down.flush() == 0  # Redis down: kept for the next flush
    down.redis = client
    down.add("push", "accepted")
    assert down.flush() == 2 and client.hget(DELIVERIES, "push|accepted") == b"2"
    counts = DeliveryCounts(client, interval=0.05)
    counts.add("ping", "accepted")  # starts the flushing thread
    deadline = time.monotonic() + 10
    while client.hget(DELIVERIES, "ping|accepted") is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.hget(DELIVERIES, "ping|accepted") == b"1"
    client.delete(DELIVERIES)


def test_queue_depths_stages_and_verdicts(seeded_sqlite, redis_url):
    client = redis.Redis.from_url(redis_url)
    client.delete("triage")
    publisher = Publisher(publishing_app(redis_url), redis_url)
    for n in range(3):
        publisher.installation(n, "octo", "created")
    samples = scrape(make_app(seeded_sqlite, redis_url).test_client())
    client.delete("triage")
    assert samples[("etriage_queue_depth", (("queue", "triage"),))] == 3
    assert samples[("etriage_queue_depth", (("queue", "device"),))] == 0
    assert samples[("etriage_redis_up", ())] == 1 and samples[("etriage_database_up", ())] == 1
    runs, failures = seeded_sqlite.t["triage_runs"], seeded_sqlite.t["failure_events"]
    # /metrics answers anyone: the configured private repository is counted nowhere in it
    with seeded_sqlite.engine.connect() as conn:
        timed = conn.execute(select(func.count()).where(runs.c.stage_seconds.is_not(None),
                                                        runs.c.repo != PRIVATE)).scalar()
        verdicts = conn.execute(select(failures.c.category, failures.c.verdict, func.count())
                                .where(failures.c.repo != PRIVATE)
                                .group_by(failures.c.category, failures.c.verdict)).all()
        all_runs = conn.execute(select(func.count()).where(runs.c.repo != PRIVATE)).scalar()
        private_runs = conn.execute(select(func.count()).where(runs.c.repo == PRIVATE)).scalar()
    assert private_runs  # the seed has some, so the counts below can tell
    assert samples[("etriage_task_stage_duration_seconds_count", (("stage", "build"),))] == timed
    assert len(verdicts) > 5
    for category, verdict, count in verdicts:
        assert samples[("etriage_verdicts_total", (("category", category), ("verdict", verdict)))] == count
    assert sum(v for (name, _), v in samples.items() if name == "etriage_runs") == all_runs


def test_a_database_outage_is_a_metric_not_an_error(redis_url, tmp_path):
    app = create_app({"webhook_secrets": ["s"], "redis_url": redis_url},
                     redis_client=redis.Redis.from_url(redis_url),
                     dashboard_config=DashboardConfig(database_url="postgresql+psycopg://nobody@127.0.0.1:1/none"))
    samples = scrape(app.test_client())
    assert samples[("etriage_database_up", ())] == 0 and samples[("etriage_redis_up", ())] == 1
