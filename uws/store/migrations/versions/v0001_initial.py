"""The initial schema: the four tables and indexes of the servers made before migrations.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

The tables are frozen here (not imported from uws/store/tables.py, which moves on
with later revisions).  uws.store.schema also calls ``schema()`` to complete a
database made before migrations whose server predates uws_job_bytes, as that
server's own create_all at start would have.
"""
from __future__ import annotations

from alembic import op
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def schema() -> MetaData:
    metadata = MetaData()
    job = Table(
        "uws_job", metadata,
        Column("id", String(32), primary_key=True),
        Column("service", String(64), nullable=False),
        Column("owner", String(255), nullable=False),
        Column("run_id", Text),
        Column("phase", String(16), nullable=False),
        Column("creation_time", DateTime, nullable=False),
        Column("start_time", DateTime),
        Column("end_time", DateTime),
        Column("execution_duration", Integer, nullable=False),
        Column("destruction", DateTime),
        Column("quote", DateTime),
        Column("error_type", String(16)),
        Column("error_message", Text),
        Column("error_detail", Text),
        Column("progress", Float),
        Column("progress_message", Text),
        Column("priority", Integer, nullable=False),
        Column("lease_owner", String(64)),
        Column("lease_expires", DateTime),
        Column("deadline", DateTime),
    )
    Index("ix_uws_job_list", job.c.service, job.c.owner, job.c.creation_time, job.c.id,
          job.c.phase)
    Index("ix_uws_job_phase", job.c.service, job.c.owner, job.c.phase, job.c.creation_time,
          job.c.id)
    Index("ix_uws_job_all", job.c.service, job.c.creation_time, job.c.id, job.c.phase)
    Index("ix_uws_job_queue", job.c.phase, job.c.priority, job.c.creation_time)
    Index("ix_uws_job_destruction", job.c.destruction)
    Index("ix_uws_job_running", job.c.phase, job.c.deadline)
    Table(
        "uws_parameter", metadata,
        Column("job_id", String(32), ForeignKey("uws_job.id", ondelete="CASCADE"),
               primary_key=True),
        Column("seq", Integer, primary_key=True),
        Column("name", String(255), nullable=False),
        Column("value", Text, nullable=False),
        Column("by_reference", Boolean, nullable=False),
    )
    Table(
        "uws_result", metadata,
        Column("job_id", String(32), ForeignKey("uws_job.id", ondelete="CASCADE"),
               primary_key=True),
        Column("id", String(255), primary_key=True),
        Column("seq", Integer, nullable=False),
        Column("path", Text, nullable=False),
        Column("mime_type", String(255), nullable=False),
        Column("size", BigInteger),
    )
    Table(
        "uws_job_bytes", metadata,
        Column("job_id", String(32), ForeignKey("uws_job.id", ondelete="CASCADE"),
               primary_key=True),
        Column("bytes", BigInteger, nullable=False),
    )
    return metadata


def upgrade() -> None:
    schema().create_all(op.get_bind(), checkfirst=False)


def downgrade() -> None:
    schema().drop_all(op.get_bind(), checkfirst=False)
