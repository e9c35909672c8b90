"""Batches: uws_batch, and the batch of each job (uws_job.batch_id).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24

Existing jobs belong to no batch (NULL); the column is added without rewriting
the table on either backend.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "uws_batch",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("service", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("run_id", sa.Text),
        sa.Column("creation_time", sa.DateTime, nullable=False),
        sa.Column("job_count", sa.Integer, nullable=False),
    )
    op.create_index("ix_uws_batch_list", "uws_batch",
                    ["service", "owner", "creation_time", "id"])
    op.create_index("ix_uws_batch_all", "uws_batch", ["service", "creation_time", "id"])
    op.add_column("uws_job", sa.Column("batch_id", sa.String(32)))
    op.create_index("ix_uws_job_batch", "uws_job",
                    ["batch_id", "creation_time", "id", "phase"])


def downgrade() -> None:
    op.drop_index("ix_uws_job_batch", table_name="uws_job")
    # ALTER TABLE ... DROP COLUMN on both (SQLite 3.35+): a batch-mode copy of uws_job
    # would drop the original, and with it (ON DELETE CASCADE) its parameters and bytes.
    op.drop_column("uws_job", "batch_id")
    op.drop_index("ix_uws_batch_all", table_name="uws_batch")
    op.drop_index("ix_uws_batch_list", table_name="uws_batch")
    op.drop_table("uws_batch")
