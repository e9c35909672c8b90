"""Callbacks: uws_job_callback (the URL a job named) and the outbox uws_callback.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24

Jobs stored before have no callback; nothing is filled in.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "uws_job_callback",
        sa.Column("job_id", sa.String(32), sa.ForeignKey("uws_job.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("url", sa.Text, nullable=False),
    )
    op.create_table(
        "uws_callback",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("subject_kind", sa.String(16), nullable=False),
        sa.Column("subject_id", sa.String(32), nullable=False),
        sa.Column("service", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("due_time", sa.DateTime, nullable=False),
        sa.Column("next_attempt", sa.DateTime, nullable=False),
        sa.Column("lease_owner", sa.String(64)),
        sa.Column("lease_expires", sa.DateTime),
        sa.Column("last_status", sa.Integer),
        sa.Column("last_error", sa.Text),
        sa.Column("delivered_time", sa.DateTime),
    )
    op.create_index("ix_uws_callback_due", "uws_callback", ["state", "next_attempt"])
    op.create_index("ix_uws_callback_subject", "uws_callback", ["subject_kind", "subject_id"])


def downgrade() -> None:
    op.drop_index("ix_uws_callback_subject", "uws_callback")
    op.drop_index("ix_uws_callback_due", "uws_callback")
    op.drop_table("uws_callback")
    op.drop_table("uws_job_callback")
