"""What every change of a job's existence or phase reports, inside its transaction.

The store calls :meth:`Store._record` with one :class:`Change` after the statement
that made it, in the same transaction: the counters are adjusted there, and each
registered hook (an event log, a callback outbox, a batch's totals) may write its
own rows, so that they commit or roll back with the change itself.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable

import sqlalchemy as sa

from . import counts


@dataclasses.dataclass(frozen=True)
class Change:
    job_id: str
    service: str
    owner: str
    old: str | None         # phase value before; None: the job was created
    new: str | None         # phase value after; None: the job was deleted
    batch_id: str | None = None

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


class ChangeRecorder:
    """Mixed into Store: counters, then hooks, for every change."""

    change_hooks: list[ChangeHook]

    def _record(self, conn: sa.Connection, change: Change) -> None:
        counts.bump(conn, change.deltas())
        for hook in self.change_hooks:
            hook(conn, change)

    def _record_many(self, conn: sa.Connection, changes: Iterable[Change]) -> None:
        """:meth:`_record` for many changes (a batch's): the counters bumped once by
        their summed deltas, then every hook for each change, in order."""
        changes = list(changes)
        total: Counter[counts.Key] = Counter()
        for change in changes:
            for key, delta in change.deltas():
                total[key] += delta
        counts.bump(conn, total.items())
        for change in changes:
            for hook in self.change_hooks:
                hook(conn, change)
