"""What every change of a job's existence or phase reports, inside its transaction.

The store calls :meth:`Store._record` with one :class:`Change` after the statement
that made it, in the same transaction: the counters are adjusted there, and each
registered hook (an event log, a callback outbox, a batch's totals) may write its
own rows, so that they commit or roll back with the change itself.  A hook written
as a :class:`ManyHook` takes a batch's many changes at once, in a few statements.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple, TypeVar

import sqlalchemy as sa

from . import counts

#: One line a phase change, after its commit, in whichever process made it (front end
#: or worker): what the operator follows a job by.
transitions_log = logging.getLogger("uws.jobs")
T = TypeVar("T")
#: Rows or ids per statement when many changes are written together (far below any
#: bind-parameter limit).
CHUNK = 500


def chunks(items: Sequence[T]) -> Iterator[Sequence[T]]:
    """``items`` in slices of at most :data:`CHUNK`."""
    for start in range(0, len(items), CHUNK):
        yield items[start:start + CHUNK]


class Times(NamedTuple):
    """A job's times after a change, when the changing statement returned them (the
    duration histograms then need not read them again)."""
    creation_time: dt.datetime
    start_time: dt.datetime | None
    end_time: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class Change:
    job_id: str
    service: str
    owner: str
    old: str | None         # phase value before; None: the job was created
    new: str | None         # phase value after; None: the job was deleted
    batch_id: str | None = None
    times: Times | None = None

    def deltas(self) -> list[tuple[counts.Key, int]]:
        """What the change adds to the job counters."""
        slot = counts.slot_of(self.job_id)
        if self.old == self.new:
            return []
        out = []
        if self.old is not None:
            out.append(((self.service, self.owner, self.old, slot), -1))
        if self.new is not None:
            out.append(((self.service, self.owner, self.new, slot), 1))
        return out


#: A hook called inside the changing transaction; what it writes commits with it.
ChangeHook = Callable[[sa.Connection, Change], None]


@dataclasses.dataclass(frozen=True)
class ManyHook:
    """A change hook written for many changes at once (so a batch's cost a few
    statements, not a few per job); called with one change it is a ChangeHook."""
    many: Callable[[sa.Connection, Sequence[Change]], None]

    def __call__(self, conn: sa.Connection, change: Change) -> None:
        self.many(conn, [change])


class ChangeRecorder:
    """Mixed into Store: counters, then hooks, for every change."""

    change_hooks: list[ChangeHook]

    def _record(self, conn: sa.Connection, change: Change) -> None:
        counts.bump(conn, change.deltas())
        for hook in self.change_hooks:
            hook(conn, change)

    def _record_many(self, conn: sa.Connection, changes: Iterable[Change]) -> None:
        """:meth:`_record` for many changes (a batch's): the counters bumped once by
        their summed deltas, then each hook in turn: a :class:`ManyHook` with all the
        changes at once, another with each change, in order."""
        changes = list(changes)
        total: Counter[counts.Key] = Counter()
        for change in changes:
            for key, delta in change.deltas():
                total[key] += delta
        counts.bump(conn, total.items())
        for hook in self.change_hooks:
            if isinstance(hook, ManyHook):
                hook.many(conn, changes)
            else:
                for change in changes:
                    hook(conn, change)


def log_change(change: Change, worker: str | None = None, error: str | None = None) -> None:
    """The line of a committed phase change: job, service, owner, from -> to, the worker
    ("host:pid" as its claim names it) when known, the run's duration when it ended,
    and the first line of its error summary."""
    if not transitions_log.isEnabledFor(logging.INFO):
        return
    times = change.times
    seconds = None
    if times is not None and times.start_time is not None and times.end_time is not None:
        seconds = round((times.end_time - times.start_time).total_seconds(), 3)
    first = (error or "").strip().splitlines()[0][:200] if (error or "").strip() else None
    text = (f"job {change.job_id} ({change.service}, owner {change.owner or '(anonymous)'}): "
            f"{change.old or '(new)'} -> {change.new or '(deleted)'}")
    text += f" by {worker}" if worker else ""
    text += f" after {seconds} s" if seconds is not None else ""
    text += f": {first}" if first else ""
    transitions_log.info("%s", text, extra={
        "job_id": change.job_id, "service": change.service, "owner": change.owner,
        "from_phase": change.old, "to_phase": change.new, "worker": worker,
        "duration_ms": None if seconds is None else round(seconds * 1000, 1),
        "error": first})
