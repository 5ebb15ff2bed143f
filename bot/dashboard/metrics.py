"""Prometheus metrics at /metrics, read at scrape time from where the state lives.

Workers are separate processes and gunicorn runs several web workers, so in-process counters
would each see a slice. Instead a custom collector asks, per scrape:
- Redis: each queue's depth and oldest task age, and webhook deliveries by event and outcome
  (counted in each web process by an after-request hook on POST /webhook and added to a Redis
  hash at most once a second by a daemon thread, so a delivery pays no Redis round trip for its
  metrics; a process that dies loses at most its last second of counts);
- the database: task durations per stage (a histogram over every recorded run), verdicts by
  category and runs by status.
"""
from __future__ import annotations

import bisect
import itertools
import logging

import redis
from flask import Blueprint, Response, current_app, request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from sqlalchemy import func, select, true
from sqlalchemy.exc import SQLAlchemyError

from bot.dashboard.context import state
from bot.dashboard.counts import DELIVERIES
from bot.dashboard.queries import queues

log = logging.getLogger(__name__)
blueprint = Blueprint("dashboard_metrics", __name__)
STAGE_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600)
# The stages a run's stage_seconds may name (bot.history records build, suites and the rest
# together when the pipeline does not time them apart).
STAGES = ("plan", "build", "suites", "classify", "compare", "plan+classify+compare")


def outcome_of(status: int) -> str:
    if status in (200, 202, 204):
        return "accepted"
    if status == 401:
        return "bad_signature"
    return "rejected" if status < 500 else "error"


def delivery_counts() -> DeliveryCounts:
    return state().deliveries


@blueprint.after_app_request
def _count_delivery(response):
    if request.method == "POST" and request.path == "/webhook":
        event = (request.headers.get("X-GitHub-Event") or "unknown")[:40]
        delivery_counts().add(event, outcome_of(response.status_code))
    return response


class StateCollector:
    def __init__(self, dashboard_state):
        self.state = dashboard_state

    def collect(self):
        yield from self._redis()
        yield from self._database()

    def _redis(self):
        deliveries = CounterMetricFamily("etriage_webhook_deliveries", "Webhook deliveries by event and outcome",
                                         labels=["event", "outcome"])
        depth = GaugeMetricFamily("etriage_queue_depth", "Tasks waiting per Celery queue", labels=["queue"])
        age = GaugeMetricFamily("etriage_queue_oldest_task_age_seconds",
                                "Age of the oldest waiting task per queue (from when it was first seen)",
                                labels=["queue"])
        up = GaugeMetricFamily("etriage_redis_up", "1 when Redis answered this scrape")
        try:
            for key, count in sorted(self.state.redis.hgetall(DELIVERIES).items()):
                event, _, outcome = key.decode().partition("|")
                deliveries.add_metric([event, outcome], int(count))
            for queue in queues(self.state.redis):
                depth.add_metric([queue["queue"]], queue["depth"])
                age.add_metric([queue["queue"]], queue["oldest_age_seconds"] or 0.0)
            up.add_metric([], 1)
        except redis.RedisError as error:
            log.warning("metrics: redis: %s", error)
            up.add_metric([], 0)
        yield from (deliveries, depth, age, up)

    @staticmethod
    def _stage_buckets(conn, runs, visible) -> dict:
        """stage -> ([(le, cumulative count), ...], sum): each run's stage times read from its
        JSON by the database (one scan), counted into buckets here."""
        columns = [runs.c.stage_seconds[stage].as_float() for stage in STAGES]
        counts = {stage: [0] * (len(STAGE_BUCKETS) + 1) for stage in STAGES}
        sums = dict.fromkeys(STAGES, 0.0)
        for row in conn.execute(select(*columns).where(runs.c.stage_seconds.is_not(None), visible)):
            for stage, seconds in zip(STAGES, row):
                if seconds is not None:
                    counts[stage][bisect.bisect_left(STAGE_BUCKETS, seconds)] += 1
                    sums[stage] += seconds
        out = {}
        for stage in STAGES:
            total = sum(counts[stage])
            if total:
                cumulative = list(itertools.accumulate(counts[stage][:-1]))
                out[stage] = ([(str(b), c) for b, c in zip(STAGE_BUCKETS, cumulative)] + [("+Inf", total)],
                              sums[stage])
        return out

    def _database(self):
        up = GaugeMetricFamily("etriage_database_up", "1 when the database answered this scrape")
        try:
            history = self.state.dashboard.h
            runs, failures = history.t["triage_runs"], history.t["failure_events"]
            # /metrics answers anyone: what private repositories failed is not counted in it
            private = sorted(self.state.config.private_repos)
            public_failures = failures.c.repo.notin_(private) if private else true()
            public_runs = runs.c.repo.notin_(private) if private else true()
            with history.engine.connect() as conn:
                stages = self._stage_buckets(conn, runs, public_runs)
                verdicts = conn.execute(select(failures.c.category, failures.c.verdict, func.count())
                                        .where(public_failures)
                                        .group_by(failures.c.category, failures.c.verdict)).all()
                statuses = conn.execute(select(runs.c.status, func.count()).where(public_runs)
                                        .group_by(runs.c.status)).all()
        except SQLAlchemyError as error:
            log.warning("metrics: database: %s", error)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        durations = HistogramMetricFamily("etriage_task_stage_duration_seconds",
                                          "Time each stage of a triage run took", labels=["stage"])
        for stage, (buckets, total) in stages.items():
            durations.add_metric([stage], buckets, total)
        by_category = CounterMetricFamily("etriage_verdicts", "Failures judged, by category and verdict",
                                          labels=["category", "verdict"])
        for category, verdict, count in verdicts:
            by_category.add_metric([category or "other", verdict or "unknown"], count)
        by_status = GaugeMetricFamily("etriage_runs", "Triage runs by status", labels=["status"])
        for status, count in statuses:
            by_status.add_metric([status or "unknown"], count)
        yield from (up, durations, by_category, by_status)


@blueprint.get("/metrics")
def metrics():
    registry = current_app.extensions.get("etriage-metrics")
    if registry is None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(StateCollector(state()))
        current_app.extensions["etriage-metrics"] = registry
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)
