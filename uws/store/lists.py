"""Reading job lists and counts: the filters of UWS 1.1 §2.2.2.1, keyset pages, and
the maintained counters (:mod:`.counts`) where no time window asks for a scan."""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa

from ..domain import timeutil
from ..domain.model import JobRef, ListQuery
from ..domain.phases import Phase
from . import counts, direct
from .connections import Readers, reading
from .tables import job as J

_JOBREF_COLUMNS = (J.c.id, J.c.phase, J.c.run_id, J.c.owner, J.c.creation_time)
_PHASE = {p.value: p for p in Phase}


class ListQueries:
    # provided by Store, which mixes this in
    engine: sa.Engine
    readers: Readers
    _list_reads: dict[tuple, direct.DirectRead]     # one per shape of list, made when first used

    def list_jobs(self, service: str, owner: str | None, q: ListQuery) -> list[JobRef]:
        shape = (owner is not None, bool(q.phases), q.after is not None, q.before is not None,
                 q.limit is not None, bool(q.offset))
        rows = self._list_rows(shape, _list_params(service, owner, q))
        return [JobRef(i, _PHASE[ph], run, own, ct) for i, ph, run, own, ct in rows]

    def _list_rows(self, shape: tuple, params: dict[str, Any]) -> Sequence[Sequence[Any]]:
        if shape[1]:    # a list of phases (an expanding parameter): through SQLAlchemy
            with reading(self.engine) as conn:
                return conn.execute(_list_statement(*shape), params).all()
        read = self._list_reads.get(shape)
        if read is None:
            read = self._list_reads[shape] = direct.shared_read(
                self.engine, ("list", shape), lambda: _list_statement(*shape))
        with self.readers.cursor() as cur:
            return read.rows(cur, params)

    def iter_jobs(self, service: str, owner: str | None, q: ListQuery,
                  chunk: int = 1000) -> Iterator[JobRef]:
        """Every matching job, newest first, fetched in keyset chunks so no
        connection or snapshot is held while the caller streams."""
        q = dataclasses.replace(q, limit=chunk)
        while True:
            page = self.list_jobs(service, owner, q)
            yield from page
            if len(page) < chunk:
                return
            last = page[-1]
            q = dataclasses.replace(q, offset=0, before=(last.creation_time, last.id))

    def count_jobs(self, service: str, owner: str | None, q: ListQuery) -> int:
        if q.after is None and q.before is None:
            if not q.phases:
                return self._shown_total(service, owner)
            with reading(self.engine) as conn:
                return counts.total(conn, service, owner, q.phases)
        # A time window: only indexed columns, so the count is an index-only scan.
        stmt = _filtered(sa.select(sa.func.count()), owner is not None, bool(q.phases),
                         q.after is not None, q.before is not None)
        with reading(self.engine) as conn:
            return conn.execute(stmt, _list_params(service, owner, q)).scalar_one()

    def _shown_total(self, service: str, owner: str | None) -> int:
        """The jobs a list shows, from the counters: read directly (HEAD {jobs})."""
        key = ("total", owner is not None)
        read = self._list_reads.get(key)
        if read is None:
            read = self._list_reads[key] = direct.shared_read(
                self.engine, key, lambda: counts.shown_total(owner is not None))
        with self.readers.cursor() as cur:
            # int(): PostgreSQL sums a BIGINT as NUMERIC
            return int(read.rows(cur, {"service": service, "owner": owner})[0][0])

    def job_counts(self, service: str | None = None,
                   owner: str | None = None) -> dict[tuple[str, str, Phase], int]:
        """Jobs by (service, owner, phase), nonzero counts only: of one service or of
        the whole server (None), of one owner or of everyone (None)."""
        with reading(self.engine) as conn:
            return counts.by_phase(conn, service, owner)


def _filtered(stmt, scoped: bool, phases: bool, after: bool, before: bool):
    """The WHERE clause of a job list (UWS 1.1 §2.2.2.1 filters plus the keyset cursor)."""
    stmt = stmt.where(J.c.service == sa.bindparam("service"))
    if scoped:
        stmt = stmt.where(J.c.owner == sa.bindparam("owner"))
    if phases:
        stmt = stmt.where(J.c.phase.in_(sa.bindparam("phases", expanding=True)))
    else:
        stmt = stmt.where(J.c.phase != Phase.ARCHIVED.value)
    if after:
        stmt = stmt.where(J.c.creation_time >= sa.bindparam("after", type_=sa.DateTime))
    if before:
        ct = sa.bindparam("before_time", type_=sa.DateTime)
        stmt = stmt.where(J.c.creation_time <= ct,
                          sa.or_(J.c.creation_time < ct, J.c.id < sa.bindparam("before_id")))
    return stmt



@functools.lru_cache(maxsize=128)
def _list_statement(scoped: bool, phases: bool, after: bool, before: bool, limit: bool,
                    offset: bool):
    """A job-list page, built once per combination of filters (lists are the hot path)."""
    stmt = _filtered(sa.select(*_JOBREF_COLUMNS), scoped, phases, after, before)
    stmt = stmt.order_by(J.c.creation_time.desc(), J.c.id.desc())
    if limit:
        stmt = stmt.limit(sa.bindparam("limit", type_=sa.Integer))
    if offset:
        stmt = stmt.offset(sa.bindparam("offset", type_=sa.Integer))
    return stmt


def _list_params(service: str, owner: str | None, q: ListQuery) -> dict[str, Any]:
    params: dict[str, Any] = {"service": service, "owner": owner, "limit": q.limit, "offset": q.offset,
              "phases": [p.value for p in q.phases]}
    if q.after is not None:
        params["after"] = timeutil.next_millisecond(q.after)
    if q.before is not None:
        params["before_time"], params["before_id"] = q.before
    return params
