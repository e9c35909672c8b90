"""Bytes each owner keeps in each service, kept in uws_owner_bytes.

As before these totals, an ARCHIVED job's bytes do not count: archiving takes them
off its owner's total.

A storage quota used to add up uws_job_bytes over all of an owner's jobs at every
creation: a scan that grew with the jobs kept (0.65 ms at 2,000 jobs, linear).  The
totals are now adjusted in the transactions that change a job's bytes, as the job
counters are (:mod:`.counts`), split over the same slots so concurrent changes by one
owner do not all wait for one row.
"""
from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from ..domain.phases import Phase
from .counts import slot_of
from .direct import DirectWrite, ReadIn
from .tables import job as J
from .tables import job_bytes as B
from .tables import owner_bytes as O


def add(conn: sa.Connection, service: str, owner: str, job_id: str, delta: int) -> None:
    """Add ``delta`` bytes to the owner's total (in the job's slot)."""
    if delta:
        _UPSERT[conn.dialect.name].run(conn, {"service": service, "owner": owner,
                                              "slot": slot_of(job_id), "bytes": delta})


def total(conn: sa.Connection, service: str, owner: str) -> int:
    # int(): PostgreSQL sums a BIGINT as NUMERIC
    return int(_TOTAL_IN.rows(conn, {"service": service, "owner": owner})[0][0])


def lock(conn: sa.Connection, job_id: str) -> int | None:
    """The bytes a job keeps, its row locked until the commit so that no concurrent
    change slips between this read and the caller's write; None without a row.  A
    no-op UPDATE: a row lock on PostgreSQL, the write lock on SQLite."""
    statement, params = locking(job_id)
    return kept(statement.run(conn, params))


def locking(job_id: str) -> tuple[DirectWrite, dict[str, str]]:
    """:func:`lock` as a statement and its parameters, to send with others
    (:func:`.direct.together`); :func:`kept` reads its rows."""
    return _LOCK, {"_id": job_id}


def kept(rows) -> int | None:
    """The bytes the rows of :func:`locking` say the job keeps (None: no row)."""
    return rows[0][0] if rows else None


def put(conn: sa.Connection, job_id: str, before: int | None, size: int, *,
        service: str, owner: str, counted: bool) -> None:
    """Record that the job keeps ``size`` bytes, ``before`` being what :func:`lock`
    read; its owner's total follows when the job is ``counted`` (not archived).

    Every job has its row from its creation (revision 0012 gave one to older jobs):
    a deletion racing this change waits on that row's lock, then subtracts what was
    committed.  A row missing all the same (removed by hand) is made again, but a
    deletion at that moment cannot see it and would leave the total too high until
    ``uws db recount``."""
    if before is None:
        _INSERT.run(conn, {"job_id": job_id, "bytes": size})
    elif before != size:
        _SET.run(conn, {"_id": job_id, "bytes": size})
    if counted:
        add(conn, service, owner, job_id, size - (before or 0))


def recount(conn: sa.Connection) -> None:
    """Rebuild the totals from uws_job_bytes (after rows changed without them)."""
    if conn.dialect.name == "postgresql":
        # Writers adjust the totals last in their transactions: they wait here, and add
        # their change to the sums read below, which do not include it.
        conn.execute(sa.text("LOCK TABLE uws_owner_bytes IN EXCLUSIVE MODE"))
    last = sa.func.substr(J.c.id, sa.func.length(J.c.id), 1)
    grouped = (sa.select(J.c.service, J.c.owner, last, sa.func.sum(B.c.bytes))
               .select_from(J.join(B, B.c.job_id == J.c.id))
               .where(J.c.phase != Phase.ARCHIVED.value)
               .group_by(J.c.service, J.c.owner, last))
    rows: dict[tuple[str, str, int], int] = {}
    for service, owner, char, n in conn.execute(grouped):
        key = (service, owner, slot_of(char))
        rows[key] = rows.get(key, 0) + int(n or 0)
    conn.execute(O.delete())
    if rows:
        conn.execute(O.insert(), [{"service": s, "owner": o, "slot": slot, "bytes": n}
                                  for (s, o, slot), n in sorted(rows.items())])


def _upsert(insert) -> sa.Insert:
    base = insert(O)
    return base.on_conflict_do_update(index_elements=[O.c.service, O.c.owner, O.c.slot],
                                      set_={"bytes": O.c.bytes + base.excluded.bytes})


_UPSERT = {"postgresql": DirectWrite(_upsert(postgresql.insert)),
           "sqlite": DirectWrite(_upsert(sqlite.insert))}
#: the bytes an owner keeps in a service: parameters service and owner
TOTAL = sa.select(sa.func.coalesce(sa.func.sum(O.c.bytes), 0)).where(
    O.c.service == sa.bindparam("service"), O.c.owner == sa.bindparam("owner"))
_TOTAL_IN = ReadIn(TOTAL)
_LOCK = DirectWrite(B.update().where(B.c.job_id == sa.bindparam("_id")).values(bytes=B.c.bytes)
                    .returning(B.c.bytes))
_INSERT = DirectWrite(B.insert())
_SET = DirectWrite(B.update().where(B.c.job_id == sa.bindparam("_id"))
                   .values(bytes=sa.bindparam("bytes")))
