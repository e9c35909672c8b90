"""Claim indexes: an owner's next queued job, and the owners with queued jobs.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25

A claim used to group every job of its services by owner (ix_uws_job_phase leads
with the service, not the phase): its cost grew with the jobs stored, 9 ms a claim
at 10^5.  ix_uws_job_claim replaces ix_uws_job_queue, which no query used once the
claim's subquery filtered on service and owner; ix_uws_job_count_phase finds the
owners with queued jobs among the counters.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_uws_job_queue", table_name="uws_job")
    op.create_index("ix_uws_job_claim", "uws_job",
                    ["phase", "service", "owner", sa.text("priority DESC"), "creation_time",
                     "id"])
    op.create_index("ix_uws_job_count_phase", "uws_job_count", ["phase", "service", "owner"])


def downgrade() -> None:
    op.drop_index("ix_uws_job_count_phase", table_name="uws_job_count")
    op.drop_index("ix_uws_job_claim", table_name="uws_job")
    op.create_index("ix_uws_job_queue", "uws_job", ["phase", "priority", "creation_time"])
