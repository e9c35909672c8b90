"""Scheduled starts and retries: uws_job.start_after and the uws_attempt table.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24

A job with start_after in the future stays QUEUED until then (STARTAFTER, or a
retry's backoff); uws_attempt keeps the error of each failed attempt of a job
that was run again.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    # A database made before migrations by a newer create_all may have both already.
    if "start_after" not in {c["name"] for c in inspector.get_columns("uws_job")}:
        op.add_column("uws_job", sa.Column("start_after", sa.DateTime))
    if not inspector.has_table("uws_attempt"):
        op.create_table(
            "uws_attempt",
            sa.Column("job_id", sa.String(32), sa.ForeignKey("uws_job.id", ondelete="CASCADE"),
                      primary_key=True),
            sa.Column("attempt", sa.Integer, primary_key=True),
            sa.Column("end_time", sa.DateTime, nullable=False),
            sa.Column("error_type", sa.String(16), nullable=False),
            sa.Column("error_message", sa.Text, nullable=False),
        )


def downgrade() -> None:
    op.drop_table("uws_attempt")
    # Not a batch (copy and rename) on SQLite: dropping uws_job there would cascade to
    # every table that refers to it.  SQLite has DROP COLUMN since 3.35.
    op.execute("ALTER TABLE uws_job DROP COLUMN start_after")
