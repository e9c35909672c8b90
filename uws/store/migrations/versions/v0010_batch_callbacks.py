"""Batch callbacks: uws_batch.callback_url, the CALLBACK a batch named.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24

Batches stored before have no callback; nothing is filled in.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("uws_batch", sa.Column("callback_url", sa.Text))


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN on both (SQLite 3.35+), as v0004 does.
    op.drop_column("uws_batch", "callback_url")
