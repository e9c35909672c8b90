"""The callback outbox: deliveries written with the change that makes them due,
claimed under a lease, and their outcome.

A delivery row is added in the transaction that ends its subject (:func:`enqueue`,
a change hook for jobs; :func:`add_delivery` for other subjects), so it exists if
and only if that change committed.  Delivery threads in any process take due rows
with a compare-and-set on the lease (:meth:`CallbackQueries.lease_callback`; which
due row, :meth:`CallbackQueries.due_callbacks` and uws.usecases.callbackturns): a
row is attempted by one thread at a time, and again by another only after a lease
expired (its process died mid-attempt), so a receiver may rarely see a delivery
twice, never two at once.  Mixed into Store, which provides ``engine``.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import sqlalchemy as sa

from ..domain import phases, timeutil
from ..domain.model import PENDING, Delivery
from .changes import Change, ManyHook, chunks
from .connections import reading, writing
from .direct import DirectWrite
from .tables import callback as C
from .tables import job as J
from .tables import job_callback as JC

JOB = "job"
_ENDED = frozenset(p.value for p in phases.TERMINAL)     # COMPLETED, ERROR, ABORTED
_CANDIDATES = 8     # due rows looked at per claim_callback; several threads race for them


def name(conn: sa.Connection, job_id: str, url: str) -> None:
    """Record the job's CALLBACK (inside the transaction creating or changing it)."""
    conn.execute(JC.delete().where(JC.c.job_id == job_id))
    conn.execute(JC.insert().values(job_id=job_id, url=url))


def _enqueue(conn: sa.Connection, changes: Sequence[Change]) -> None:
    """Jobs with a callback that reach COMPLETED, ERROR or ABORTED get a delivery due
    now (a job stored already ended, old=None, has not *reached* it); deleted jobs'
    deliveries go with them (there is nothing left to send)."""
    gone = [c.job_id for c in changes if c.new is None]
    ended = [c.job_id for c in changes
             if c.old is not None and c.new in _ENDED and c.old != c.new]
    now = timeutil.now()
    if len(gone) == 1:      # one job's change (most): a statement compiled once
        _FORGET_ONE.run(conn, {"id": gone[0]})
    else:
        for part in chunks(gone):
            conn.execute(_FORGET, {"ids": list(part)})
    if len(ended) == 1:
        _ENQUEUE_ONE.run(conn, {"id": ended[0], "now": now})
    else:
        for part in chunks(ended):
            conn.execute(_ENQUEUE, {"ids": list(part), "now": now})


#: The change hook (see uws.store.changes).
enqueue = ManyHook(_enqueue)
_FORGET = C.delete().where(C.c.subject_kind == JOB,
                           C.c.subject_id.in_(sa.bindparam("ids", expanding=True)))
_FORGET_ONE = DirectWrite(C.delete().where(C.c.subject_kind == JOB,
                                           C.c.subject_id == sa.bindparam("id")))


def add_delivery(conn: sa.Connection, kind: str, subject_id: str, service: str, owner: str,
                 url: str) -> None:
    """A delivery due now for another kind of subject (inside its ending transaction)."""
    now = timeutil.now()
    conn.execute(C.insert().values(subject_kind=kind, subject_id=subject_id, service=service,
                                   owner=owner, url=url, state=PENDING, attempts=0,
                                   due_time=now, next_attempt=now))


class CallbackQueries:
    engine: sa.Engine

    def set_callback(self, job_id: str, url: str) -> bool:
        """Name the job's callback while it is PENDING; False otherwise."""
        with writing(self.engine) as conn:
            # Lock the job row while checking its phase: a RUN cannot slip in between.
            pending = conn.execute(J.update().where(
                J.c.id == job_id, J.c.phase == phases.Phase.PENDING.value).values(
                id=J.c.id)).rowcount == 1
            if pending:
                name(conn, job_id, url)
            return pending

    def callback_of(self, job_id: str) -> Delivery | None:
        """What became of the job's callback (None: it named none; waiting: it has
        not ended yet), from its latest delivery."""
        with reading(self.engine) as conn:
            row = conn.execute(OUTCOME, {"id": job_id}).first()
        return None if row is None else outcome(row._mapping)

    def claim_callback(self, worker: str, lease_seconds: float):
        """A due delivery, leased to ``worker`` (the row), or None when none is due
        (the oldest first; the delivery threads claim through
        uws.usecases.callbackturns, which shares them fairly)."""
        for row in self.due_callbacks((), _CANDIDATES, _CANDIDATES, _CANDIDATES):
            leased = self.lease_callback(row.id, worker, lease_seconds)
            if leased is not None:
                return leased
        return None

    def due_callbacks(self, skip_owners: Sequence[str], per_owner: int, limit: int,
                      head: int):
        """Of the ``head`` oldest due rows not leased, owners of ``skip_owners`` left
        out, at most ``per_owner`` of each owner's (id, owner, url), each owner's first
        row before any second one (then in due order), at most ``limit`` in all.  So
        the owners behind one with many rows due are seen too; ``head`` bounds the cost
        (the due rows' index, read in order) when thousands are due."""
        now = timeutil.now()
        due = sa.select(C.c.id, C.c.owner, C.c.url, C.c.next_attempt).where(*_due(now))
        if skip_owners:
            due = due.where(C.c.owner.not_in(list(skip_owners)))
        oldest = due.order_by(C.c.next_attempt, C.c.id).limit(head).subquery()
        rank = sa.func.row_number().over(partition_by=oldest.c.owner,
                                         order_by=(oldest.c.next_attempt, oldest.c.id))
        ranked = sa.select(oldest, rank.label("rank")).subquery()
        with reading(self.engine) as conn:
            return conn.execute(
                sa.select(ranked.c.id, ranked.c.owner, ranked.c.url)
                .where(ranked.c.rank <= per_owner)
                .order_by(ranked.c.rank, ranked.c.next_attempt, ranked.c.id)
                .limit(limit)).all()

    def lease_callback(self, row_id: int, worker: str, lease_seconds: float):
        """Row ``row_id`` leased to ``worker`` (the row) if it is still due and free
        (a compare-and-set: of threads in several processes, one wins); else None."""
        now = timeutil.now()
        lease = now + dt.timedelta(seconds=lease_seconds)
        with writing(self.engine) as conn:
            won = conn.execute(C.update().where(C.c.id == row_id, *_due(now)).values(
                lease_owner=worker, lease_expires=lease)).rowcount == 1
            return conn.execute(sa.select(C).where(C.c.id == row_id)).first() if won else None

    def finish_attempt(self, row_id: int, worker: str, **fields) -> bool:
        """Record an attempt's outcome and free the lease, if ``worker`` still holds it."""
        return self.release_callback(row_id, worker, attempts=C.c.attempts + 1, **fields)

    def release_callback(self, row_id: int, worker: str, **fields) -> bool:
        """Free the lease, if ``worker`` still holds it, changing ``fields`` but not
        the attempts (a row put back unattempted, its receiver resting)."""
        with writing(self.engine) as conn:
            return conn.execute(C.update().where(C.c.id == row_id, C.c.lease_owner == worker)
                                .values(lease_owner=None, lease_expires=None,
                                        **fields)).rowcount == 1


def _due(now: dt.datetime) -> tuple:
    """A row that may be attempted now: pending, its time come, its lease free or
    expired (its process died mid-attempt)."""
    return (C.c.state == PENDING, C.c.next_attempt <= now,
            sa.or_(C.c.lease_expires.is_(None), C.c.lease_expires < now))


def _enqueue_statement(which):
    """A delivery due now for each job ``which`` selects that named a callback."""
    return C.insert().from_select(
        ["subject_kind", "subject_id", "service", "owner", "url", "state", "attempts",
         "due_time", "next_attempt"],
        sa.select(sa.literal(JOB), J.c.id, J.c.service, J.c.owner, JC.c.url,
                  sa.literal(PENDING), sa.literal(0),
                  sa.bindparam("now", type_=sa.DateTime), sa.bindparam("now", type_=sa.DateTime))
        .select_from(J.join(JC, JC.c.job_id == J.c.id)).where(which))


_ENQUEUE = _enqueue_statement(J.c.id.in_(sa.bindparam("ids", expanding=True)))
_ENQUEUE_ONE = DirectWrite(_enqueue_statement(J.c.id == sa.bindparam("id")))
# The named URL with the latest delivery, if any (one indexed read).
def outcome(row) -> Delivery:
    """The Delivery a row of :data:`OUTCOME` describes."""
    if row["state"] is None:
        return Delivery(row["named"])
    return Delivery(row["url"], row["state"], row["attempts"], row["last_status"],
                              row["last_error"], row["delivered_time"])


#: A job's callback and its latest delivery, if it named one (parameter "id").
OUTCOME = (sa.select(JC.c.url.label("named"), C)
            .select_from(JC.outerjoin(C, sa.and_(C.c.subject_kind == JOB,
                                                 C.c.subject_id == JC.c.job_id)))
            .where(JC.c.job_id == sa.bindparam("id")).order_by(C.c.id.desc())
           .limit(sa.bindparam("one", 1, type_=sa.Integer)))
