"""Administrative holds: uws_hold, and why a HELD job is held (uws_job.held_for).

Revision ID: 0009
Revises: 0003
Create Date: 2026-11-24

Jobs HELD before this revision (none were made HELD by a server) have no
``held_for``; PHASE=RUN queues such a job when no hold applies.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0003"
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
    with op.batch_alter_table("uws_job") as batch:
        batch.add_column(sa.Column("held_for", sa.String(8)))


def downgrade() -> None:
    with op.batch_alter_table("uws_job") as batch:
        batch.drop_column("held_for")
    op.drop_table("uws_hold")
