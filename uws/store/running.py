"""Queries of the execution side: claiming queued jobs, leases, deadlines,
destruction and quotes.  Mixed into Store, which provides ``engine`` and
``_changed``."""
from __future__ import annotations

import datetime as dt
from typing import Iterable

import sqlalchemy as sa

from .. import phases, timeutil
from ..phases import Event, Phase
from .tables import job as J, result as R


class RunningQueries:
    def archive(self, job_id: str) -> bool:
        """Finished -> ARCHIVED, dropping the result records in the same
        transaction, so no reader sees an archived job listing results."""
        with self.engine.begin() as conn:
            won = conn.execute(J.update().where(
                J.c.id == job_id, J.c.phase.in_([p.value for p in phases.sources(Event.ARCHIVE)]))
                .values(phase=Phase.ARCHIVED.value)).rowcount == 1
            if won:
                conn.execute(R.delete().where(R.c.job_id == job_id))
        if won:
            self._changed(job_id)
        return won

    def claim_next(self, worker: str, services: Iterable[str],
                   lease_seconds: float) -> str | None:
        """Move the next QUEUED job (priority, then oldest) to EXECUTING for ``worker``.

        One UPDATE whose subquery picks the row: SQLite serialises writers, and
        PostgreSQL's ``FOR UPDATE SKIP LOCKED`` sends concurrent claimants to
        different rows, so every claimant gets a job while any is left, and no
        job is claimed twice.
        """
        q = J.alias("candidate")
        pick = (sa.select(q.c.id).where(q.c.phase == Phase.QUEUED.value,
                                        q.c.service.in_(list(services)))
                .order_by(q.c.priority.desc(), q.c.creation_time, q.c.id).limit(1)
                .with_for_update(skip_locked=True).scalar_subquery())
        expires = timeutil.add_seconds(timeutil.now(), lease_seconds)
        claim = (J.update().where(J.c.id == pick, J.c.phase == Phase.QUEUED.value)
                 .values(phase=Phase.EXECUTING.value, lease_owner=worker, lease_expires=expires)
                 .returning(J.c.id, J.c.execution_duration))
        with self.engine.begin() as conn:
            row = conn.execute(claim).first()
            if row is None:
                return None
            job_id, duration = row
            # Read the clock only now that the row is ours: the claim may have
            # waited for the lock while this very job was being created.
            now = timeutil.now()
            deadline = timeutil.add_seconds(now, duration) if duration > 0 else None
            conn.execute(J.update().where(J.c.id == job_id).values(
                start_time=now, deadline=deadline))
        self._changed(job_id)
        return job_id

    def renew_leases(self, worker: str, job_ids: Iterable[str], lease_seconds: float) -> None:
        ids = list(job_ids)
        if not ids:
            return
        expires = timeutil.add_seconds(timeutil.now(), lease_seconds)
        with self.engine.begin() as conn:
            conn.execute(J.update().where(J.c.id.in_(ids), J.c.lease_owner == worker,
                                          J.c.phase == Phase.EXECUTING.value)
                         .values(lease_expires=expires))

    def overdue_ids(self, now: dt.datetime) -> list[str]:
        """EXECUTING jobs past their execution-duration deadline."""
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(J.c.id).where(
                J.c.phase == Phase.EXECUTING.value, J.c.deadline <= now)).scalars())

    def lost_leases(self, now: dt.datetime) -> list[tuple[str, str, str | None]]:
        """(id, service, lease owner) of EXECUTING jobs whose lease has expired."""
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.select(J.c.id, J.c.service, J.c.lease_owner)
                    .where(J.c.phase == Phase.EXECUTING.value, J.c.lease_expires < now))]

    def leases_of(self, worker_prefix: str) -> list[tuple[str, str, str]]:
        """(id, service, lease owner) of EXECUTING jobs leased by workers named with a prefix."""
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.select(J.c.id, J.c.service, J.c.lease_owner)
                    .where(J.c.phase == Phase.EXECUTING.value,
                           J.c.lease_owner.startswith(worker_prefix, autoescape=True)))]

    def queue_position(self, job_id: str, service: str) -> int:
        """How many QUEUED jobs of the service run before this one."""
        me = sa.select(J.c.priority, J.c.creation_time).where(J.c.id == job_id).subquery()
        stmt = sa.select(sa.func.count()).select_from(J.join(me, sa.true())).where(
            J.c.service == service, J.c.phase == Phase.QUEUED.value,
            sa.or_(J.c.priority > me.c.priority,
                   sa.and_(J.c.priority == me.c.priority,
                           J.c.creation_time < me.c.creation_time)))
        with self.engine.connect() as conn:
            return conn.execute(stmt).scalar_one()

    def recent_run_seconds(self, service: str, limit: int = 20) -> list[float]:
        """Run times of the service's latest completed jobs (for quotes)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(J.c.start_time, J.c.end_time).where(
                J.c.service == service, J.c.phase == Phase.COMPLETED.value,
                J.c.start_time.is_not(None), J.c.end_time.is_not(None))
                .order_by(J.c.end_time.desc()).limit(limit)).all()
        return [(end - start).total_seconds() for start, end in rows]

    def expired(self, now: dt.datetime, limit: int = 500) -> list[tuple[str, str]]:
        """(id, service) of jobs whose destruction time has come (archived ones excluded)."""
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(
                sa.select(J.c.id, J.c.service).where(J.c.destruction <= now,
                                                     J.c.phase != Phase.ARCHIVED.value)
                .order_by(J.c.destruction).limit(limit))]

    def service_of(self, job_id: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(J.c.service).where(J.c.id == job_id)).scalar()
