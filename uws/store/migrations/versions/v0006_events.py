"""The event log: uws_event, one row per change of a job's existence or phase.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24

Starts empty: events are what happens from the upgrade on.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "uws_event",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True,
                  autoincrement=True),
        sa.Column("xid", sa.BigInteger, nullable=False),
        sa.Column("time", sa.DateTime, nullable=False),
        sa.Column("service", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("batch_id", sa.String(32)),
        sa.Column("old_phase", sa.String(16)),
        sa.Column("new_phase", sa.String(16)),
        sa.Column("progress", sa.Float),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_uws_event_owner", "uws_event", ["service", "owner", "xid", "seq"])
    op.create_index("ix_uws_event_service", "uws_event", ["service", "xid", "seq"])
    op.create_index("ix_uws_event_time", "uws_event", ["time"])


def downgrade() -> None:
    op.drop_table("uws_event")
