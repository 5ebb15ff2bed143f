"""When each head of a pull request became its head (GitHub's time, from the pull_request
webhook), so `/etriage ok-to-test` approves the head the maintainer saw; and the comments whose
commands ran, once per comment id and edit, so a replayed delivery runs nothing again.

Revision ID: 0003
Revises: 0002
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy import Column, DateTime, Integer, String

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _tables():
    return {
        "pull_heads": [
            Column("repo", String(200), primary_key=True), Column("pr", Integer, primary_key=True),
            Column("head_sha", String(64), primary_key=True), Column("pushed_at", DateTime(timezone=True))],
        "comment_runs": [
            Column("repo", String(200), primary_key=True), Column("comment_id", String(40), primary_key=True),
            Column("stamp", String(120), primary_key=True), Column("at", DateTime(timezone=True))],
    }


def upgrade(prefix: str = "") -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())  # a database create_all made (0001)
    for name, columns in _tables().items():
        if f"{prefix}{name}" not in existing:
            op.create_table(f"{prefix}{name}", *columns)


def downgrade(prefix: str = "") -> None:
    for name in reversed(list(_tables())):
        op.drop_table(f"{prefix}{name}")
