"""The SQL schema: the tables and the indexes the list queries walk."""
from __future__ import annotations

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
                        SmallInteger,
                        String,
                        Table,
                        Text,
)

metadata = MetaData()

job = Table(
    "uws_job", metadata,
    Column("id", String(32), primary_key=True),
    Column("service", String(64), nullable=False),
    Column("owner", String(255), nullable=False),   # "" = anonymous
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
    Column("priority", Integer, nullable=False, default=0),
    Column("lease_owner", String(64)),
    Column("lease_expires", DateTime),
    Column("deadline", DateTime),        # start + execution duration, while EXECUTING
)

# Lists are keyset pages over (creation_time, id) inside one service and owner;
# phase is in the index so the default "not ARCHIVED" filter needs no row lookups.
Index("ix_uws_job_list", job.c.service, job.c.owner, job.c.creation_time, job.c.id, job.c.phase)
Index("ix_uws_job_phase", job.c.service, job.c.owner, job.c.phase, job.c.creation_time, job.c.id)
# Unscoped (administrator) lists.
Index("ix_uws_job_all", job.c.service, job.c.creation_time, job.c.id, job.c.phase)
# The executor takes QUEUED jobs by priority, then oldest first.
Index("ix_uws_job_queue", job.c.phase, job.c.priority, job.c.creation_time)
Index("ix_uws_job_destruction", job.c.destruction)
Index("ix_uws_job_running", job.c.phase, job.c.deadline)

parameter = Table(
    "uws_parameter", metadata,
    Column("job_id", String(32), ForeignKey("uws_job.id", ondelete="CASCADE"), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("name", String(255), nullable=False),
    Column("value", Text, nullable=False),
    Column("by_reference", Boolean, nullable=False, default=False),
)

result = Table(
    "uws_result", metadata,
    Column("job_id", String(32), ForeignKey("uws_job.id", ondelete="CASCADE"), primary_key=True),
    Column("id", String(255), primary_key=True),
    Column("seq", Integer, nullable=False),
    Column("path", Text, nullable=False),
    Column("mime_type", String(255), nullable=False),
    Column("size", BigInteger),
)

# The bytes each job keeps on disk (uploads, results, logs), which owners' storage
# quotas add up.  A table of its own, so a database made before it gains it at start.
job_bytes = Table(
    "uws_job_bytes", metadata,
    Column("job_id", String(32), ForeignKey("uws_job.id", ondelete="CASCADE"), primary_key=True),
    Column("bytes", BigInteger, nullable=False),
)

# The bytes each owner keeps in each service: uws_job_bytes summed, maintained in the
# transactions that change it (uws/store/usage.py), in the job counters' slots.
owner_bytes = Table(
    "uws_owner_bytes", metadata,
    Column("service", String(64), primary_key=True),
    Column("owner", String(255), primary_key=True),
    Column("slot", SmallInteger, primary_key=True),
    Column("bytes", BigInteger, nullable=False),
)

# How many jobs each owner keeps in each phase of each service, maintained in the
# transactions that insert, move and delete jobs (uws/store/counts.py), so counts
# never scan uws_job.  Each (service, owner, phase) is split over a few slots (by
# job id) so concurrent creations by one owner do not all wait for one row's lock.
job_count = Table(
    "uws_job_count", metadata,
    Column("service", String(64), primary_key=True),
    Column("owner", String(255), primary_key=True),
    Column("phase", String(16), primary_key=True),
    Column("slot", SmallInteger, primary_key=True),
    Column("n", BigInteger, nullable=False),
)

# The CALLBACK a job named: where to POST it when it ends (uws/store/callbacks.py).
job_callback = Table(
    "uws_job_callback", metadata,
    Column("job_id", String(32), ForeignKey("uws_job.id", ondelete="CASCADE"), primary_key=True),
    Column("url", Text, nullable=False),
)

# The callback outbox: one row per delivery due, written in
# the transaction that ends its subject (a job; later a batch), claimed with a lease
# by one delivery thread at a time in any process.
callback = Table(
    "uws_callback", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("subject_kind", String(16), nullable=False),     # "job", "batch"
    Column("subject_id", String(32), nullable=False),
    Column("service", String(64), nullable=False),
    Column("owner", String(255), nullable=False),
    Column("url", Text, nullable=False),
    Column("state", String(16), nullable=False),            # pending, delivered, failed
    Column("attempts", Integer, nullable=False, default=0),
    Column("due_time", DateTime, nullable=False),           # when its subject ended
    Column("next_attempt", DateTime, nullable=False),
    Column("lease_owner", String(64)),
    Column("lease_expires", DateTime),
    Column("last_status", Integer),
    Column("last_error", Text),
    Column("delivered_time", DateTime),
)
Index("ix_uws_callback_due", callback.c.state, callback.c.next_attempt)
Index("ix_uws_callback_subject", callback.c.subject_kind, callback.c.subject_id)
