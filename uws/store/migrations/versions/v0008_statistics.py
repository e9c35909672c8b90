"""Statistics: duration histograms and sampled job counts.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24

Both start empty: durations are recorded from the upgrade on (jobs that ended
before it are not in the percentiles), and the history from the first sample.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "uws_duration_bins",
        sa.Column("owner", sa.String(255), primary_key=True),
        sa.Column("width", sa.Integer, primary_key=True),
        sa.Column("bucket", sa.DateTime, primary_key=True),
        sa.Column("service", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(8), primary_key=True),
        sa.Column("bin", sa.SmallInteger, primary_key=True),
        sa.Column("n", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_uws_duration_bins_bucket", "uws_duration_bins",
                    ["width", "bucket", "service"])
    op.create_table(
        "uws_phase_samples",
        sa.Column("at", sa.DateTime, primary_key=True),
        sa.Column("service", sa.String(64), primary_key=True),
        sa.Column("phase", sa.String(16), primary_key=True),
        sa.Column("n", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("uws_phase_samples")
    op.drop_index("ix_uws_duration_bins_bucket", "uws_duration_bins")
    op.drop_table("uws_duration_bins")
