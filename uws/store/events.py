"""The event log (uws_event): one row per change of a job's existence or phase.

:func:`record` is a change hook (see :mod:`.changes`): each row is written in the
transaction of its change, so it commits with it and never outlives a rollback.

The order readers see.  On SQLite one writer at a time holds the database until
its commit, so ids (``seq``) are handed out in commit order.  On PostgreSQL two
transactions may take ids 7 and 8 and commit 8 first: a reader that delivered 8
and resumes "after 8" would never see 7.  So each row also keeps the id of its
transaction (``xid``), the log is read in (xid, seq) order, and a reader only
gets the rows of transactions older than every transaction still in flight
(``pg_snapshot_xmin``): whatever commits later has a larger xid, so it always
sorts after what was delivered.  A reader that finds rows held back that way
(``pending``) looks again shortly.
"""
from __future__ import annotations

import datetime as dt
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence

import sqlalchemy as sa

from ..domain import timeutil
from ..domain.model import EventPage, JobEvent
from .changes import Change, ManyHook
from .connections import reading, writing
from .direct import DirectWrite
from .notify import announce
from .tables import event as E

_XID = sa.cast(sa.cast(sa.func.pg_current_xact_id(), sa.Text), sa.BigInteger)
# the oldest transaction still in flight, in the reading statement's own snapshot
_XMIN = sa.cast(sa.cast(sa.func.pg_snapshot_xmin(sa.func.pg_current_snapshot()), sa.Text),
                sa.BigInteger)
#: seconds between two progress events of one job, at least (reports come every 0.2 s)
PROGRESS_INTERVAL = 5.0
#: what a transaction writing events NOTIFYs (once: PostgreSQL sends one notification
#: per payload and transaction) and tells the store's listeners: readers of the log wake,
#: while no WAIT waits for it (it is no job id; a creation or a progress report must not
#: end a WAIT that started after it)
EVENTS_KEY = "events"
#: events a ``latest`` read looks through, newest first, at most: jobs whose last change
#: is older than that many of the caller's events are not listed
LATEST_SCAN = 10000
_COLUMNS = (E.c.seq, E.c.time, E.c.service, E.c.owner, E.c.job_id, E.c.batch_id,
            E.c.old_phase, E.c.new_phase, E.c.progress)


#: One compiled INSERT per backend, the rows as parameters (a list of VALUES would be
#: compiled anew on every call); on PostgreSQL each row takes its transaction's id.
_INSERT = {"postgresql": DirectWrite(E.insert().values(xid=_XID)),
           "sqlite": DirectWrite(E.insert().values(xid=0))}


def _record(conn: sa.Connection, changes: Sequence[Change]) -> None:
    """Log ``changes`` in one statement.  On PostgreSQL also NOTIFY (once), so that
    readers in every process wake at the commit."""
    if not changes:
        return
    now = timeutil.now()
    _INSERT[conn.dialect.name].run(conn, [
        {"time": now, "service": change.service, "owner": change.owner,
         "job_id": change.job_id, "batch_id": change.batch_id, "old_phase": change.old,
         "new_phase": change.new} for change in changes])
    if conn.dialect.name == "postgresql":
        announce(conn, EVENTS_KEY)


#: The change hook (see uws.store.changes).
record = ManyHook(_record)


def record_progress(conn: sa.Connection, job_id: str, service: str, owner: str,
                    percent: float | None) -> None:
    """Log a progress report of an EXECUTING job (old and new phase both EXECUTING)."""
    _INSERT[conn.dialect.name].run(conn, {
        "time": timeutil.now(), "service": service, "owner": owner, "job_id": job_id,
        "old_phase": "EXECUTING", "new_phase": "EXECUTING", "progress": percent})
    if conn.dialect.name == "postgresql":
        announce(conn, EVENTS_KEY)


class ProgressThrottle:
    """Whether a job's progress report is due to be logged: at most one per job every
    :data:`PROGRESS_INTERVAL` seconds.  In memory: one process writes a job's progress
    (its executor), and forgetting a job (past ``size`` jobs) only logs one more."""

    def __init__(self, interval: float = PROGRESS_INTERVAL, size: int = 10000):
        self._interval = interval
        self._size = size
        self._last: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def due(self, job_id: str) -> bool:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(job_id)
            if last is not None and now - last < self._interval:
                return False
            self._last[job_id] = now
            self._last.move_to_end(job_id)
            if len(self._last) > self._size:
                self._last.popitem(last=False)
            return True


class EventQueries:
    """Mixed into Store, which provides ``engine``.  ``owner`` scopes every read
    (None: all owners, for administrators)."""

    engine: sa.Engine

    def events_after(self, service: str, owner: str | None, after: int | None,
                     since: dt.datetime | None, limit: int) -> EventPage:
        """Up to ``limit`` events, in log order, after the event ``after`` (its id)
        and at or after ``since``, with the id a reader goes on from (``last_id``): the
        last event's; with none, ``after``; with neither, the scope's last id as
        ``latest_events`` gives it (0: no events), read in the same snapshot, so that no
        event committed meanwhile falls before it unseen."""
        with self._one_snapshot() as conn:
            where = _scope(service, owner) + _since(since) + _after(conn, service, after)
            stmt = sa.select(*_COLUMNS).where(*where).order_by(E.c.xid, E.c.seq).limit(limit)
            events = [_event(row) for row in conn.execute(self._settled(stmt))]
            pending = len(events) < limit and self._pending(conn, where)
            if events:
                last_id = events[-1].seq
            else:
                last_id = after if after is not None else self._last_id(conn, service, owner)
        return EventPage(events, pending, last_id)

    def last_event_id(self, service: str, owner: str | None) -> int:
        """The id of the last event a reader may be given now (0: none), where a
        stream that starts now resumes."""
        with reading(self.engine) as conn:
            return self._last_id(conn, service, owner)

    def _last_id(self, conn: sa.Connection, service: str, owner: str | None) -> int:
        stmt = (sa.select(E.c.seq).where(*_scope(service, owner))
                .order_by(E.c.xid.desc(), E.c.seq.desc()).limit(1))
        return conn.execute(self._settled(stmt)).scalar() or 0

    def latest_events(self, service: str, owner: str | None, limit: int) -> EventPage:
        """The newest event of each job, for the ``limit`` jobs that changed last,
        in log order, with the last event's id (``last_id``) read in the same snapshot:
        read apart, a transaction of any database of the server ending between the two
        (PostgreSQL's snapshots span them all) gave events newer than the id.  A job's
        own events come from one transaction after another, so its newest has its
        largest id.  Only the scope's newest :data:`LATEST_SCAN`
        events are grouped (read backwards through the scope's index), so a call costs
        the same however long the log: anonymous callers all share one owner."""
        scope = _scope(service, owner)
        recent = self._settled(sa.select(E.c.seq, E.c.job_id).where(*scope)
                               .order_by(E.c.xid.desc(), E.c.seq.desc())
                               .limit(LATEST_SCAN)).subquery()
        newest = (sa.select(sa.func.max(recent.c.seq)).group_by(recent.c.job_id)
                  .order_by(sa.func.max(recent.c.seq).desc()).limit(limit))
        stmt = (sa.select(*_COLUMNS).where(E.c.seq.in_(newest.scalar_subquery()))
                .order_by(E.c.xid, E.c.seq))
        with self._one_snapshot() as conn:
            return EventPage([_event(row) for row in conn.execute(stmt)],
                             self._pending(conn, scope), self._last_id(conn, service, owner))

    def _one_snapshot(self) -> sa.Connection:
        """A connection whose statements all see one snapshot (PostgreSQL: REPEATABLE
        READ): the events read and the "pending" check must agree on which transactions
        were still in flight, or a page could come back empty and not pending while
        events wait."""
        conn = self.engine.connect()
        if self.engine.dialect.name == "postgresql":
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        return conn

    def _settled(self, stmt: sa.Select) -> sa.Select:
        """Only events no transaction still in flight can sort before (PostgreSQL)."""
        if self.engine.dialect.name == "postgresql":
            return stmt.where(E.c.xid < _XMIN)
        return stmt

    def _pending(self, conn: sa.Connection, where: list) -> bool:
        """Whether events matching ``where`` are committed but held back."""
        if self.engine.dialect.name != "postgresql":
            return False
        return conn.execute(sa.select(E.c.seq).where(*where, E.c.xid >= _XMIN)
                            .limit(1)).first() is not None

    def prune_events(self, before: dt.datetime, chunk: int) -> int:
        """Delete up to ``chunk`` events older than ``before``; how many went.
        Safe to run in several processes at once."""
        doomed = sa.select(E.c.seq).where(E.c.time < before).order_by(E.c.time).limit(chunk)
        with writing(self.engine) as conn:
            return conn.execute(E.delete().where(E.c.seq.in_(doomed.scalar_subquery()))).rowcount


def _scope(service: str, owner: str | None) -> list:
    where = [E.c.service == service]
    if owner is not None:
        where.append(E.c.owner == owner)
    return where


def _since(since: dt.datetime | None) -> list:
    return [] if since is None else [E.c.time >= since]


def _after(conn: sa.Connection, service: str, after: int | None) -> list:
    """Events that sort after event ``after``; if it is gone (pruned), those with a
    larger id (pruned events are too old to be in flight)."""
    if after is None:
        return []
    xid = conn.execute(sa.select(E.c.xid).where(E.c.seq == after, E.c.service == service)
                       ).scalar()
    if xid is None:
        return [E.c.seq > after]
    return [sa.tuple_(E.c.xid, E.c.seq) > sa.tuple_(sa.literal(xid), sa.literal(after))]


def _event(row) -> JobEvent:
    return JobEvent(seq=row.seq, time=row.time, service=row.service, owner=row.owner,
                    job_id=row.job_id, batch_id=row.batch_id, old_phase=row.old_phase,
                    new_phase=row.new_phase, progress=row.progress)
