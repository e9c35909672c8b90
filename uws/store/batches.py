"""Batch storage: a batch's row, its jobs inserted in bulk, and its aggregates.

A :class:`BatchStore` works beside the job :class:`~uws.store.jobs.Store`, sharing its
engine and its change recording: every job a batch creates or moves is reported by
:meth:`Store._record_many` inside the transaction that makes the change.  ``owner``
arguments scope reads as in the job store (None: unscoped, for administrators).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import sqlalchemy as sa

from ..domain import phases
from ..domain.batchmodel import Batch, BatchJob, Progress
from ..domain.errors import OverQuota
from ..domain.model import STOPPED, Delivery, Job, Parameter
from ..domain.phases import Event, Phase
from ..domain.services import Quota
from . import batchcallbacks, counts, usage
from .changes import Change, chunks
from .connections import reading, writing
from .holds import _run_event, hold_applies
from .jobs import Store, _job_row, _param_rows
from .notify import CHANNEL
from .tables import batch as T
from .tables import job as J
from .tables import job_bytes as B
from .tables import parameter as P
from .transitions import _ended

_PHASE = {p.value: p for p in Phase}


class BatchStore:
    def __init__(self, store: Store):
        self.store = store
        self.engine = store.engine

    # -- creation ---------------------------------------------------------------------

    def insert_batch(self, batch: Batch, jobs: Sequence[Job], quota: Quota = Quota()) -> None:
        """Store the batch and its new jobs (no uploads, so no bytes) in one transaction:
        one multi-row statement per table, the counters bumped once.  With a quota,
        :class:`OverQuota` (nothing stored) when the owner would keep more jobs than it
        allows, serialised with the owner's other creations as single jobs are."""
        with writing(self.engine) as conn:
            if quota.jobs:
                self.store._serialise_owner(conn, batch.service, batch.owner)
            conn.execute(T.insert().values(
                id=batch.id, service=batch.service, owner=batch.owner, run_id=batch.run_id,
                creation_time=batch.creation_time, job_count=batch.job_count,
                callback_url=batch.callback_url))
            conn.execute(J.insert(), [{**_job_row(job), "batch_id": batch.id} for job in jobs])
            params = [row for job in jobs for row in _param_rows(job.id, job.parameters, 0)]
            if params:
                conn.execute(P.insert(), params)
            conn.execute(B.insert(), [{"job_id": job.id, "bytes": 0} for job in jobs])
            self.store._record_many(conn, [
                Change(job.id, job.service, job.owner, None, job.phase.value, batch.id)
                for job in jobs])
            if quota.jobs and counts.total(conn, batch.service, batch.owner) > quota.jobs:
                raise OverQuota("jobs", quota.jobs)

    # -- reading ----------------------------------------------------------------------

    def get_batch(self, batch_id: str, service: str, owner: str | None) -> Batch | None:
        stmt = sa.select(T).where(T.c.id == batch_id, T.c.service == service)
        if owner is not None:
            stmt = stmt.where(T.c.owner == owner)
        with reading(self.engine) as conn:
            row = conn.execute(stmt).first()
        return None if row is None else _batch(row)

    def batch_owner(self, batch_id: str, service: str) -> str | None:
        """The owner of a batch, or None if there is none (for 403 vs 404)."""
        with reading(self.engine) as conn:
            return conn.execute(sa.select(T.c.owner).where(
                T.c.id == batch_id, T.c.service == service)).scalar()

    def list_batches(self, service: str, owner: str | None, offset: int,
                     limit: int) -> list[Batch]:
        """Batches newest first (ix_uws_batch_list, or _all when unscoped)."""
        stmt = sa.select(T).where(T.c.service == service)
        if owner is not None:
            stmt = stmt.where(T.c.owner == owner)
        stmt = stmt.order_by(T.c.creation_time.desc(), T.c.id.desc()).offset(offset).limit(limit)
        with reading(self.engine) as conn:
            return [_batch(row) for row in conn.execute(stmt)]

    def count_batches(self, service: str, owner: str | None) -> int:
        stmt = sa.select(sa.func.count()).select_from(T).where(T.c.service == service)
        if owner is not None:
            stmt = stmt.where(T.c.owner == owner)
        with reading(self.engine) as conn:
            return conn.execute(stmt).scalar_one()

    def progress(self, batch_id: str) -> Progress:
        """The batch's jobs counted by phase, and the summed percent of those executing."""
        with reading(self.engine) as conn:
            rows = conn.execute(_PROGRESS, {"batch": batch_id}).all()
        counted = {_PHASE[phase]: n for phase, n, _ in rows}
        executing = next((float(s or 0) for phase, _, s in rows
                          if phase == Phase.EXECUTING.value), 0.0)
        return Progress(counted, executing)

    def batch_callback(self, batch_id: str) -> Delivery | None:
        """What became of the batch's callback (None: it named none; waiting: it has
        not ended yet), from its latest delivery."""
        with reading(self.engine) as conn:
            return batchcallbacks.outcome(conn, batch_id)

    def batch_jobs(self, batch_id: str, offset: int, limit: int) -> list[BatchJob]:
        """A page of the batch's jobs in creation order."""
        stmt = (sa.select(J.c.id, J.c.phase, J.c.run_id, J.c.creation_time, J.c.error_message)
                .where(J.c.batch_id == batch_id)
                .order_by(J.c.creation_time, J.c.id).offset(offset).limit(limit))
        with reading(self.engine) as conn:
            return [BatchJob(i, _PHASE[ph], run, ct, err) for i, ph, run, ct, err
                    in conn.execute(stmt)]

    def parameter_sets(self, batch_id: str, in_phases: Iterable[Phase]) -> list[list[Parameter]]:
        """The parameters of the batch's jobs in ``in_phases``, one list per job, in
        creation order (what REPEAT copies)."""
        chosen = (sa.select(J.c.id, J.c.creation_time)
                  .where(J.c.batch_id == batch_id, J.c.phase.in_([p.value for p in in_phases]))
                  .subquery())
        stmt = (sa.select(chosen.c.id, P.c.name, P.c.value, P.c.by_reference)
                .select_from(chosen.outerjoin(P, P.c.job_id == chosen.c.id))
                .order_by(chosen.c.creation_time, chosen.c.id, P.c.seq))
        sets: dict[str, list[Parameter]] = {}
        with reading(self.engine) as conn:
            for job_id, name, value, by_ref in conn.execute(stmt):
                params = sets.setdefault(job_id, [])
                if name is not None:
                    params.append(Parameter(name, value, bool(by_ref)))
        return list(sets.values())

    # -- changes ----------------------------------------------------------------------

    def mark_queued(self, batch_id: str) -> list[str]:
        """PHASE=RUN of every PENDING or HELD job of the batch, as
        :meth:`HoldQueries.run_job` decides it for one (PENDING -> HELD while a hold
        applies to the owner, else QUEUED); the ids of the jobs now QUEUED."""
        with writing(self.engine) as conn:
            batch = conn.execute(sa.select(T.c.service, T.c.owner)
                                 .where(T.c.id == batch_id)).first()
            if batch is None:
                return []
            postgres = conn.dialect.name == "postgresql"
            if postgres:    # holds, then the jobs: the order a release takes them in
                held = hold_applies(conn, batch.service, batch.owner)
            rows = self._lock(conn, batch_id, Event.RUN)
            if not postgres:    # the write lock first, as run_job takes it
                held = hold_applies(conn, batch.service, batch.owner)
            moves = {event: [r for r in rows if _run_event(_PHASE[r.phase], r.held_for,
                                                           held) is event]
                     for event in (Event.RUN, Event.RUN_HELD)}
            self._move(conn, batch_id, Event.RUN_HELD, moves[Event.RUN_HELD], held_for=STOPPED)
            queued = self._move(conn, batch_id, Event.RUN, moves[Event.RUN], held_for=None)
        for job_id in queued:
            self.store._changed(job_id)
        return queued

    def mark_aborted(self, batch_id: str) -> list[str]:
        """Every unfinished job of the batch -> ABORTED; their ids."""
        with writing(self.engine) as conn:
            rows = self._lock(conn, batch_id, Event.ABORT)
            ids = self._move(conn, batch_id, Event.ABORT, rows, **_ended())
        for job_id in ids:
            self.store._changed(job_id)
        return ids

    @staticmethod
    def _lock(conn: sa.Connection, batch_id: str, event: Event) -> Sequence[sa.Row]:
        """The batch's jobs in one of the event's source phases, their rows locked
        until the commit (read: the phase each leaves)."""
        sources = [p.value for p in phases.sources(event)]
        return conn.execute(_LOCK[conn.dialect.name == "postgresql"],
                            {"batch": batch_id, "sources": sources}).all()

    def _move(self, conn: sa.Connection, batch_id: str, event: Event, rows: Sequence[sa.Row],
              **fields) -> list[str]:
        """The event for each of ``rows`` (locked by :meth:`_lock`), changed by id,
        so each job is moved exactly as Store._apply would move it; their ids."""
        new = phases.target(event).value
        ids = [row.id for row in rows]
        for part in chunks(ids):
            conn.execute(J.update().where(J.c.id.in_(part)).values(phase=new, **fields))
        self._notify(conn, ids)
        self.store._record_many(conn, [Change(r.id, r.service, r.owner, r.phase, new,
                                              batch_id) for r in rows])
        return ids

    def delete_batch(self, batch_id: str) -> list[str]:
        """Forget the batch and its jobs in one transaction, as Store.delete_job forgets
        one (bytes rows locked first, then the jobs; parameters, results and bytes go
        with them); the ids of the jobs deleted."""
        with writing(self.engine) as conn:
            kept: dict[str, int] = dict(conn.execute(_LOCK_BYTES, {"batch": batch_id}).all())
            rows = conn.execute(_DELETE_JOBS, {"batch": batch_id}).all()
            self.store._record_many(conn, [Change(r.id, r.service, r.owner, r.phase, None,
                                                  batch_id) for r in rows])
            freed: Counter[tuple[str, str, int]] = Counter()
            some_id: dict[tuple[str, str, int], str] = {}
            for r in rows:
                if r.phase != Phase.ARCHIVED.value:     # its bytes left the total then
                    key = (r.service, r.owner, counts.slot_of(r.id))
                    freed[key] += kept.get(r.id) or 0
                    some_id[key] = r.id
            for key, size in freed.items():     # one change per owner's slot
                usage.add(conn, key[0], key[1], some_id[key], -size)
            ids = [r.id for r in rows]
            self._notify(conn, ids)
            batchcallbacks.drop(conn, batch_id)
            conn.execute(T.delete().where(T.c.id == batch_id))
        for job_id in ids:
            self.store._changed(job_id)
        return ids

    @staticmethod
    def _notify(conn: sa.Connection, ids: list[str]) -> None:
        """Store._announce for each job, in one statement (PostgreSQL).  From the ids
        themselves, not their rows: a deleted job's row is gone."""
        if conn.dialect.name == "postgresql" and ids:
            conn.execute(_NOTIFY, {"ids": ids})


_IN_BATCH = (J.c.batch_id == sa.bindparam("batch"),
             J.c.phase.in_(sa.bindparam("sources", expanding=True)))
# The rows an event moves, locked until the commit: FOR UPDATE on PostgreSQL (a
# claim's SKIP LOCKED passes them by); on SQLite a no-op UPDATE takes the write lock.
_LOCKED = (J.c.id, J.c.service, J.c.owner, J.c.phase, J.c.held_for)
_LOCK = {True: sa.select(*_LOCKED).where(*_IN_BATCH).order_by(J.c.id).with_for_update(),
         False: J.update().where(*_IN_BATCH).values(phase=J.c.phase).returning(*_LOCKED)}
_OF_BATCH = sa.select(J.c.id).where(J.c.batch_id == sa.bindparam("batch"))
# The batch's bytes rows, locked (a no-op UPDATE, as usage.lock), then its jobs deleted.
_LOCK_BYTES = (B.update().where(B.c.job_id.in_(_OF_BATCH)).values(bytes=B.c.bytes)
               .returning(B.c.job_id, B.c.bytes))
_DELETE_JOBS = (J.delete().where(J.c.batch_id == sa.bindparam("batch"))
                .returning(J.c.id, J.c.service, J.c.owner, J.c.phase))
# NOTIFY of each job, as uws.store.notify.announce sends it, for many jobs at once.
_NOTIFY = sa.text(f"SELECT pg_notify('{CHANNEL}', id) FROM unnest(CAST(:ids AS text[])) AS id")
_PROGRESS = (sa.select(J.c.phase, sa.func.count(), sa.func.sum(J.c.progress))
             .where(J.c.batch_id == sa.bindparam("batch")).group_by(J.c.phase))


def _batch(row) -> Batch:
    return Batch(id=row.id, service=row.service, owner=row.owner,
                 creation_time=row.creation_time, job_count=row.job_count, run_id=row.run_id,
                 callback_url=row.callback_url)
