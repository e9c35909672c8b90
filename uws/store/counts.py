"""Job counts kept in uws_job_count: exact, and read without scanning uws_job.

Every change of a job's existence or phase adjusts the counters in the same
transaction (:func:`bump`), after the statement that locked the job's row, so
the counters always equal ``COUNT(*)`` of the committed rows.  On PostgreSQL a
transaction touching two counter rows (old phase -1, new phase +1) updates them
in key order, so two such transactions cannot deadlock; slots spread one owner's
concurrent creations over several rows.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from ..domain.model import Claim
from ..domain.phases import Phase
from .direct import DirectWrite, ReadIn
from .tables import job as J
from .tables import job_count as C

#: Rows per (service, owner, phase); a job's slot never changes (see slot_of).
SLOTS = 8
_PHASE = {p.value: p for p in Phase}

Key = tuple[str, str, str, int]     # service, owner, phase value, slot


def slot_of(job_id: str) -> int:
    """The slot of a job's counters, from its id's last character (revision 0002
    fills the table with the same rule)."""
    return ord(job_id[-1]) % SLOTS if job_id else 0


def bump(conn: sa.Connection, deltas: Iterable[tuple[Key, int]]) -> None:
    """Add each delta to its counter, creating it as needed, in key order."""
    rows = [{"service": s, "owner": o, "phase": p, "slot": slot, "n": d}
            for (s, o, p, slot), d in sorted(deltas) if d]
    if rows:    # one statement per row, in order (a many-row VALUES is not cached)
        _UPSERT[conn.dialect.name].run(conn, rows[0] if len(rows) == 1 else rows)


def tally(rows: Iterable[tuple[str, str, str, str]]) -> list[tuple[Key, int]]:
    """The deltas adding jobs given as (service, owner, phase value, id)."""
    counts: Counter[Key] = Counter()
    for service, owner, phase, job_id in rows:
        counts[(service, owner, phase, slot_of(job_id))] += 1
    return list(counts.items())


def total(conn: sa.Connection, service: str, owner: str | None,
          phases: Iterable[Phase] = ()) -> int:
    """Jobs of a service (one owner's, or everyone's with None) in ``phases``; with
    none given, in every phase but ARCHIVED (what a job list shows)."""
    values = [p.value for p in phases]
    key = {"service": service, "owner": owner, "phases": values}
    # int(): PostgreSQL sums a BIGINT as NUMERIC
    if values:      # an expanding list: through SQLAlchemy
        return int(conn.execute(_TOTAL[(owner is not None, True)], key).scalar_one())
    return int(_TOTAL_IN[owner is not None].rows(conn, key)[0][0])


def by_phase(conn: sa.Connection, service: str | None,
             owner: str | None) -> dict[tuple[str, str, Phase], int]:
    """Nonzero counts by (service, owner, phase): of one service or all (None),
    of one owner or all (None)."""
    stmt = sa.select(C.c.service, C.c.owner, C.c.phase, sa.func.sum(C.c.n))
    if service is not None:
        stmt = stmt.where(C.c.service == service)
    if owner is not None:
        stmt = stmt.where(C.c.owner == owner)
    stmt = stmt.group_by(C.c.service, C.c.owner, C.c.phase)
    return {(s, o, _PHASE[p]): int(n) for s, o, p, n in conn.execute(stmt) if n}


def recount(conn: sa.Connection) -> None:
    """Rebuild every counter from the jobs, writers held off meanwhile: the repair
    after changes the counters did not see (servers of revision 0001 still running
    after the upgrade, a hand-made change)."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("LOCK TABLE uws_job IN SHARE MODE"))   # waits for writers
    else:
        conn.execute(J.update().where(sa.false()).values(phase=J.c.phase))  # the write lock
    last = sa.func.substr(J.c.id, sa.func.length(J.c.id), 1)
    grouped = sa.select(J.c.service, J.c.owner, J.c.phase, last, sa.func.count()).group_by(
        J.c.service, J.c.owner, J.c.phase, last)
    tallied: Counter[Key] = Counter()
    for service, owner, phase, char, n in conn.execute(grouped):
        tallied[(service, owner, phase, slot_of(char))] += n
    conn.execute(C.delete())
    if tallied:
        conn.execute(C.insert(), [{"service": s, "owner": o, "phase": p, "slot": slot, "n": n}
                                  for (s, o, p, slot), n in sorted(tallied.items())])


def lock(conn: sa.Connection, job_id: str, in_phases: Iterable[Phase],
         owner: str | None = None, claim: Claim | None = None) -> sa.Row | None:
    """Lock a job's row if it is in one of ``in_phases`` (and is ``owner``'s, and
    still running as ``claim`` left it, when given): its (service, owner, phase
    value, batch_id), or None.  The phase read stays true
    until the commit: PostgreSQL's FOR UPDATE rereads the row once a concurrent
    change commits; on SQLite a no-op UPDATE takes the database's write lock (a
    SELECT would take none)."""
    stmt: Any = _LOCK[conn.dialect.name == "postgresql"]
    stmt = stmt.where(J.c.phase.in_([p.value for p in in_phases]))
    if owner is not None:
        stmt = stmt.where(J.c.owner == owner)
    if claim is not None:
        stmt = stmt.where(*HELD_BY)
    return conn.execute(stmt, {"_id": job_id, **fence(claim)}).first()


#: The job is still running as a claim left it: its attempt's start, its worker's lease.
HELD_BY = (J.c.start_time == sa.bindparam("_started", type_=J.c.start_time.type),
           J.c.lease_owner == sa.bindparam("_worker", type_=J.c.lease_owner.type))


def fence(claim: Claim | None) -> dict:
    """The parameters of :data:`HELD_BY` for ``claim``."""
    return {"_started": claim.started, "_worker": claim.worker} if claim else {}


_THE_JOB = J.c.id == sa.bindparam("_id")
_LOCK = {True: sa.select(J.c.service, J.c.owner, J.c.phase, J.c.batch_id).where(_THE_JOB)
         .with_for_update(),
         False: J.update().where(_THE_JOB).values(phase=J.c.phase)
         .returning(J.c.service, J.c.owner, J.c.phase, J.c.batch_id)}


def _upsert(insert) -> sa.Insert:
    """INSERT ... ON CONFLICT DO UPDATE SET n = n + excluded.n (PostgreSQL, SQLite)."""
    base = insert(C)
    return base.on_conflict_do_update(index_elements=[C.c.service, C.c.owner, C.c.phase, C.c.slot],
                                      set_={"n": C.c.n + base.excluded.n})


_UPSERT = {"postgresql": DirectWrite(_upsert(postgresql.insert)),
           "sqlite": DirectWrite(_upsert(sqlite.insert))}


def _total_statement(scoped: bool, phases: bool):
    stmt = sa.select(sa.func.coalesce(sa.func.sum(C.c.n), 0)).where(
        C.c.service == sa.bindparam("service"))
    if scoped:
        stmt = stmt.where(C.c.owner == sa.bindparam("owner"))
    if phases:
        return stmt.where(C.c.phase.in_(sa.bindparam("phases", expanding=True)))
    return stmt.where(C.c.phase != Phase.ARCHIVED.value)


_TOTAL = {(scoped, phases): _total_statement(scoped, phases)
          for scoped in (False, True) for phases in (False, True)}
#: the totals over every phase but ARCHIVED, read directly: by scoped
_TOTAL_IN = {scoped: ReadIn(_TOTAL[(scoped, False)]) for scoped in (False, True)}


def shown_total(scoped: bool) -> sa.Select:
    """The statement of :func:`total` over every phase but ARCHIVED (what a job list
    shows), for a read outside a transaction: parameters service and, if ``scoped``,
    owner."""
    return _TOTAL[(scoped, False)]
