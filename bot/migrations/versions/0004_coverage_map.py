"""The coverage map of trunk commits (bot/coverage_tables.py): per file blob, which test
executes which lines; per commit and test file, how building the map went.

Revision ID: 0004
Revises: 0003
"""
from alembic import op
from sqlalchemy import JSON, Column, DateTime, Float, Integer, String, Text

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade(prefix: str = "") -> None:
    op.create_table(
        f"{prefix}coverage_lines",
        Column("source_path", String(500), primary_key=True),
        Column("source_blob", String(64), primary_key=True),
        Column("test", String(500), primary_key=True),
        Column("lines", Text, nullable=False), Column("test_blob", String(64)),
        Column("commit", String(64)), Column("at", DateTime(timezone=True)))
    op.create_index(f"{prefix}ix_coverage_lines_test", f"{prefix}coverage_lines", ["test"])
    op.create_table(
        f"{prefix}coverage_files",
        Column("commit", String(64), primary_key=True),
        Column("test_path", String(500), primary_key=True),
        Column("test_blob", String(64)), Column("status", String(20), nullable=False),
        Column("tests", Integer), Column("cpu_seconds", Float), Column("wall_seconds", Float),
        Column("sources", JSON), Column("error", Text), Column("at", DateTime(timezone=True)))


def downgrade(prefix: str = "") -> None:
    op.drop_index(f"{prefix}ix_coverage_lines_test", f"{prefix}coverage_lines")
    op.drop_table(f"{prefix}coverage_files")
    op.drop_table(f"{prefix}coverage_lines")
