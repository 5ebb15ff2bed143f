"""The store's tables as of the first release with migrations.

Creates each table that is missing, so a database made before migrations existed (by
`create_all`) is adopted as it is.

Revision ID: 0001
Revises:
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy import (JSON, Boolean, Column, DateTime, Float, Integer, String, Text,
                        UniqueConstraint)

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _tables():
    when = lambda name: Column(name, DateTime(timezone=True))  # noqa: E731
    return {
        "installations": [Column("id", Integer, primary_key=True, autoincrement=False),
                          Column("account", String(200)), Column("action", String(40)), when("updated_at")],
        "pull_requests": [Column("repo", String(200), primary_key=True), Column("pr", Integer, primary_key=True),
                          Column("head_sha", String(64)), Column("base_ref", String(200)),
                          Column("base_sha", String(64)), Column("installation_id", Integer),
                          Column("state", String(20)), when("updated_at")],
        "runs": [Column("id", Integer, primary_key=True), Column("repo", String(200)), Column("pr", Integer),
                 Column("head_sha", String(64)), Column("kind", String(20)), Column("status", String(20)),
                 Column("conclusion", String(20)), Column("check_run_id", Integer),
                 Column("comment_id", Integer), Column("summary", Text), Column("report", JSON),
                 when("created_at"), when("updated_at"), UniqueConstraint("repo", "pr", "head_sha", "kind")],
        "results": [Column("id", Integer, primary_key=True), Column("repo", String(200)),
                    Column("head_sha", String(64)), Column("suite", String(200)), Column("target", String(100)),
                    Column("test", String(500)), Column("outcome", String(20)), Column("duration", Float),
                    Column("details", JSON), UniqueConstraint("repo", "head_sha", "suite", "target", "test")],
        "failures": [Column("id", Integer, primary_key=True), Column("repo", String(200)),
                     Column("sha", String(64)), Column("source", String(300)), Column("fingerprint", String(100)),
                     Column("category", String(60)), Column("test", String(500)), Column("line", Text),
                     Column("line_no", Integer), Column("environment", Boolean), Column("verdict", String(20)),
                     Column("title", Text), Column("explanation", Text), Column("suggestion", Text),
                     when("created_at"), UniqueConstraint("repo", "sha", "source", "fingerprint")],
        "pending_reports": [Column("repo", String(200), primary_key=True), Column("pr", Integer, primary_key=True),
                            Column("kind", String(20), primary_key=True), Column("head_sha", String(64)),
                            Column("installation_id", Integer), Column("payload", JSON),
                            Column("attempts", Integer), Column("last_error", Text), when("updated_at")],
        "device_approvals": [Column("repo", String(200), primary_key=True), Column("pr", Integer, primary_key=True),
                             Column("head_sha", String(64), primary_key=True), Column("approved_by", String(200)),
                             when("at")],
        "ignored_failures": [Column("repo", String(200), primary_key=True), Column("pr", Integer, primary_key=True),
                             Column("key", String(300), primary_key=True), Column("reason", Text),
                             Column("ignored_by", String(200)), when("at")],
        "command_audit": [Column("id", Integer, primary_key=True), Column("repo", String(200)),
                          Column("pr", Integer), Column("actor", String(200)), Column("command", Text),
                          Column("outcome", Text), when("at")],
    }


def upgrade(prefix: str = "") -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    for name, columns in _tables().items():
        if f"{prefix}{name}" not in existing:
            op.create_table(f"{prefix}{name}", *columns)


def downgrade(prefix: str = "") -> None:
    for name in reversed(list(_tables())):
        op.drop_table(f"{prefix}{name}")
