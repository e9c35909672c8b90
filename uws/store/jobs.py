"""Job storage: creating, reading and deleting jobs, owner-scoped; the Store is made
of this and of the query mixins beside it (phase changes in :mod:`.transitions`).

``owner`` arguments scope every query: a string is one owner ("" is the
anonymous owner); ``None`` means unscoped, for the system and administrators.
"""
from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import sqlalchemy as sa

from ..domain import timeutil
from ..domain.errors import OverQuota
from ..domain.model import Claim, ErrorSummary, Job, Parameter, Result
from ..domain.phases import Phase
from ..domain.services import Quota
from ..usecases.ports import ChangeSink
from . import batchcallbacks, callbacks, counts, direct, usage
from .changes import Change, ChangeHook, ChangeRecorder
from .connections import Readers, reading, writing
from .engine import checkpoint, create_schema, make_engine
from .events import EVENTS_KEY, EventQueries, ProgressThrottle, record
from .holds import HoldQueries
from .lists import ListQueries
from .notify import ChangeListener, announce
from .running import RunningQueries
from .stats import record_durations
from .tables import attempt as A
from .tables import job as J
from .tables import job_bytes as B
from .tables import job_callback as JC
from .tables import parameter as P
from .tables import result as R
from .transitions import JobChanges

_PHASE = {p.value: p for p in Phase}
#: serialises an owner's creations and claims within a service (PostgreSQL)
_OWNER_LOCK = direct.DirectWrite(
    sa.select(sa.func.pg_advisory_xact_lock(sa.bindparam("key", type_=sa.BigInteger))),
    returns=False)
#: what an owner keeps in a service, as its quota counts it: its jobs, its bytes (one
#: read, so one round trip on PostgreSQL)
_QUOTA_TOTALS = direct.ReadIn(sa.select(counts.shown_total(True).scalar_subquery(),
                                        usage.TOTAL.scalar_subquery()))
#: where a job read's part columns start (after the job's own and has_callback)
_PART = len(J.c) + 1


class Store(ChangeRecorder, JobChanges, HoldQueries, RunningQueries, ListQueries, EventQueries,
            callbacks.CallbackQueries):
    def __init__(self, url: str, pool_size: int = 16):
        self.url = url
        self.engine = make_engine(url, pool_size)
        self.listeners: list[Callable[[str], None]] = []
        self.listener: ChangeListener | None = None
        # See uws.store.changes.  The event log, the duration histograms and the
        # callback outbox (jobs' and batches') are kept in every process that changes
        # jobs (front ends, local and Celery workers).
        self.change_hooks: list[ChangeHook] = [record, record_durations, callbacks.enqueue,
                                               batchcallbacks.batch_ended]
        self.progress_events = ProgressThrottle()
        self._freed_slots = {}
        self.change_hooks.append(self.note_freed_slot)  # a running slot freed
        self._notifies = self.engine.dialect.name == "postgresql"
        create_schema(self.engine)
        self.readers = Readers(self.engine)
        self._reads = {name: direct.shared_read(self.engine, ("store", name), stmt)
                       for name, stmt in
                       (("any", _GET_ANY), ("owned", _GET_OWNED),
                        ("phase", _PHASE_ANY), ("owned phase", _PHASE_OWNED),
                        ("callback", callbacks.OUTCOME), ("bytes", _BYTES_OF),
                        ("last seq", _LAST_SEQ))}
        self._list_reads = {}
        self._claim_reads = {}

    def problem(self) -> str | None:
        """Why the database cannot be used now (it does not answer), or None."""
        try:
            with reading(self.engine) as conn:
                conn.execute(sa.text("SELECT 1"))
        except sa.exc.SQLAlchemyError as exc:
            return f"the database does not answer: {type(exc).__name__}"
        return None

    def checkpoint(self) -> None:
        """SQLite: move committed pages from the WAL into the database file, so that
        no commit has to (see :func:`uws.store.engine.checkpoint`)."""
        checkpoint(self.engine)

    def close(self) -> None:
        if self.listener is not None:
            self.listener.stop()
        self.readers.close()
        self.engine.dispose()

    def listen(self, sink: ChangeSink) -> None:
        """Push the changes other processes make to ``sink`` (PostgreSQL only:
        SQLite has no such channel, and ``sink`` keeps polling)."""
        if self._notifies and self.listener is None:
            self.listener = ChangeListener(self.engine, sink)
            self.listener.start()

    def _announce(self, conn: sa.Connection, job_id: str) -> None:
        """Within the transaction changing the job's phase (or deleting it): other
        processes hear of it at its commit, never of a rollback."""
        if self._notifies:
            announce(conn, job_id)

    def _changed(self, job_id: str) -> None:
        """After the commit: a running slot it freed is given to a held job, then
        this process's own listeners hear of it."""
        self.release_freed_slot(job_id)
        for listener in self.listeners:
            listener(job_id)

    # -- creation and reading -------------------------------------------------

    def insert_job(self, job: Job, quota: Quota = Quota(), stored_bytes: int = 0,
                   run: bool = False) -> Phase | None:
        """Store a new job, which keeps ``stored_bytes`` on disk (its uploads); with
        ``run``, then PHASE=RUN it in the same transaction (:meth:`run_job`: the
        phase it moved to is returned; None without ``run``).

        With a quota, :class:`OverQuota` (nothing stored) if its owner would then
        keep more jobs, or more bytes, in its service than the quota allows.  The
        sums run inside the inserting transaction after the owner's creations are
        serialised (SQLite's single writer, a PostgreSQL advisory lock), so
        concurrent creations cannot overshoot.  On PostgreSQL this relies on READ
        COMMITTED (the default): the sums' snapshot is taken after the lock.
        """
        limited = quota.jobs or quota.bytes
        with writing(self.engine) as conn:
            if limited:
                self._serialise_owner(conn, job.service, job.owner)
            _INSERT_JOB.run(conn, _job_row(job))
            if job.parameters:
                _INSERT_PARAMS.run(conn, _param_rows(job.id, job.parameters, 0))
            _INSERT_BYTES.run(conn, {"job_id": job.id, "bytes": stored_bytes})
            if job.callback_url is not None:
                callbacks.name(conn, job.id, job.callback_url)
            created = Change(job.id, job.service, job.owner, None, job.phase.value)
            ran = self._run_move(conn, job.id, job.service, job.owner) if run else None
            # Both changes' counters in one bump: PENDING's +1 and -1 cancel out, and
            # the one counter left is taken in the key order every writer keeps (a
            # PENDING counter held while taking HELD's would deadlock on PostgreSQL
            # with a batch run under a hold, which takes HELD's, then PENDING's).
            self._record_many(conn, [created] if ran is None else [created, ran])
            usage.add(conn, job.service, job.owner, job.id, stored_bytes)
            if limited:
                jobs, kept = _QUOTA_TOTALS.rows(conn, {"service": job.service,
                                                       "owner": job.owner})[0]
                if quota.jobs and int(jobs) > quota.jobs:     # int(): PostgreSQL's NUMERIC
                    raise OverQuota("jobs", quota.jobs)
                if quota.bytes and int(kept) > quota.bytes:
                    raise OverQuota("bytes", quota.bytes)
        self._changed(EVENTS_KEY)       # event streams follow creations too
        if ran is None:
            return None
        self._changed(job.id)
        return Phase(ran.new)

    def stored_bytes(self, service: str, owner: str) -> int:
        """The bytes an owner's jobs keep on disk in a service, as last measured."""
        with reading(self.engine) as conn:
            return usage.total(conn, service, owner)

    def set_stored_bytes(self, job_id: str, size: int) -> None:
        """Record what a job keeps on disk now (after a change of its files)."""
        with self.readers.cursor() as cur:      # unchanged (a job that wrote nothing): no write
            kept = self._reads["bytes"].rows(cur, {"id": job_id})
        if kept and kept[0][0] == size:
            return
        with writing(self.engine) as conn:
            before = usage.lock(conn, job_id)
            owned = conn.execute(_OWNED_BY, {"_id": job_id}).first()
            if owned is None:
                return      # deleted meanwhile: its bytes went with it
            usage.put(conn, job_id, before, size, service=owned.service, owner=owned.owner,
                      counted=owned.phase != Phase.ARCHIVED.value)   # archived: not counted

    def _serialise_owner(self, conn, service: str, owner: str) -> None:
        if self.engine.dialect.name == "postgresql":
            digest = hashlib.sha256(f"{service}\0{owner}".encode()).digest()
            key = int.from_bytes(digest[:8], "big", signed=True)
            # nothing to read: in a pipeline, the statements after it wait for the
            # lock on the server, not for its answer here
            _OWNER_LOCK.run(conn, {"key": key})
        # SQLite needs nothing: the INSERT already holds its only write lock.

    def get_job(self, job_id: str, service: str, owner: str | None) -> Job | None:
        key = {"id": job_id, "service": service, "owner": owner}
        read = self._reads["any" if owner is None else "owned"]
        with self.readers.cursor() as cur:
            rows = read.rows(cur, key)
            if not rows or rows[0][_PART] != -1:
                return None     # no such job (another owner's parts, if any, unused)
            row = dict(zip(read.names, rows[0]))
            named = self._reads["callback"].mappings(cur, key) if row["has_callback"] else []
        parts = [r[_PART:] for r in rows[1:]]
        params = [(a, b, flag) for part, _, a, b, flag, _, _ in parts if part == 0]
        results = [(a, b, mime, size) for part, _, a, b, _, mime, size in parts if part == 1]
        job = _job(row, params, results)
        job.past_errors = [ErrorSummary(a, b) for part, _, a, b, _, _, _ in parts if part == 2]
        if named:
            job.callback = callbacks.outcome(named[0])
            job.callback_url = job.callback.url
        return job

    def owner_of(self, job_id: str, service: str) -> str | None:
        """The owner of a job, or None if there is no such job (for 403 vs 404)."""
        with reading(self.engine) as conn:
            return conn.execute(_GET_OWNER, {"id": job_id, "service": service}).scalar()

    def phase_of(self, job_id: str, service: str, owner: str | None) -> Phase | None:
        """The job's phase if it exists in ``service`` for ``owner`` (one indexed read)."""
        key = {"id": job_id, "service": service, "owner": owner}
        with self.readers.cursor() as cur:
            rows = self._reads["phase" if owner is None else "owned phase"].rows(cur, key)
        return _PHASE[rows[0][0]] if rows else None

    def phases_of(self, job_ids: Iterable[str]) -> dict[str, Phase]:
        """Current phases of existing jobs (the WAIT poller's one query)."""
        ids = list(job_ids)
        if not ids:
            return {}
        with reading(self.engine) as conn:
            return {job_id: _PHASE[phase] for job_id, phase in conn.execute(_PHASES, {"ids": ids})}

    def recount_jobs(self) -> None:
        """Rebuild the job counters from the jobs (see :func:`counts.recount`)."""
        with writing(self.engine) as conn:
            counts.recount(conn)
            usage.recount(conn)

    def set_parameters(self, job_id: str, replace: set[str], params: list[Parameter],
                       run_id: str | None = None,
                       then: Callable[[], None] | None = None) -> bool:
        """While PENDING: drop the named parameters, then add ``params`` (and set
        the run id when one is given).  ``then`` runs before the commit, the job's
        row locked: what must happen with the change or not at all (its error rolls
        the change back), and before the job can start."""
        fields = {"phase": Phase.PENDING.value}
        if run_id is not None:
            fields["run_id"] = run_id
        with writing(self.engine) as conn:
            # The UPDATE takes the row's write lock and checks the phase in one
            # step, so a concurrent RUN cannot slip in between.
            locked = conn.execute(J.update().where(
                J.c.id == job_id, J.c.phase == Phase.PENDING.value).values(
                **fields)).rowcount == 1
            if not locked:
                return False
            if replace:
                conn.execute(P.delete().where(P.c.job_id == job_id, P.c.name.in_(replace)))
            if params:      # numbered after the job's others (a RUNID alone adds none)
                start = conn.execute(sa.select(sa.func.coalesce(sa.func.max(P.c.seq), -1))
                                     .where(P.c.job_id == job_id)).scalar_one() + 1
                conn.execute(P.insert(), _param_rows(job_id, params, start))
            if then is not None:
                then()
        return True

    def delete_job(self, job_id: str, service: str | None = None,
                   owner: str | None = None) -> bool:
        """Forget a job (scoped to its service and owner when given); True if it existed."""
        stmt = _DELETES[service is not None, owner is not None]
        with writing(self.engine) as conn:
            # The job's bytes row locked before it goes with the job's: parameters,
            # results and bytes go with it (ON DELETE CASCADE; SQLite's foreign_keys
            # pragma is on for every connection).  Sent together: one round trip.
            locked, rows = direct.together(conn, [
                usage.locking(job_id), (stmt, {"id": job_id, "service": service, "owner": owner})])
            kept = usage.kept(locked)
            gone = bool(rows)
            if gone:
                of_service, of_owner, phase, batch_id = rows[0]
                self._record(conn, Change(job_id, of_service, of_owner, phase, None, batch_id))
                if phase != Phase.ARCHIVED.value:   # its bytes left the total then
                    usage.add(conn, of_service, of_owner, job_id, -(kept or 0))
                self._announce(conn, job_id)
        if gone:
            self._changed(job_id)
        return gone

    def add_result(self, job_id: str, res: Result, *, claim: Claim | None = None) -> bool:
        """Record a result while the job exists, has started and is not archived (one
        queued again for another attempt gets no result of the attempt before); with
        ``claim``, while the job's attempt is that claim's, running or ended (one
        aborted while it ran keeps what it reported; one taken over by another
        worker's attempt gets none of this one's)."""
        with writing(self.engine) as conn:
            # Lock the job row first: a result never outlives a deleted job.
            lock = _LOCK_STARTED if claim is None else _LOCK_ATTEMPT
            if not lock.run(conn, {"_id": job_id, **counts.fence(claim)}):
                return False
            self._put_result(conn, job_id, res)
        return True

    def _put_result(self, conn: sa.Connection, job_id: str, res: Result) -> None:
        """Record a result of the job, whose row ``conn`` has locked, after the others
        (one of the same name replaced)."""
        key = {"_id": job_id, "_result": res.id}
        _DROP_RESULT.run(conn, key)
        seq = direct.read_in(conn, self._reads["last seq"], key)[0][0] + 1
        _INSERT_RESULT.run(conn, {"job_id": job_id, "id": res.id, "seq": seq,
                                  "path": res.path, "mime_type": res.mime_type,
                                  "size": res.size})

    def seed_jobs(self, service: str, count: int, owner: str = "",
                  phase: Phase = Phase.COMPLETED, batch: int = 20000) -> None:
        """Bulk-insert finished jobs (benchmarks and scale tests), counted, each with
        its bytes row (0) as every job has; the change hooks do not see them."""
        from ..domain.model import new_job_id
        base = timeutil.now() - dt.timedelta(seconds=count)
        with self.engine.begin() as conn:
            for start in range(0, count, batch):
                rows = [dict(id=new_job_id(), service=service, owner=owner, run_id=None,
                             phase=phase.value, creation_time=base + dt.timedelta(seconds=i),
                             execution_duration=0, priority=0)
                        for i in range(start, min(count, start + batch))]
                conn.execute(J.insert(), rows)
                conn.execute(B.insert(), [{"job_id": r["id"], "bytes": 0} for r in rows])
                counts.bump(conn, counts.tally((service, owner, phase.value, str(r["id"]))
                                               for r in rows))


# Hot statements, built once: only their parameters change between requests.
_UNSTARTED = (Phase.PENDING, Phase.QUEUED, Phase.HELD, Phase.ARCHIVED)     # no result
_ID = (J.c.id == sa.bindparam("id"), J.c.service == sa.bindparam("service"))
_OWNED = J.c.owner == sa.bindparam("owner")
# The job's row, and whether it named a CALLBACK (most did not: no read of it then),
# then its parameters (part 0), results (part 1) and its earlier attempts' errors
# (part 2), in order, in one read rather than two.  The job's row is part -1, its
# part columns NULL; a part's row has NULL in the job's columns.
_PART_COLUMNS: list[sa.ColumnElement[Any]] = [
    sa.literal(-1).label("part"), sa.cast(sa.null(), sa.Integer).label("seq"),
    sa.cast(sa.null(), sa.String).label("a"), sa.cast(sa.null(), sa.Text).label("b"),
    sa.cast(sa.null(), sa.Boolean).label("flag"), sa.cast(sa.null(), sa.String).label("mime"),
    sa.cast(sa.null(), sa.BigInteger).label("size")]
_JOB_NULLS = [sa.null()] * (len(J.c) + 1)


def _get_job(*where) -> sa.CompoundSelect:
    """The job read, its row found by ``where`` (its parts by its id alone: when the
    row is not found, they are not used)."""
    has_callback = sa.exists().where(JC.c.job_id == J.c.id).label("has_callback")
    return sa.union_all(
        sa.select(*J.columns, has_callback, *_PART_COLUMNS).where(*where),
        sa.select(*_JOB_NULLS, sa.literal(0), P.c.seq, P.c.name, P.c.value, P.c.by_reference,
                  sa.null(), sa.null()).where(P.c.job_id == sa.bindparam("id")),
        sa.select(*_JOB_NULLS, sa.literal(1), R.c.seq, R.c.id, R.c.path, sa.null(),
                  R.c.mime_type, R.c.size).where(R.c.job_id == sa.bindparam("id")),
        sa.select(*_JOB_NULLS, sa.literal(2), A.c.attempt, A.c.error_type, A.c.error_message,
                  sa.null(), sa.null(), sa.null()).where(A.c.job_id == sa.bindparam("id")),
    ).order_by("part", "seq")


_GET_ANY = _get_job(*_ID)
_GET_OWNED = _get_job(*_ID, _OWNED)
_PHASE_ANY = sa.select(J.c.phase).where(*_ID)
_PHASE_OWNED = _PHASE_ANY.where(_OWNED)
_INSERT_JOB = direct.DirectWrite(J.insert())
_INSERT_PARAMS = direct.DirectWrite(P.insert())
_INSERT_BYTES = direct.DirectWrite(B.insert())
_THE_JOB = J.c.id == sa.bindparam("_id")
_OWNED_BY = sa.select(J.c.service, J.c.owner, J.c.phase).where(_THE_JOB)
_BYTES_OF = sa.select(B.c.bytes).where(B.c.job_id == sa.bindparam("id"))
_PHASES = sa.select(J.c.id, J.c.phase).where(J.c.id.in_(sa.bindparam("ids", expanding=True)))
_LOCK_STARTED = direct.DirectWrite(
    J.update().where(_THE_JOB, J.c.phase.not_in([sa.literal(p.value) for p in _UNSTARTED]))
    .values(id=J.c.id).returning(J.c.id))
# The claim's attempt: its start, and its worker's lease or none (the attempt ended).
_STARTED_AT, _LEASED_TO = counts.HELD_BY
_LOCK_ATTEMPT = direct.DirectWrite(
    J.update().where(_THE_JOB, J.c.phase != sa.literal(Phase.ARCHIVED.value), _STARTED_AT,
                     sa.or_(_LEASED_TO, J.c.lease_owner.is_(None)))
    .values(id=J.c.id).returning(J.c.id))
_OF_RESULT = (R.c.job_id == sa.bindparam("_id"),)
_DROP_RESULT = direct.DirectWrite(R.delete().where(*_OF_RESULT, R.c.id == sa.bindparam("_result")))
_LAST_SEQ = sa.select(sa.func.coalesce(sa.func.max(R.c.seq), -1)).where(*_OF_RESULT)
_INSERT_RESULT = direct.DirectWrite(R.insert())
_DELETE = J.delete().where(J.c.id == sa.bindparam("id"))
#: The deletion, scoped (or not) to a service and to an owner, built once.
_DELETES = {
    (by_service, by_owner): direct.DirectWrite(_DELETE.where(
        *([J.c.service == sa.bindparam("service")] if by_service else []),
        *([J.c.owner == sa.bindparam("owner")] if by_owner else []),
    ).returning(J.c.service, J.c.owner, J.c.phase, J.c.batch_id))
    for by_service in (False, True) for by_owner in (False, True)}
_GET_OWNER = sa.select(J.c.owner).where(*_ID)


def _job_row(job: Job) -> dict:
    err = job.error
    return dict(
        id=job.id, service=job.service, owner=job.owner, run_id=job.run_id,
        phase=job.phase.value, creation_time=job.creation_time,
        start_time=job.start_time, end_time=job.end_time,
        execution_duration=job.execution_duration, destruction=job.destruction,
        quote=job.quote, priority=job.priority,
        error_type=err.type if err else None, error_message=err.message if err else None,
        error_detail=err.detail if err else None,
        # only when given: a NULL either way, and an INSERT any schema since 0001 takes
        **({"start_after": job.start_after} if job.start_after is not None else {}),
    )


def _param_rows(job_id: str, params: list[Parameter], start: int) -> list[dict]:
    return [dict(job_id=job_id, seq=start + i, name=p.name, value=p.value,
                 by_reference=p.by_reference) for i, p in enumerate(params)]


def _job(row: Mapping[str, Any], params, results) -> Job:
    error = None
    if row["error_type"]:
        error = ErrorSummary(row["error_type"], row["error_message"] or "", row["error_detail"])
    return Job(
        id=row["id"], service=row["service"], owner=row["owner"], phase=_PHASE[row["phase"]],
        creation_time=row["creation_time"], execution_duration=row["execution_duration"],
        destruction=row["destruction"], run_id=row["run_id"], quote=row["quote"],
        start_time=row["start_time"], end_time=row["end_time"], error=error,
        progress=row["progress"], progress_message=row["progress_message"],
        parameters=[Parameter(name, value, bool(by_ref)) for name, value, by_ref in params],
        results=[Result(*r) for r in results],
        priority=row["priority"], start_after=row["start_after"],
    )
