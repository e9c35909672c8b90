"""Phase changes of a job, and the properties a phase allows to change.

Each phase change is one conditional UPDATE (``WHERE phase IN (...)``) that sets
exactly the fields its event names, so a race is decided by the database the same
way in one process or on many; counters, hooks and notifications follow in the same
transaction (:meth:`Store._record`).
"""
from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable, Sequence

import sqlalchemy as sa

from ..domain import phases, timeutil
from ..domain.model import Claim, ErrorSummary, Result
from ..domain.phases import Event, Phase
from . import counts, usage
from .changes import Change, Times, log_change
from .connections import reading, writing
from .direct import DirectWrite
from .events import EVENTS_KEY, ProgressThrottle, record_progress
from .part import StorePart
from .tables import job as J


class JobChanges(StorePart):
    progress_events: ProgressThrottle       # uws.store.jobs

    # -- phase changes: one method per event of the table in uws.domain.phases ----
    # Each sets exactly the fields it names, in the same conditional UPDATE that
    # checks the job is in one of the event's source phases; True if this call won.
    # A worker recording its attempt gives its ``claim``: the change is then made
    # only while the job still runs as that claim left it (a worker resumed after a
    # pause past its lease, whose job another worker took over meanwhile, changes
    # nothing).

    def mark_queued(self, job_id: str, owner: str | None = None) -> bool:
        """PENDING or HELD -> QUEUED (a client's PHASE=RUN)."""
        return self._apply(job_id, Event.RUN, {}, owner)

    def mark_executing(self, job_id: str) -> bool:
        """QUEUED -> EXECUTING, started now (executors use :meth:`claim_next`)."""
        return self._apply(job_id, Event.START, {"start_time": timeutil.now()})

    def mark_completed(self, job_id: str, stored_bytes: int | None = None,
                       results: Sequence[Result] = (), *,
                       claim: Claim | None = None) -> bool:
        """EXECUTING -> COMPLETED, at 100 percent; with ``stored_bytes``, what the job
        keeps on disk, and its ``results`` not yet recorded, are recorded in the same
        transaction (one commit, not two or more, for every job that ends well).
        False, recording none of them, if the job was no longer EXECUTING."""
        return self._apply(job_id, Event.COMPLETE, {**_ended(), "progress": 100.0},
                           stored_bytes=stored_bytes, results=results, claim=claim)

    def mark_failed(self, job_id: str, error: ErrorSummary, *,
                    claim: Claim | None = None) -> bool:
        """Not yet finished -> ERROR, with its error summary."""
        return self._apply(job_id, Event.FAIL, {**_ended(), **_error_fields(error)},
                           claim=claim)

    def mark_aborted(self, job_id: str, owner: str | None = None,
                     reason: ErrorSummary | None = None) -> bool:
        """Not yet finished -> ABORTED; ``reason`` when the system aborted it
        (execution duration exceeded, destruction time reached)."""
        fields = {**_ended(), **(_error_fields(reason) if reason else {})}
        return self._apply(job_id, Event.ABORT, fields, owner)

    def mark_held(self, job_id: str) -> bool:
        """PENDING or QUEUED -> HELD."""
        return self._apply(job_id, Event.HOLD, {})

    def mark_suspended(self, job_id: str) -> bool:
        """EXECUTING -> SUSPENDED."""
        return self._apply(job_id, Event.SUSPEND, {})

    def requeue(self, job_id: str, *, claim: Claim | None = None) -> bool:
        """EXECUTING -> QUEUED again (its worker was lost), as if never started."""
        return self._apply(job_id, Event.REQUEUE, {
            "start_time": None, "progress": None, "progress_message": None,
            "lease_owner": None, "lease_expires": None, "deadline": None}, claim=claim)

    def _apply(self, job_id: str, event: Event, fields: dict, owner: str | None = None, *,
               stored_bytes: int | None = None, results: Sequence[Result] = (),
               claim: Claim | None = None) -> bool:
        new = phases.target(event).value
        values = {"phase": new, **fields}
        columns, scoped = tuple(sorted(values)), owner is not None
        shape = (columns, scoped, claim is not None)
        params = {**values, "_id": job_id, "_owner": owner, **counts.fence(claim)}
        sources = phases.sources(event)
        with writing(self.engine) as conn:
            # the bytes row before the job's, as a deletion takes them
            kept = usage.lock(conn, job_id) if stored_bytes is not None else None
            if len(sources) == 1:
                (old,) = (p.value for p in sources)
                rows = _direct_transition(event, *shape).run(conn, params)
                if not rows:
                    return False
                service, of_owner, batch_id, created, started, ended = rows[0]
                # as they are now: the histograms need not read them
                change = Change(job_id, service, of_owner, old, new, batch_id,
                                Times(created, started, ended))
            else:   # which source phase it leaves, read under the row's lock
                row = counts.lock(conn, job_id, sources, owner, claim)
                if row is None:
                    return False
                conn.execute(_transition_statement(event, columns, scoped, False),
                             params).close()     # the row is locked: fenced above
                change = Change(job_id, row.service, row.owner, row.phase, new, row.batch_id)
            self._record(conn, change)
            if stored_bytes is not None:    # a job in any phase but ARCHIVED: counted
                usage.put(conn, job_id, kept, stored_bytes, service=change.service,
                          owner=change.owner, counted=new != Phase.ARCHIVED.value)
            for result in results:      # the job's row is locked by its change
                self._put_result(conn, job_id, result)
            self._announce(conn, job_id)
        log_change(change, claim.worker if claim is not None else None,
                   fields.get("error_message"))
        self._changed(job_id)
        return True

    # -- other properties, each while the phase allows it ---------------------------

    def set_execution_duration(self, job_id: str, seconds: int) -> bool:
        """While the job has not started; False otherwise."""
        return self._set_while(job_id, phases.NOT_STARTED, execution_duration=seconds)

    def set_destruction(self, job_id: str, when: dt.datetime, now: dt.datetime) -> bool:
        """While the job is not archived and its destruction time is after ``now``;
        False otherwise.  A time come is final: the sweep that destroys the job
        (uws.usecases.sweeps) may already have read it, and would destroy the job anyway."""
        not_due = sa.or_(J.c.destruction.is_(None), J.c.destruction > now)
        return self._set_while(job_id, set(Phase) - {Phase.ARCHIVED}, not_due,
                               destruction=when)

    def set_priority(self, job_id: str, priority: int, in_phases: Iterable[Phase]) -> bool:
        """While the job is in one of ``in_phases``; False otherwise."""
        return self._set_while(job_id, in_phases, priority=priority)

    def set_start_after(self, job_id: str, when: dt.datetime | None) -> bool:
        """While the job is PENDING; False otherwise."""
        return self._set_while(job_id, {Phase.PENDING}, start_after=when)

    def priorities_of(self, job_ids: Iterable[str], service: str,
                      owner: str | None) -> dict[str, int]:
        """The priorities of the service's jobs among ``job_ids`` (a page of a list)."""
        ids = list(job_ids)
        if not ids:
            return {}
        stmt = sa.select(J.c.id, J.c.priority).where(J.c.id.in_(ids), J.c.service == service)
        if owner is not None:
            stmt = stmt.where(J.c.owner == owner)
        with reading(self.engine) as conn:
            return {job_id: level for job_id, level in conn.execute(stmt)}

    def set_progress(self, job_id: str, percent: float | None, message: str | None, *,
                     claim: Claim | None = None) -> None:
        """While the job is EXECUTING (a late report of a finished job is dropped), as
        ``claim`` left it when given.  Logged as an event too, at most every few
        seconds per job."""
        stmt = J.update().where(J.c.id == job_id, J.c.phase == Phase.EXECUTING.value)
        if claim is not None:
            stmt = stmt.where(*counts.HELD_BY)
        stmt = (stmt.values(progress=percent, progress_message=message)
                .returning(J.c.service, J.c.owner))
        logged = False
        with writing(self.engine) as conn:
            row = conn.execute(stmt, counts.fence(claim)).first()
            if row is not None and self.progress_events.due(job_id):
                record_progress(conn, job_id, row.service, row.owner, percent)
                logged = True
        if logged:
            self._changed(EVENTS_KEY)

    def _set_while(self, job_id: str, in_phases: Iterable[Phase], *conditions,
                   **fields) -> bool:
        stmt = (J.update().where(J.c.id == job_id,
                                 J.c.phase.in_([p.value for p in in_phases]), *conditions)
                .values(**fields))
        with writing(self.engine) as conn:
            return conn.execute(stmt).rowcount == 1


@functools.lru_cache(maxsize=256)
def _transition_statement(event: Event, columns: tuple[str, ...], scoped: bool,
                          fenced: bool):
    """The conditional UPDATE of one event, built once per set of columns it sets
    (``scoped``: to an owner; ``fenced``: to a claim, see counts.HELD_BY)."""
    return _update(J.c.phase.in_([p.value for p in phases.sources(event)]), columns,
                   scoped, fenced)


@functools.lru_cache(maxsize=256)
def _direct_transition(event: Event, columns: tuple[str, ...], scoped: bool,
                       fenced: bool) -> DirectWrite:
    """The same UPDATE of an event with one source phase, run directly (claiming,
    starting and completing every job)."""
    (source,) = phases.sources(event)
    return DirectWrite(_update(J.c.phase == source.value, columns, scoped, fenced))


def _update(from_phase, columns: tuple[str, ...], scoped: bool, fenced: bool):
    stmt = (J.update().where(J.c.id == sa.bindparam("_id"), from_phase)
            .values({c: sa.bindparam(c) for c in columns})
            .returning(*_RETURNED))
    if scoped:
        stmt = stmt.where(J.c.owner == sa.bindparam("_owner"))
    if fenced:
        stmt = stmt.where(*counts.HELD_BY)
    return stmt


#: What a phase change returns, for its change record and the duration histograms.
_RETURNED = (J.c.service, J.c.owner, J.c.batch_id, J.c.creation_time, J.c.start_time,
             J.c.end_time)


def _ended() -> dict:
    """The fields of a job that has stopped running: its end, and no lease left."""
    return {"end_time": timeutil.now(), "lease_owner": None, "lease_expires": None,
            "deadline": None}


def _error_fields(error: ErrorSummary) -> dict:
    return {"error_type": error.type, "error_message": error.message,
            "error_detail": error.detail}
