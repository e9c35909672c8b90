"""Holds: administrative holds of a service or of one owner in it, and quota holds
of queued jobs whose owner runs as many jobs as its service allows.  Mixed into
Store, which provides ``engine``, ``_record``, ``_record_many``, ``_announce``,
``_changed`` and ``_serialise_owner``.

On PostgreSQL locks are taken in one order, holds before jobs: PHASE=RUN reads
the holds that apply ``FOR SHARE`` before it locks the job, and a release deletes
its hold before it requeues the jobs, so the two never interleave.  On SQLite each
starts with a write, taking the database's one write lock first.  A quota hold
locks the owner's running jobs before holding its queued ones.  A running job's
end frees a slot: a change hook notes it, and once the end has committed the
owner's first quota-held job is queued again in a transaction of its own (its
counters locked in their own order, never after the end's); the hold, being
taken under the running jobs' locks, either sees the end or is seen by that
release, so a slot that frees is never missed.  A process that dies in between
leaves the job to :meth:`HoldQueries.release_stragglers`, run by a sweep.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from ..domain import timeutil
from ..domain.model import EVERYONE, QUOTA, STOPPED, Hold
from ..domain.phases import TERMINAL, Event, Phase, sources, target
from .changes import Change, log_change
from .connections import reading, writing
from .direct import DirectWrite, ReadIn, together
from .part import StorePart
from .running import due
from .tables import hold as H
from .tables import job as J

log = logging.getLogger(__name__)
_HELD, _QUEUED, _EXECUTING = Phase.HELD.value, Phase.QUEUED.value, Phase.EXECUTING.value
# A running job leaving EXECUTING for these frees its slot (None: it was deleted);
# a SUSPENDED one keeps it, to RESUME in.
_SLOT_FREED = frozenset({*(p.value for p in TERMINAL), _QUEUED, None})

_APPLYING = sa.select(H.c.owner, H.c.reason).where(
    H.c.service == sa.bindparam("_service"),
    H.c.owner.in_([sa.bindparam("_owner"), EVERYONE]))
_THE_JOB = J.c.id == sa.bindparam("_id")
_OF_OWNER = (J.c.service == sa.bindparam("_service"), J.c.owner == sa.bindparam("_owner"))
# Lock one job's row (PostgreSQL: FOR UPDATE; SQLite: a no-op UPDATE takes the write lock),
# found under its own service and owner only: an id is no job under another's name, and
# another owner's row is never locked.
_LOCK_JOB_FOR_UPDATE = ReadIn(sa.select(J.c.phase, J.c.held_for, J.c.batch_id)
                              .where(_THE_JOB, *_OF_OWNER).with_for_update())
_LOCK_JOB_BY_WRITE = DirectWrite(J.update().where(_THE_JOB, *_OF_OWNER).values(phase=J.c.phase)
                                 .returning(J.c.phase, J.c.held_for, J.c.batch_id))
_LOCK_RUNNING = {True: sa.select(J.c.id).where(*_OF_OWNER, J.c.phase == _EXECUTING)
                 .with_for_update(),
                 False: J.update().where(*_OF_OWNER, J.c.phase == _EXECUTING)
                 .values(phase=J.c.phase).returning(J.c.id)}
# Only jobs due now wait for a slot: one whose start time is to come stays QUEUED.
_HOLD_QUEUED = (J.update().where(*_OF_OWNER, J.c.phase == _QUEUED, due(J))
                .values(phase=target(Event.HOLD).value, held_for=QUOTA)
                .returning(J.c.id, J.c.batch_id))
_candidate = J.alias("candidate")
# The owner's first ``_n`` quota-held jobs, locked: those due now first, then in
# claim order (priority, then age).  A CTE, read once: as a subquery of IN,
# PostgreSQL may run it again for each row, each time skipping the rows already
# moved, and so move them all.
_FIRST_HELD = (sa.select(_candidate.c.id)
               .where(_candidate.c.service == sa.bindparam("_service"),
                      _candidate.c.owner == sa.bindparam("_owner"),
                      _candidate.c.phase == _HELD, _candidate.c.held_for == QUOTA)
               .order_by(sa.case((due(_candidate), 0), else_=1), _candidate.c.priority.desc(),
                         _candidate.c.creation_time, _candidate.c.id)
               .limit(sa.bindparam("_n")).with_for_update(skip_locked=True)
               .cte("first_held"))
_RELEASE_SOME = (J.update()
                 .where(J.c.id.in_(sa.select(_FIRST_HELD.c.id)), J.c.phase == _HELD)
                 .values(phase=target(Event.RELEASE).value, held_for=None)
                 .returning(J.c.id, J.c.batch_id))

_ANY_QUOTA_HELD = ReadIn(sa.select(sa.literal(1)).where(*_OF_OWNER, J.c.phase == _HELD,
                                                       J.c.held_for == QUOTA).limit(1))

_SERVICES: sa.BindParameter = sa.bindparam("services", expanding=True)
_QUOTA_HELD = (sa.select(J.c.service, J.c.owner, sa.func.count())
               .where(J.c.phase == _HELD, J.c.held_for == QUOTA, J.c.service.in_(_SERVICES))
               .group_by(J.c.service, J.c.owner))
_RUNNING = (sa.select(J.c.service, J.c.owner, sa.func.count())
            .where(J.c.phase == _EXECUTING, J.c.service.in_(_SERVICES))
            .group_by(J.c.service, J.c.owner))


class HoldQueries(StorePart):
    #: (service, owner) of jobs whose change freed a running slot, by job id, until
    #: that change has committed (see note_freed_slot)
    _freed_slots: dict[str, tuple[str, str]]

    # -- administrative holds ------------------------------------------------------------

    def holds(self, service: str) -> list[Hold]:
        """The holds placed on a service, the whole service's first."""
        with reading(self.engine) as conn:
            rows = conn.execute(sa.select(H).where(H.c.service == service)
                                .order_by(H.c.owner != EVERYONE, H.c.owner)).all()
        return [Hold(r.service, r.owner, r.who, r.created, r.reason) for r in rows]

    def place_hold(self, hold: Hold) -> bool:
        """Place (or restate) a hold; True if it is new.  Jobs already QUEUED stay so."""
        key = {"service": hold.service, "owner": hold.owner}
        values = {"who": hold.who, "created": hold.created, "reason": hold.reason}
        with writing(self.engine) as conn:
            insert: Any = (postgresql.insert if conn.dialect.name == "postgresql"
                           else sqlite.insert)(H)
            new = conn.execute(insert.values(**key, **values)
                               .on_conflict_do_nothing().returning(H.c.owner)).first()
            if new is None:
                conn.execute(H.update().where(H.c.service == hold.service,
                                              H.c.owner == hold.owner).values(**values))
        return new is not None

    def release_hold(self, service: str, owner: str) -> list[str] | None:
        """Lift a hold and queue again, in one transaction, the jobs it held that no
        other hold still holds; their ids, or None if there was no such hold."""
        with writing(self.engine) as conn:
            if not conn.execute(H.delete().where(H.c.service == service,
                                                 H.c.owner == owner)).rowcount:
                return None
            released = self._requeue_held(conn, service, owner)
        for job_id in released:
            self._changed(job_id)
        return released

    def _requeue_held(self, conn: sa.Connection, service: str, owner: str) -> list[str]:
        remaining = set(conn.execute(sa.select(H.c.owner).where(H.c.service == service))
                        .scalars())
        if EVERYONE in remaining:
            return []
        stmt = J.update().where(J.c.service == service,
                                J.c.phase.in_([p.value for p in sources(Event.RELEASE)]),
                                J.c.held_for == STOPPED)
        if owner != EVERYONE:
            stmt = stmt.where(J.c.owner == owner)
        if remaining:
            stmt = stmt.where(J.c.owner.not_in(remaining))
        rows = conn.execute(stmt.values(phase=target(Event.RELEASE).value, held_for=None)
                            .returning(J.c.id, J.c.owner, J.c.batch_id)).all()
        self._record_many(conn, [Change(job_id, service, job_owner, _HELD, _QUEUED, batch_id)
                                 for job_id, job_owner, batch_id in rows])
        for job_id, _, _ in rows:
            self._announce(conn, job_id)
        return [job_id for job_id, _, _ in rows]

    def run_job(self, job_id: str, service: str, owner: str) -> Phase | None:
        """PHASE=RUN of ``owner``'s job, decided in the transaction that reads the holds:
        PENDING -> QUEUED, or HELD while a hold applies to the owner; a job HELD by
        no hold that still applies -> QUEUED.  The phase it moved to, or None when
        it did not move (not PENDING or HELD, still held, or no such job)."""
        with writing(self.engine) as conn:
            change = self._run_move(conn, job_id, service, owner)
            if change is not None:
                self._record(conn, change)
        if change is None:
            return None
        log_change(change)
        self._changed(job_id)
        return Phase(change.new)

    def _run_move(self, conn: sa.Connection, job_id: str, service: str,
                  owner: str) -> Change | None:
        """:meth:`run_job`'s move in ``conn``'s transaction, not yet recorded: the
        change to record (the caller then calls _changed after its commit), or None."""
        key = {"_service": service, "_owner": owner, "_id": job_id}
        if conn.dialect.name == "postgresql":   # holds, then the job: as a release does
            held, rows = together(conn, [(_APPLYING_SHARED, key), (_LOCK_JOB_FOR_UPDATE, key)])
        else:
            # The write lock first: pysqlite runs a SELECT made before any write
            # outside the transaction, where a release could slip in after it.
            rows = _LOCK_JOB_BY_WRITE.run(conn, key)
            held = _APPLYING_IN.rows(conn, key)
        if not rows:
            return None
        phase, held_for, batch_id = rows[0]
        event = _run_event(Phase(phase), held_for, bool(held))
        if event is None:
            return None
        _RUN_MOVES[event].run(conn, key)
        self._announce(conn, job_id)
        return Change(job_id, service, owner, phase, target(event).value, batch_id)

    def held_because(self, job_id: str) -> tuple[str | None, str | None]:
        """Why a HELD job is held: (QUOTA or STOPPED or None, the hold's reason)."""
        with reading(self.engine) as conn:
            row = conn.execute(sa.select(J.c.service, J.c.owner, J.c.held_for)
                               .where(J.c.id == job_id)).first()
            if row is None or row.held_for != STOPPED:
                return (row.held_for if row else None), None
            holds = conn.execute(_APPLYING, {"_service": row.service, "_owner": row.owner}).all()
        reasons = sorted(holds, key=lambda h: h.owner == EVERYONE)     # the owner's own first
        return STOPPED, (reasons[0].reason if reasons else None)

    # -- quota holds ------------------------------------------------------------------------

    def hold_for_quota(self, service: str, owner: str, cap: int) -> list[str]:
        """Hold the owner's QUEUED jobs due now if it runs ``cap`` jobs or more
        (counted under the running jobs' locks, so an end committing meanwhile is
        seen); their ids."""
        params = {"_service": service, "_owner": owner}
        with writing(self.engine) as conn:
            self._serialise_owner(conn, service, owner)     # as the owner's claims
            running = conn.execute(_LOCK_RUNNING[conn.dialect.name == "postgresql"],
                                   params).all()
            if len(running) < cap:
                return []
            held = conn.execute(_HOLD_QUEUED, {**params, "now": timeutil.now()}).all()
            self._record_many(conn, [Change(job_id, service, owner, _QUEUED, _HELD, batch_id)
                                     for job_id, batch_id in held])
            for job_id, _ in held:
                self._announce(conn, job_id)
        for job_id, _ in held:
            self._changed(job_id)
        return [job_id for job_id, _ in held]

    def release_stragglers(self, services: list[str],
                           running_cap: Callable[[str, str], int] | None) -> list[str]:
        """Queue again the quota-held jobs of owners now under their cap (the cap was
        raised or removed, their running jobs went without a trace, or the process
        that ended one died before releasing); their ids."""
        with reading(self.engine) as conn:
            held = conn.execute(_QUOTA_HELD, {"services": services}).all()
            if not held:
                return []
            running = {(s, o): n for s, o, n in conn.execute(_RUNNING, {"services": services})}
        released = []
        for service, owner, waiting in held:
            cap = running_cap(service, owner) if running_cap else 0
            free = waiting if not cap else min(waiting, cap - running.get((service, owner), 0))
            if free > 0:
                released += self._release_some(service, owner, free)
        return released

    def _release_some(self, service: str, owner: str, count: int) -> list[str]:
        """Queue again the owner's first ``count`` quota-held jobs, in one statement
        (their counters then bumped once, in key order); their ids."""
        with writing(self.engine) as conn:
            rows = conn.execute(_RELEASE_SOME, {"_service": service, "_owner": owner,
                                                "_n": count, "now": timeutil.now()}).all()
            self._record_many(conn, [Change(job_id, service, owner, _HELD, _QUEUED, batch_id)
                                     for job_id, batch_id in rows])
            for job_id, _ in rows:
                self._announce(conn, job_id)
        for job_id, _ in rows:
            self._changed(job_id)
        return [job_id for job_id, _ in rows]

    def note_freed_slot(self, conn: sa.Connection, change: Change) -> None:
        """Change hook: a running job that ends, is queued again or is deleted frees
        a slot for its owner, released by :meth:`release_freed_slot` after the commit,
        if the owner has a quota-held job to take it.  Every change of the job sets or
        clears its note, so a change rolled back leaves none behind that a later one
        would act on."""
        if change.old == _EXECUTING and change.new in _SLOT_FREED and _quota_held(conn, change):
            self._freed_slots[change.job_id] = (change.service, change.owner)
        else:
            self._freed_slots.pop(change.job_id, None)

    def release_freed_slot(self, job_id: str) -> None:
        """After the commit of a change of ``job_id`` (see :meth:`note_freed_slot`):
        queue again the first quota-held job of its owner, if the change freed a slot.
        Should this fail, the release sweep makes up for it."""
        freed = self._freed_slots.pop(job_id, None)
        if freed is None:
            return
        try:
            self._release_some(*freed, 1)
        except sa.exc.SQLAlchemyError:
            log.exception("job %s: cannot release a quota-held job in its slot", job_id)


def _quota_held(conn: sa.Connection, change: Change) -> bool:
    """Whether the owner of a job leaving EXECUTING has quota-held jobs, read in that
    change's transaction (most owners have none: their end then costs no release).
    None can be held after this read and before the commit: a quota hold counts the
    running jobs under their locks (after SQLite's one write lock, which this
    transaction holds), so it waits for this change and sees the slot free."""
    return bool(_ANY_QUOTA_HELD.rows(conn, {"_service": change.service,
                                            "_owner": change.owner}))


def hold_applies(conn: sa.Connection, service: str, owner: str) -> bool:
    """Whether an administrative hold applies to ``owner``'s jobs of ``service``, read
    as :meth:`HoldQueries.run_job` reads it (FOR SHARE on PostgreSQL: take it before
    the jobs' locks; on SQLite after the write lock)."""
    read = _APPLYING_SHARED if conn.dialect.name == "postgresql" else _APPLYING_IN
    return bool(read.rows(conn, {"_service": service, "_owner": owner}))


def _run_move(event: Event) -> sa.Update:
    """The UPDATE of a PHASE=RUN that makes ``event``: the row is locked, so its phase
    is as read; the sources are checked anyway."""
    new = target(event)
    return (J.update()
            .where(_THE_JOB, J.c.phase.in_([sa.literal(p.value) for p in sources(event)]))
            .values(phase=new.value, held_for=STOPPED if new is Phase.HELD else None))


# run directly (uws.store.direct): every creation with PHASE=RUN runs them
_RUN_MOVES = {event: DirectWrite(_run_move(event)) for event in (Event.RUN, Event.RUN_HELD)}
_APPLYING_IN = ReadIn(_APPLYING)
_APPLYING_SHARED = ReadIn(_APPLYING.with_for_update(read=True))


def _run_event(phase: Phase, held_for: str | None, hold_applies: bool) -> Event | None:
    """What PHASE=RUN does to a job in ``phase``: an event of uws.domain.phases, or None."""
    if phase is Phase.PENDING:
        return Event.RUN_HELD if hold_applies else Event.RUN
    if phase is Phase.HELD and held_for != QUOTA and not hold_applies:
        return Event.RUN        # its hold has gone
    return None
