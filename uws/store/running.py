"""Queries of the execution side: claiming queued jobs, leases, deadlines,
destruction and quotes.  Mixed into Store, which provides ``engine``,
``_announce``, ``_changed`` and ``_serialise_owner``."""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable

import sqlalchemy as sa

from ..domain import phases, timeutil
from ..domain.model import Claim, ErrorSummary, LeaseState
from ..domain.phases import Event, Phase
from . import counts, direct, usage
from .changes import Change, Times, log_change
from .connections import Readers, reading, writing
from .part import StorePart
from .tables import attempt as A
from .tables import job as J
from .tables import job_count as C
from .tables import result as R


class _OverCap(Exception):
    """Rolls back a claim that would take an owner past its running cap."""


_SERVICES: sa.BindParameter = sa.bindparam("services", expanding=True)


def due(table) -> sa.ColumnElement[bool]:
    """A queued job that may start now (no STARTAFTER or backoff in the future)."""
    return sa.or_(table.c.start_after.is_(None), table.c.start_after <= sa.bindparam("now"))


def _queued_owners(services: int) -> sa.Select:
    """Each owner with queued jobs in the services given as parameters ``service_0``,
    ``service_1``, ... (plain ones, which the driver runs directly: an expanding IN it
    cannot; an executor's services never change): the best priority of its jobs due and
    the creation of its oldest, by its counters.

    Each is one index seek (ix_uws_job_claim, ix_uws_job_phase), so a claim costs the
    same with a million jobs stored as with none.  What it still walks: the QUEUED
    counter rows of the service (every owner that ever queued a job there keeps one per
    slot, at 0) and an owner's queued jobs not yet due (STARTAFTER, backoff).  The
    counters are exact (uws.store.counts): one that drifted (a process of a version
    before them changed jobs) hides queued jobs from claims until ``uws db recount``."""
    owners = (sa.select(C.c.service, C.c.owner)
              .where(C.c.phase == Phase.QUEUED.value,
                     C.c.service.in_([sa.bindparam(f"service_{i}") for i in range(services)]))
              .group_by(C.c.service, C.c.owner).having(sa.func.sum(C.c.n) > 0)
              .subquery("owners"))
    return sa.select(owners.c.service, owners.c.owner,
                     _first_due(owners, _head.c.priority, _head.c.priority.desc()),
                     _first_due(owners, _head.c.creation_time, _head.c.creation_time))


_head = J.alias("head")


def _first_due(owners, column: sa.ColumnElement, order: sa.ColumnElement) -> sa.ScalarSelect:
    return (sa.select(column)
            .where(_head.c.phase == Phase.QUEUED.value, _head.c.service == owners.c.service,
                   _head.c.owner == owners.c.owner, due(_head))
            .order_by(order).limit(1).scalar_subquery())


_RUNNING_OWNERS = (sa.select(J.c.service, J.c.owner, sa.func.count())
                   .where(J.c.phase == Phase.EXECUTING.value, J.c.service.in_(_SERVICES))
                   .group_by(J.c.service, J.c.owner))
_RUNNING_OF = sa.select(sa.func.count()).where(
    J.c.phase == Phase.EXECUTING.value, J.c.service == sa.bindparam("service"),
    J.c.owner == sa.bindparam("owner"))
_candidate = J.alias("candidate")
_CLAIM = direct.DirectWrite(
    J.update()
    .where(J.c.id == (sa.select(_candidate.c.id)
                      .where(_candidate.c.phase == Phase.QUEUED.value,
                             _candidate.c.service == sa.bindparam("of_service"),
                             _candidate.c.owner == sa.bindparam("of_owner"),
                             due(_candidate))
                      .order_by(_candidate.c.priority.desc(),
                                _candidate.c.creation_time, _candidate.c.id)
                      .limit(1).with_for_update(skip_locked=True).scalar_subquery()),
           J.c.phase == Phase.QUEUED.value)
    .values(phase=Phase.EXECUTING.value, lease_owner=sa.bindparam("worker"),
            lease_expires=sa.bindparam("expires"),
            # never before its creation: the claim may have waited for the lock
            # while this very job was being created
            start_time=sa.case((J.c.creation_time > sa.bindparam("now"),
                                J.c.creation_time), else_=sa.bindparam("now")))
    .returning(J.c.id, J.c.execution_duration, J.c.batch_id, J.c.creation_time,
               J.c.start_time))

# The statements the executor, its monitor and the sweeps run all the time, built once.
_SERVICE_OF = sa.select(J.c.service).where(J.c.id == sa.bindparam("_id"))
_RENEW = (J.update().where(J.c.id.in_(sa.bindparam("ids", expanding=True)),
                           J.c.lease_owner == sa.bindparam("worker"),
                           J.c.phase == Phase.EXECUTING.value)
          .values(lease_expires=sa.bindparam("expires")).returning(J.c.id))
_LEASES = sa.select(J.c.id, J.c.phase, J.c.lease_owner, J.c.start_time).where(
    J.c.id.in_(sa.bindparam("ids", expanding=True)))
_OVERDUE = sa.select(J.c.id).where(J.c.phase == Phase.EXECUTING.value,
                                   J.c.deadline <= sa.bindparam("now"))
_LEASED = sa.select(J.c.id, J.c.lease_owner, J.c.start_time, J.c.service).where(
    J.c.phase == Phase.EXECUTING.value, J.c.lease_owner.is_not(None),
    J.c.start_time.is_not(None))


def _claims(rows) -> list[tuple[Claim, str]]:
    return [(Claim(job_id, worker, started), service)
            for job_id, worker, started, service in rows]


_EXPIRED = (sa.select(J.c.id, J.c.service)
            .where(J.c.destruction <= sa.bindparam("now"), J.c.phase != Phase.ARCHIVED.value)
            .order_by(J.c.destruction).limit(sa.bindparam("limit")))
#: How much later than its claim's UPDATE a job's start may be found before the start
#: is written again (a claim that waited for the lock).
_LATE_START = dt.timedelta(milliseconds=10)
_STARTED = direct.DirectWrite(J.update().where(J.c.id == sa.bindparam("_id")).values(
    start_time=sa.bindparam("start_time"), deadline=sa.bindparam("deadline")))


class RunningQueries(StorePart):
    hold_for_quota: Callable[[str, str, int], list[str]]     # uws.store.holds
    _reads: dict[str, direct.DirectRead]                     # uws.store.jobs
    _claim_reads: dict[int, direct.DirectRead]     # by number of services, made when first used
    readers: Readers

    def archive(self, job_id: str) -> bool:
        """Finished -> ARCHIVED, dropping the result records in the same
        transaction, so no reader sees an archived job listing results."""
        with writing(self.engine) as conn:
            kept = usage.lock(conn, job_id)     # the bytes row before the job's, as delete_job
            row = counts.lock(conn, job_id, phases.sources(Event.ARCHIVE))
            won = row is not None
            if row is not None:
                conn.execute(J.update().where(J.c.id == job_id)
                             .values(phase=Phase.ARCHIVED.value))
                self._record(conn, Change(job_id, row.service, row.owner, row.phase,
                                          Phase.ARCHIVED.value, row.batch_id))
                # an archived job's bytes no longer count against its owner's quota
                usage.add(conn, row.service, row.owner, job_id, -(kept or 0))
                conn.execute(R.delete().where(R.c.job_id == job_id))
                self._announce(conn, job_id)
        if won:
            self._changed(job_id)
        return won

    def claim_next(self, worker: str, services: Iterable[str], lease_seconds: float,
                   running_cap: Callable[[str, str], int] | None = None) -> str | None:
        """The id of the job :meth:`claim` takes, or None."""
        claim = self.claim(worker, services, lease_seconds, running_cap)
        return claim.job_id if claim is not None else None

    def claim(self, worker: str, services: Iterable[str], lease_seconds: float,
              running_cap: Callable[[str, str], int] | None = None) -> Claim | None:
        """Move the next QUEUED job to EXECUTING for ``worker``; the claim, which
        fences the worker's writes about this attempt, or None.

        Fair across owners: of the owners with queued jobs in ``services``, the
        one whose best job has the highest priority goes first, then the one
        running fewest jobs, then the one waiting longest; that owner's next job
        (priority, then oldest) is claimed.  ``running_cap(service, owner)``
        (0 = none) bounds the jobs an owner runs at once in a service; an owner
        at its cap has its queued jobs HELD until one of its running jobs ends
        (see uws.store.holds).
        """
        services = list(services)
        heads = self._queued_heads(services)
        if not heads:
            return None
        caps = {(s, o): running_cap(s, o) if running_cap else 0 for s, o, _, _ in heads}
        running = {}
        if len(heads) > 1 or any(caps.values()):    # else nothing to weigh them by
            with reading(self.engine) as conn:
                running = dict(((s, o), n) for s, o, n in
                               conn.execute(_RUNNING_OWNERS, {"services": services}))
        order = sorted((-priority, running.get((service, owner), 0), oldest, service, owner)
                       for service, owner, priority, oldest in heads)
        for _, count, _, service, owner in order:
            cap = caps[(service, owner)]
            if cap and count >= cap:
                self.hold_for_quota(service, owner, cap)    # HELD until a slot frees
                continue
            claim = self._claim_of(worker, service, owner, lease_seconds, cap)
            if claim is not None:
                return claim
        return None

    def _queued_heads(self, services: list[str]) -> list:
        """(service, owner, best priority, oldest creation) of each owner with jobs due."""
        if not services:
            return []
        read = self._claim_reads.get(len(services))
        if read is None:
            read = self._claim_reads[len(services)] = direct.shared_read(
                self.engine, ("queued owners", len(services)),
                lambda: _queued_owners(len(services)))
        params: dict = {f"service_{i}": name for i, name in enumerate(services)}
        params["now"] = timeutil.now()
        with self.readers.cursor() as cur:
            return [head for head in read.rows(cur, params) if head[2] is not None]

    def _claim_of(self, worker: str, service: str, owner: str, lease_seconds: float,
                  cap: int) -> Claim | None:
        """Claim the owner's next queued job in the service, within its running cap.

        One UPDATE whose subquery picks the row: SQLite serialises writers, and
        PostgreSQL's ``FOR UPDATE SKIP LOCKED`` sends concurrent claimants to
        different rows, so no job is claimed twice.  With a cap, the owner's
        claims are serialised (as its creations are) and counted after the UPDATE,
        so concurrent claimants cannot overshoot it.
        """
        now = timeutil.now()
        expires = timeutil.add_seconds(now, lease_seconds)
        try:
            with writing(self.engine) as conn:
                if cap:
                    self._serialise_owner(conn, service, owner)
                rows = _CLAIM.run(conn, {"of_service": service, "of_owner": owner,
                                         "worker": worker, "expires": expires, "now": now})
                if not rows:
                    return None
                job_id, duration, batch_id, created, started = rows[0]
                # The clock read once the row is ours: the claim may have waited for
                # the lock while this job was being created or queued, and a job never
                # starts before either.  Most claims wait for nothing and keep the
                # start their UPDATE wrote.
                clock = max(timeutil.now(), created)
                if duration > 0 or clock - started > _LATE_START:
                    started = clock
                    _STARTED.run(conn, {"_id": job_id, "start_time": started,
                                        "deadline": timeutil.add_seconds(started, duration)
                                        if duration > 0 else None})
                change = Change(job_id, service, owner, Phase.QUEUED.value,
                                Phase.EXECUTING.value, batch_id, Times(created, started, None))
                self._record(conn, change)
                if cap and conn.execute(_RUNNING_OF, {"service": service,
                                                      "owner": owner}).scalar_one() > cap:
                    raise _OverCap
                self._announce(conn, job_id)
        except _OverCap:
            return None
        log_change(change, worker)
        self._changed(job_id)
        return Claim(job_id, worker, started)

    def count_queued(self, services: Iterable[str], older_than: float) -> int:
        """QUEUED jobs of ``services`` that were due to start (created, or their
        start time come) more than ``older_than`` seconds ago."""
        before = timeutil.add_seconds(timeutil.now(), -older_than)
        with reading(self.engine) as conn:
            return conn.execute(sa.select(sa.func.count()).where(
                J.c.phase == Phase.QUEUED.value, J.c.service.in_(list(services)),
                sa.func.coalesce(J.c.start_after, J.c.creation_time) <= before)).scalar_one()

    def count_due(self, services: Iterable[str], since: dt.datetime, until: dt.datetime) -> int:
        """QUEUED jobs of ``services`` whose start time came in (``since``, ``until``]."""
        with reading(self.engine) as conn:
            return conn.execute(sa.select(sa.func.count()).where(
                J.c.phase == Phase.QUEUED.value, J.c.service.in_(list(services)),
                J.c.start_after > since, J.c.start_after <= until)).scalar_one()

    def next_start(self, services: Iterable[str]) -> dt.datetime | None:
        """The earliest start time still to come of a QUEUED job of ``services``."""
        with reading(self.engine) as conn:
            return conn.execute(sa.select(sa.func.min(J.c.start_after)).where(
                J.c.phase == Phase.QUEUED.value, J.c.service.in_(list(services)),
                J.c.start_after > timeutil.now())).scalar()

    def retry_later(self, job_id: str, error: ErrorSummary, max_attempts: int | None,
                    backoff: Callable[[int], float], *, claim: Claim | None = None,
                    then: Callable[[], object] | None = None) -> bool:
        """EXECUTING -> QUEUED again after a transient failure, not to start before
        ``backoff(attempt)`` seconds; the attempt's error is kept, its results and
        progress dropped.  False (nothing changed) when the job is no longer
        EXECUTING (as ``claim`` left it, when given) or this was attempt
        ``max_attempts`` (None: no limit).  ``then`` runs before the commit, once the
        change is sure: what must be gone before another attempt can start."""
        with writing(self.engine) as conn:
            row = counts.lock(conn, job_id, {Phase.EXECUTING}, claim=claim)
            if row is None:
                return False
            attempt = conn.execute(sa.select(sa.func.count()).where(
                A.c.job_id == job_id)).scalar_one() + 1
            if max_attempts is not None and attempt >= max_attempts:
                return False
            if then is not None:
                then()
            now = timeutil.now()
            conn.execute(A.insert().values(job_id=job_id, attempt=attempt, end_time=now,
                                           error_type=error.type, error_message=error.message))
            conn.execute(J.update().where(J.c.id == job_id).values(
                phase=Phase.QUEUED.value, start_after=timeutil.add_seconds(now, backoff(attempt)),
                start_time=None, progress=None, progress_message=None, lease_owner=None,
                lease_expires=None, deadline=None))
            conn.execute(R.delete().where(R.c.job_id == job_id))
            change = Change(job_id, row.service, row.owner, row.phase, Phase.QUEUED.value,
                            row.batch_id)
            self._record(conn, change)
            self._announce(conn, job_id)
        log_change(change, claim.worker if claim is not None else None,
                   f"attempt {attempt} failed, retried: {error.message}")
        self._changed(job_id)
        return True

    def renew_leases(self, worker: str, job_ids: Iterable[str], lease_seconds: float) -> set[str]:
        """Extend the leases ``worker`` still holds on ``job_ids``; the ids renewed (one
        missing ended, or was taken over by another worker after its lease expired)."""
        ids = list(job_ids)
        if not ids:
            return set()
        expires = timeutil.add_seconds(timeutil.now(), lease_seconds)
        with writing(self.engine) as conn:
            return set(conn.execute(_RENEW, {"ids": ids, "worker": worker,
                                             "expires": expires}).scalars())

    def lease_states(self, job_ids: Iterable[str]) -> dict[str, LeaseState]:
        """(phase, lease owner, start time) of each existing job of ``job_ids``:
        whether an attempt still holds the job it runs (one read by primary key)."""
        ids = list(job_ids)
        if not ids:
            return {}
        with reading(self.engine) as conn:
            return {job_id: (Phase(phase), owner, started)
                    for job_id, phase, owner, started in conn.execute(_LEASES, {"ids": ids})}

    def overdue_ids(self, now: dt.datetime) -> list[str]:
        """EXECUTING jobs past their execution-duration deadline."""
        with reading(self.engine) as conn:
            return list(conn.execute(_OVERDUE, {"now": now}).scalars())

    def lost_leases(self, now: dt.datetime) -> list[tuple[Claim, str]]:
        """(claim, service) of the EXECUTING jobs whose lease has expired: the claim
        fences their recovery (another sweep may recover one first)."""
        with reading(self.engine) as conn:
            return _claims(conn.execute(_LEASED.where(J.c.lease_expires < now)))

    def leases_of(self, worker_prefix: str) -> list[tuple[Claim, str]]:
        """(claim, service) of the EXECUTING jobs leased by workers named with a prefix."""
        with reading(self.engine) as conn:
            return _claims(conn.execute(_LEASED.where(
                J.c.lease_owner.startswith(worker_prefix, autoescape=True))))

    def queue_position(self, job_id: str, service: str) -> int:
        """How many QUEUED jobs of the service, due now, run before this one."""
        me = sa.select(J.c.priority, J.c.creation_time).where(J.c.id == job_id).subquery()
        stmt = sa.select(sa.func.count()).select_from(J.join(me, sa.true())).where(
            J.c.service == service, J.c.phase == Phase.QUEUED.value, due(J),
            sa.or_(J.c.priority > me.c.priority,
                   sa.and_(J.c.priority == me.c.priority,
                           J.c.creation_time < me.c.creation_time)))
        with reading(self.engine) as conn:
            return conn.execute(stmt, {"now": timeutil.now()}).scalar_one()

    def recent_run_seconds(self, service: str, limit: int = 20) -> list[float]:
        """Run times of the service's completed jobs created last (for quotes).

        By creation, not by end: the service's jobs are walked newest first along
        ix_uws_job_all until ``limit`` completed ones are found, where sorting them
        all by their end took 0.44 s with 10^6 stored."""
        with reading(self.engine) as conn:
            rows = conn.execute(sa.select(J.c.start_time, J.c.end_time).where(
                J.c.service == service, J.c.phase == Phase.COMPLETED.value,
                J.c.start_time.is_not(None), J.c.end_time.is_not(None))
                .order_by(J.c.creation_time.desc()).limit(limit)).all()
        return [(end - start).total_seconds() for start, end in rows]

    def expired(self, now: dt.datetime, limit: int = 500) -> list[tuple[str, str]]:
        """(id, service) of jobs whose destruction time has come (archived ones excluded)."""
        with reading(self.engine) as conn:
            return [tuple(r) for r in conn.execute(_EXPIRED, {"now": now, "limit": limit})]

    def service_of(self, job_id: str) -> str | None:
        read = self._reads.get("service")
        if read is None:    # read directly: the executor asks twice per job
            read = self._reads["service"] = direct.shared_read(self.engine, "service of",
                                                               _SERVICE_OF)
        with self.readers.cursor() as cur:
            rows = read.rows(cur, {"_id": job_id})
        return rows[0][0] if rows else None
