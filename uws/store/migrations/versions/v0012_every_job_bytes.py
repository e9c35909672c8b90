"""Every job has its uws_job_bytes row: one of 0 bytes for each job without one.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28

Jobs made by servers older than uws_job_bytes, and jobs seeded in bulk, had no row.
The first record of such a job's bytes inserted one, and a deletion running at the
same time could not lock a row not yet committed: it read no bytes, its cascade then
removed the new row, and the owner's total kept them.  With a row from creation on,
a deletion and a change of a job's bytes always meet on that row's lock.  A row of 0
is what the totals already counted for such a job.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    job = sa.table("uws_job", sa.column("id"))
    kept = sa.table("uws_job_bytes", sa.column("job_id"), sa.column("bytes"))
    missing = sa.select(job.c.id, sa.literal(0)).where(
        ~sa.exists().where(kept.c.job_id == job.c.id))
    op.execute(kept.insert().from_select(["job_id", "bytes"], missing))


def downgrade() -> None:
    pass    # the rows are valid at every earlier revision
