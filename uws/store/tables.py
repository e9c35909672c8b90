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
    # The batch that created the job, if any (uws_batch.id).  No foreign key: SQLite
    # cannot add one to an existing table, and a batch is deleted after its jobs.
    Column("batch_id", String(32)),
    Column("start_after", DateTime),     # STARTAFTER, or a retry's backoff: not claimed before
    Column("held_for", String(8)),       # while HELD: "hold" (administrative) or "quota"
)

# Lists are keyset pages over (creation_time, id) inside one service and owner;
# phase is in the index so the default "not ARCHIVED" filter needs no row lookups.
Index("ix_uws_job_list", job.c.service, job.c.owner, job.c.creation_time, job.c.id, job.c.phase)
Index("ix_uws_job_phase", job.c.service, job.c.owner, job.c.phase, job.c.creation_time, job.c.id)
# Unscoped (administrator) lists.
Index("ix_uws_job_all", job.c.service, job.c.creation_time, job.c.id, job.c.phase)
# The executor takes an owner's QUEUED jobs by priority, then oldest first: a claim
# seeks its job here, never walking the service's other jobs (revision 0011).
Index("ix_uws_job_claim", job.c.phase, job.c.service, job.c.owner, job.c.priority.desc(),
      job.c.creation_time, job.c.id)
Index("ix_uws_job_destruction", job.c.destruction)
Index("ix_uws_job_running", job.c.phase, job.c.deadline)
# A batch's jobs in creation order, and its counts by phase, read from the index alone.
Index("ix_uws_job_batch", job.c.batch_id, job.c.creation_time, job.c.id, job.c.phase)

# A batch: jobs created together by one request (POST /{service}/batches).
batch = Table(
    "uws_batch", metadata,
    Column("id", String(32), primary_key=True),
    Column("service", String(64), nullable=False),
    Column("owner", String(255), nullable=False),   # "" = anonymous
    Column("run_id", Text),
    Column("creation_time", DateTime, nullable=False),
    Column("job_count", Integer, nullable=False),   # jobs created (some may be deleted since)
    Column("callback_url", Text),   # POSTed the batch when its last job ends (CALLBACK)
)
# An owner's batches, newest first; unscoped (administrator) lists.
Index("ix_uws_batch_list", batch.c.service, batch.c.owner, batch.c.creation_time, batch.c.id)
Index("ix_uws_batch_all", batch.c.service, batch.c.creation_time, batch.c.id)

# The failed attempts of a job that was run again (automatic retries), in order.
attempt = Table(
    "uws_attempt", metadata,
    Column("job_id", String(32), ForeignKey("uws_job.id", ondelete="CASCADE"), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("end_time", DateTime, nullable=False),
    Column("error_type", String(16), nullable=False),
    Column("error_message", Text, nullable=False),
)

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
# The owners with jobs in a phase (the executor's claims ask who has QUEUED ones).
Index("ix_uws_job_count_phase", job_count.c.phase, job_count.c.service, job_count.c.owner)

# Every change of a job's existence or phase, written in the changing transaction
# (uws/store/events.py).  ``seq`` is the event id; ``xid`` the writing PostgreSQL
# transaction (0 on SQLite), which orders the log as it becomes visible.  Readers
# of one service (and owner) walk it in (xid, seq) order; pruning goes by time.
event = Table(
    "uws_event", metadata,
    Column("seq", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("xid", BigInteger, nullable=False),
    Column("time", DateTime, nullable=False),
    Column("service", String(64), nullable=False),
    Column("owner", String(255), nullable=False),
    Column("job_id", String(32), nullable=False),
    Column("batch_id", String(32)),
    Column("old_phase", String(16)),     # None: the job was created
    Column("new_phase", String(16)),     # None: the job was deleted
    Column("progress", Float),
    sqlite_autoincrement=True,           # ids are never reused after pruning
)
Index("ix_uws_event_owner", event.c.service, event.c.owner, event.c.xid, event.c.seq)
Index("ix_uws_event_service", event.c.service, event.c.xid, event.c.seq)
Index("ix_uws_event_time", event.c.time)

# Administrative holds (uws/store/holds.py): while one applies to a service (owner
# "*") or to one owner of it, PHASE=RUN moves that owner's PENDING jobs to HELD.
hold = Table(
    "uws_hold", metadata,
    Column("service", String(64), primary_key=True),
    Column("owner", String(255), primary_key=True),    # "*" = every owner
    Column("who", String(255), nullable=False),
    Column("created", DateTime, nullable=False),
    Column("reason", Text, nullable=False),
)

# Durations of the jobs that started (wait: creation to start) and ended (run: start
# to end), as counts per log-spaced bin of each time bucket (uws/usecases/stats.py: 5 minutes
# wide for the hour window, an hour wide for the day window), kept by a
# change hook (uws/store/stats.py): percentiles over a window read a few hundred rows.
duration_bins = Table(
    "uws_duration_bins", metadata,
    # An owner's window is one range of the key, in one service or all.
    Column("owner", String(255), primary_key=True),
    Column("width", Integer, primary_key=True),        # the bucket's, in seconds
    Column("bucket", DateTime, primary_key=True),
    Column("service", String(64), primary_key=True),
    Column("kind", String(8), primary_key=True),       # "wait" or "run"
    Column("bin", SmallInteger, primary_key=True),
    Column("n", BigInteger, nullable=False),
)
# Everyone's window (administrators: a row per owner, bucket and bin), and the sweep
# pruning old buckets.
Index("ix_uws_duration_bins_bucket", duration_bins.c.width, duration_bins.c.bucket,
      duration_bins.c.service)

# The job counters summed by service and phase, sampled once per time bucket by a sweep
# (the first process to sample a bucket wins): the history behind the statistics chart.
phase_samples = Table(
    "uws_phase_samples", metadata,
    Column("at", DateTime, primary_key=True),
    Column("service", String(64), primary_key=True),
    Column("phase", String(16), primary_key=True),
    Column("n", BigInteger, nullable=False),
)

# The CALLBACK a job named: where to POST it when it ends (uws/store/callbacks.py).
job_callback = Table(
    "uws_job_callback", metadata,
    Column("job_id", String(32), ForeignKey("uws_job.id", ondelete="CASCADE"), primary_key=True),
    Column("url", Text, nullable=False),
)

# The callback outbox: one row per delivery due, written in
# the transaction that ends its subject (a job, a batch), claimed with a lease
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
