"""Statistics storage: the duration histograms kept by a change hook, and the
sampled job counts behind the history chart (see :mod:`uws.usecases.stats` for what they mean).

:func:`record_durations` runs inside each changing transaction (Store registers
it in ``change_hooks``), after the counters: a job that starts adds one to its
wait-time bin, one that ends after running adds one to its run-time bin.  It takes
the jobs' times from the changes when the changing statement returned them (a claim,
an end of a running job), else reads them by primary key, and upserts a row per
bucket width (in one statement), so a start or an end costs one or two indexed
statements, and so do a batch's many (counts summed per bin); every transaction
locks the counters before the bins, and its bins in key order, so none can
deadlock another.
"""
from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from ..domain import timeutil
from ..domain.phases import Phase
from ..usecases import stats
from . import counts
from .changes import Change, ManyHook, chunks
from .connections import reading, writing
from .direct import DirectWrite
from .tables import duration_bins as D
from .tables import job as J
from .tables import job_count as C
from .tables import phase_samples as S

_PHASE = {p.value: p for p in Phase}
_ENDS = frozenset({Phase.COMPLETED.value, Phase.ERROR.value, Phase.ABORTED.value})
_RUNNING = frozenset({Phase.EXECUTING.value, Phase.SUSPENDED.value})
_TIMES = sa.select(J.c.id, J.c.creation_time, J.c.start_time, J.c.end_time).where(
    J.c.id.in_(sa.bindparam("ids", expanding=True)))


def _kinds(old: str | None, new: str | None) -> tuple[str, ...]:
    """What a change records: a start (not a resumption) a wait, an end after
    running a run; a job stored already finished (an import, a test) both."""
    if new == Phase.EXECUTING.value and old != Phase.SUSPENDED.value:
        return (stats.WAIT,)
    if new in _ENDS and old in _RUNNING:
        return (stats.RUN,)
    if new in _ENDS and old is None:
        return stats.KINDS
    return ()


def _record_durations(conn: sa.Connection, changes: Sequence[Change]) -> None:
    """Add the durations the starts and ends among ``changes`` complete: the jobs'
    times read by id, the bins' counts summed per key and upserted in key order."""
    due = [(change, kinds) for change in changes if (kinds := _kinds(change.old, change.new))]
    if not due:
        return
    times: dict[str, Any] = {change.job_id: change.times for change, _ in due if change.times}
    for part in chunks([change.job_id for change, _ in due if not change.times]):
        times.update((row.id, row) for row in conn.execute(_TIMES, {"ids": list(part)}))
    now = timeutil.now()
    bins: Counter[tuple] = Counter()
    for change, kinds in due:
        if change.job_id in times:
            bins.update(_bins(change, kinds, times[change.job_id], now))
    if bins:
        _UPSERT[conn.dialect.name].run(
            conn, [dict(zip(_KEY, key, strict=True), n=n) for key, n in sorted(bins.items())])


#: The change hook (see uws.store.changes).
record_durations = ManyHook(_record_durations)


def _bins(change: Change, kinds: tuple[str, ...], row, now: dt.datetime) -> list[tuple]:
    """The bin keys (one per bucket width) of the durations one change completes."""
    # A change read without a start time that starts the job: the start is now.
    start = row.start_time or (now if change.new == Phase.EXECUTING.value else None)
    if start is None:
        return []   # ended without ever starting (aborted while queued): no durations
    samples = []
    if stats.WAIT in kinds:
        samples.append((stats.WAIT, start, start - row.creation_time))
    if stats.RUN in kinds:
        end = row.end_time or now
        samples.append((stats.RUN, end, end - start))
    return [(change.owner, width, stats.bucket_of(at, width), change.service, kind,
             stats.bin_of(took.total_seconds()))
            for kind, at, took in samples for width in _WIDTHS]


_KEY = ("owner", "width", "bucket", "service", "kind", "bin")
_WIDTHS = sorted(set(stats.WIDTHS.values()))


def _upsert(insert) -> sa.Insert:
    base = insert(D)
    return base.on_conflict_do_update(index_elements=[D.c[k] for k in _KEY],
                                      set_={"n": D.c.n + base.excluded.n})


_UPSERT = {"postgresql": DirectWrite(_upsert(postgresql.insert)),
           "sqlite": DirectWrite(_upsert(sqlite.insert))}
_SAMPLE_INSERT: dict[str, Any] = {"postgresql": postgresql.insert(S), "sqlite": sqlite.insert(S)}


class StatsStore:
    """The reads of :class:`uws.usecases.stats.Statistics`, and the sweeps' writes."""

    def __init__(self, engine: sa.Engine):
        self.engine = engine

    def job_counts(self, service: str | None = None,
                   owner: str | None = None) -> dict[tuple[str, str, Phase], int]:
        with reading(self.engine) as conn:
            return counts.by_phase(conn, service, owner)

    def duration_bins(self, service: str | None, owner: str | None, width: int,
                      since: dt.datetime) -> dict[str, stats.Bins]:
        stmt = sa.select(D.c.owner, D.c.kind, D.c.bin, sa.func.sum(D.c.n)).where(
            D.c.width == width, D.c.bucket >= since)
        if service is not None:
            stmt = stmt.where(D.c.service == service)
        if owner is not None:
            stmt = stmt.where(D.c.owner == owner)
        stmt = stmt.group_by(D.c.owner, D.c.kind, D.c.bin)
        out: dict[str, stats.Bins] = {}
        with reading(self.engine) as conn:
            for who, kind, index, n in conn.execute(stmt):
                out.setdefault(who, {}).setdefault(kind, {})[index] = int(n)
        return out

    def phase_history(self, service: str | None,
                      since: dt.datetime) -> list[tuple[dt.datetime, Phase, int]]:
        stmt = sa.select(S.c.at, S.c.phase, sa.func.sum(S.c.n)).where(S.c.at >= since)
        if service is not None:
            stmt = stmt.where(S.c.service == service)
        stmt = stmt.group_by(S.c.at, S.c.phase).order_by(S.c.at)
        with reading(self.engine) as conn:
            return [(at, _PHASE[p], int(n)) for at, p, n in conn.execute(stmt)]

    def sample_phases(self, now: dt.datetime) -> bool:
        """Copy the counters (by service and phase) into the samples of now's bucket,
        unless a process sampled it already; whether this call did."""
        at = stats.bucket_of(now)
        summed = (sa.select(sa.literal(at, sa.DateTime), C.c.service, C.c.phase,
                            sa.func.sum(C.c.n))
                  .where(sa.true()).group_by(C.c.service, C.c.phase)
                  .having(sa.func.sum(C.c.n) != 0))
        stmt = (_SAMPLE_INSERT[self.engine.dialect.name]
                .from_select(["at", "service", "phase", "n"], summed)
                .on_conflict_do_nothing().returning(S.c.at))     # rowcount: -1 on psycopg
        with writing(self.engine) as conn:
            if conn.execute(sa.select(S.c.at).where(S.c.at == at).limit(1)).first():
                return False
            return bool(conn.execute(stmt).all())

    def prune(self, before: dt.datetime) -> None:
        """Forget the bins and samples of buckets before ``before``."""
        with writing(self.engine) as conn:
            for width in _WIDTHS:      # along the (width, bucket) index
                conn.execute(D.delete().where(D.c.width == width, D.c.bucket < before))
            conn.execute(S.delete().where(S.c.at < before))

    def seed_bins(self, rows: list[dict]) -> None:
        """Add histogram counts (benchmarks): dicts of service, owner, width, bucket,
        kind, bin and n."""
        with writing(self.engine) as conn:
            for start in range(0, len(rows), 5000):
                _UPSERT[conn.dialect.name].run(conn, rows[start:start + 5000])
