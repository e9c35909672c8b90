"""Administrative holds: uws_hold, and why a HELD job is held (uws_job.held_for).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24

Jobs HELD before this revision (none were made HELD by a server) have no
``held_for``; PHASE=RUN queues such a job when no hold applies.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "uws_hold",
        sa.Column("service", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(255), primary_key=True),
        sa.Column("who", sa.String(255), nullable=False),
        sa.Column("created", sa.DateTime, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
    )
    # A database made before migrations from this revision's tables has the column.
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("uws_job")}
    if "held_for" not in columns:
        op.add_column("uws_job", sa.Column("held_for", sa.String(8)))


def downgrade() -> None:
    # Not batch mode: SQLite would copy uws_job and drop the original, and the drop
    # would cascade to every job's parameters and results.  SQLite >= 3.35 drops it.
    op.execute("ALTER TABLE uws_job DROP COLUMN held_for")
    op.drop_table("uws_hold")
