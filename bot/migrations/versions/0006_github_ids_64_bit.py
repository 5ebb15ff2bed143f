"""GitHub's ids are 64-bit: check-run ids are past 2^31 already (and issue-comment ids with them),
so `runs.check_run_id` and `runs.comment_id` become BIGINT. A 32-bit column overflows on
PostgreSQL ("integer out of range") the first time a real id is stored.

Revision ID: 0006
Revises: 0005
"""
from alembic import op
from sqlalchemy import BigInteger, Integer

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_COLUMNS = ("check_run_id", "comment_id")


def upgrade(prefix: str = "") -> None:
    with op.batch_alter_table(f"{prefix}runs") as batch:  # SQLite: a copy-and-move; PostgreSQL: ALTER TYPE
        for column in _COLUMNS:
            batch.alter_column(column, type_=BigInteger, existing_type=Integer, existing_nullable=True)


def downgrade(prefix: str = "") -> None:
    with op.batch_alter_table(f"{prefix}runs") as batch:
        for column in _COLUMNS:
            batch.alter_column(column, type_=Integer, existing_type=BigInteger, existing_nullable=True)
