"""Mutes (a test or a failure cluster set aside repo-wide until a time, with who and why) and
trunk issues (one GitHub issue per failure cluster red on trunk, with how often it was red).

Revision ID: 0005
Revises: 0004
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy import JSON, Column, DateTime, Integer, String, Text

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade(prefix: str = "") -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())  # a database create_all made (0001)
    if f"{prefix}mutes" not in existing:
        _create_mutes(prefix)
    if f"{prefix}trunk_issues" not in existing:
        _create_trunk_issues(prefix)


def _create_mutes(prefix: str) -> None:
    op.create_table(
        f"{prefix}mutes",
        Column("id", Integer, primary_key=True), Column("repo", String(200), nullable=False),
        Column("kind", String(10), nullable=False), Column("key", String(500), nullable=False),
        Column("reason", Text, nullable=False), Column("muted_by", String(200)),
        Column("source", String(20)), Column("created_at", DateTime(timezone=True)),
        Column("until", DateTime(timezone=True), nullable=False),
        Column("lifted_at", DateTime(timezone=True)), Column("lifted_by", String(200)))
    op.create_index(f"{prefix}ix_mutes_repo_key", f"{prefix}mutes", ["repo", "kind", "key"])


def _create_trunk_issues(prefix: str) -> None:
    op.create_table(
        f"{prefix}trunk_issues",
        Column("repo", String(200), primary_key=True), Column("cluster_id", String(16), primary_key=True),
        Column("number", Integer), Column("state", String(10)), Column("red_count", Integer),
        Column("since", DateTime(timezone=True)), Column("last_sha", String(64)),
        Column("last_red_at", DateTime(timezone=True)), Column("jobs", JSON),
        Column("opened_at", DateTime(timezone=True)), Column("closed_at", DateTime(timezone=True)),
        Column("updated_at", DateTime(timezone=True)))


def downgrade(prefix: str = "") -> None:
    op.drop_table(f"{prefix}trunk_issues")
    op.drop_index(f"{prefix}ix_mutes_repo_key", f"{prefix}mutes")
    op.drop_table(f"{prefix}mutes")
