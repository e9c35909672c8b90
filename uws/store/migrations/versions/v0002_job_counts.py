"""Job counters: uws_job_count, filled from the jobs already stored.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24

The counters are exact from the upgrade on: the migration runs in the
transaction that holds the schema lock, before any server of this revision
changes a job.  The slot rule is frozen here; uws.store.counts.slot_of applies
the same one to every later change.
"""
from __future__ import annotations

from collections import Counter

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_SLOTS = 8


def upgrade() -> None:
    counts = op.create_table(
        "uws_job_count",
        sa.Column("service", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(255), primary_key=True),
        sa.Column("phase", sa.String(16), primary_key=True),
        sa.Column("slot", sa.SmallInteger, primary_key=True),
        sa.Column("n", sa.BigInteger, nullable=False),
    )
    job = sa.table("uws_job", sa.column("id"), sa.column("service"), sa.column("owner"),
                   sa.column("phase"))
    last = sa.func.substr(job.c.id, sa.func.length(job.c.id), 1)
    grouped = sa.select(job.c.service, job.c.owner, job.c.phase, last, sa.func.count()).group_by(
        job.c.service, job.c.owner, job.c.phase, last)
    tally: Counter[tuple[str, str, str, int]] = Counter()
    for service, owner, phase, char, n in op.get_bind().execute(grouped):
        tally[(service, owner, phase, ord(char) % _SLOTS if char else 0)] += n
    if tally:
        op.bulk_insert(counts, [{"service": s, "owner": o, "phase": p, "slot": slot, "n": n}
                                for (s, o, p, slot), n in tally.items()])


def downgrade() -> None:
    op.drop_table("uws_job_count")
