"""Bytes per owner and service: uws_owner_bytes, filled from uws_job_bytes.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24

Storage quotas read these totals instead of summing every job's bytes at each
creation.  Like the job counters (0002) they are exact from the upgrade on, and
use the same slot rule (the job id's last character).
"""
from __future__ import annotations

from collections import Counter

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_SLOTS = 8


def upgrade() -> None:
    totals = op.create_table(
        "uws_owner_bytes",
        sa.Column("service", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(255), primary_key=True),
        sa.Column("slot", sa.SmallInteger, primary_key=True),
        sa.Column("bytes", sa.BigInteger, nullable=False),
    )
    job = sa.table("uws_job", sa.column("id"), sa.column("service"), sa.column("owner"),
                   sa.column("phase"))
    kept = sa.table("uws_job_bytes", sa.column("job_id"), sa.column("bytes"))
    last = sa.func.substr(job.c.id, sa.func.length(job.c.id), 1)
    grouped = (sa.select(job.c.service, job.c.owner, last, sa.func.sum(kept.c.bytes))
               .select_from(job.join(kept, kept.c.job_id == job.c.id))
               .where(job.c.phase != "ARCHIVED")      # archived jobs' bytes do not count
               .group_by(job.c.service, job.c.owner, last))
    tally: Counter[tuple[str, str, int]] = Counter()
    for service, owner, char, n in op.get_bind().execute(grouped):
        tally[(service, owner, ord(char) % _SLOTS if char else 0)] += int(n or 0)
    if tally:
        op.bulk_insert(totals, [{"service": s, "owner": o, "slot": slot, "bytes": n}
                                for (s, o, slot), n in tally.items()])


def downgrade() -> None:
    op.drop_table("uws_owner_bytes")
