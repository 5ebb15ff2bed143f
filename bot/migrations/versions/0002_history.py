"""History for the dashboard: triage runs (trigger, status, deadline, per-stage timings), results
per test x target x commit, failures with verdict/category/rule/confidence/suspects and their
cluster, clusters, flaky statistics, daily health per backend x target, devices.

Revision ID: 0002
Revises: 0001
"""
from alembic import op
from sqlalchemy import (JSON, Column, Date, DateTime, Float, Integer, String, Text,
                        UniqueConstraint)

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _when(name):
    return Column(name, DateTime(timezone=True))


def _tables(p):
    return {
        "triage_runs": [
            Column("id", Integer, primary_key=True), Column("key", String(300), nullable=False, unique=True),
            Column("repo", String(200), nullable=False), Column("pr", Integer, nullable=False),
            Column("head_sha", String(64)), Column("base_sha", String(64)), Column("trigger", String(40)),
            Column("kind", String(20)), Column("title", Text), Column("author", String(200)),
            Column("status", String(20)), Column("conclusion", String(20)), Column("attempt", Integer),
            Column("retry_of", Integer), _when("started_at"), _when("finished_at"), _when("deadline_at"),
            Column("stage_seconds", JSON), Column("counts", JSON), Column("plan", JSON),
            Column("build", JSON), Column("suites", JSON), Column("comment", Text), Column("log", Text),
            Column("primary_line_no", Integer)],
        "test_results": [
            Column("id", Integer, primary_key=True), Column("run_id", Integer, nullable=False),
            Column("repo", String(200)), Column("sha", String(64)), Column("suite", String(200)),
            Column("test", String(500)), Column("target", String(100)), Column("backend", String(60)),
            Column("outcome", String(20)), Column("retries", Integer), Column("duration", Float), _when("at"),
            UniqueConstraint("run_id", "suite", "target", "test")],
        "failure_events": [
            Column("id", Integer, primary_key=True), Column("run_id", Integer, nullable=False),
            Column("repo", String(200)), Column("pr", Integer), Column("sha", String(64)),
            Column("source", String(300)), Column("test", String(500)), Column("target", String(100)),
            Column("backend", String(60)), Column("verdict", String(20)), Column("category", String(60)),
            Column("rule", String(200)), Column("confidence", Float), Column("fingerprint", String(100)),
            Column("primary_line", Text), Column("line_no", Integer), Column("text", Text),
            Column("suspects", JSON), Column("cluster_id", String(16)), _when("at"),
            UniqueConstraint("run_id", "source", "test", "fingerprint")],
        "clusters": [
            Column("id", String(16), primary_key=True), Column("text", Text), Column("title", Text),
            Column("category", String(60)), Column("owners", JSON), Column("sample_line", Text),
            Column("failures", Integer), Column("prs", Integer), Column("trunk_failures", Integer),
            _when("first_seen"), _when("last_seen"), Column("daily", JSON), _when("updated_at")],
        "flaky_stats": [
            Column("repo", String(200), primary_key=True), Column("test", String(500), primary_key=True),
            Column("target", String(100), primary_key=True), Column("runs", Integer),
            Column("failures", Integer), Column("flaky", Integer), Column("rate", Float),
            Column("lower", Float), _when("last_flaky_at"), Column("last_flaky_run", Integer),
            _when("updated_at")],
        "health_daily": [
            Column("repo", String(200), primary_key=True), Column("backend", String(60), primary_key=True),
            Column("target", String(100), primary_key=True), Column("day", Date, primary_key=True),
            Column("passed", Integer), Column("failed", Integer), Column("flaky", Integer),
            Column("skipped", Integer)],
        "devices": [
            Column("id", String(100), primary_key=True), Column("name", String(200)),
            Column("target", String(100)), Column("soc", String(60)), Column("host", String(200)),
            Column("status", String(20)), Column("lease_holder", String(300)), _when("last_seen"),
            Column("details", JSON)],
    }


# (index name without prefix, table, columns)
_INDEXES = [
    ("ix_triage_runs_repo_pr", "triage_runs", ["repo", "pr"]),
    ("ix_{p}triage_runs_started_at", "triage_runs", ["started_at"]),
    ("ix_test_results_test", "test_results", ["repo", "test", "target", "at", "outcome"]),
    ("ix_{p}failure_events_fingerprint", "failure_events", ["fingerprint"]),
    ("ix_{p}failure_events_cluster_id", "failure_events", ["cluster_id"]),
    ("ix_{p}failure_events_at", "failure_events", ["at"]),
    ("ix_failure_events_repo_pr", "failure_events", ["repo", "pr"]),
    ("ix_{p}clusters_last_seen", "clusters", ["last_seen"]),
    ("ix_{p}flaky_stats_lower", "flaky_stats", ["lower"]),
]


def _index_name(template: str, p: str) -> str:
    return template.format(p=p) if "{p}" in template else f"{p}{template}"


def upgrade(prefix: str = "") -> None:
    for name, columns in _tables(prefix).items():
        op.create_table(f"{prefix}{name}", *columns)
    for template, table, columns in _INDEXES:
        op.create_index(_index_name(template, prefix), f"{prefix}{table}", columns)


def downgrade(prefix: str = "") -> None:
    for template, table, _ in _INDEXES:
        op.drop_index(_index_name(template, prefix), f"{prefix}{table}")
    for name in reversed(list(_tables(prefix))):
        op.drop_table(f"{prefix}{name}")
