"""Whose callback is attempted next, so that no owner or receiver can hold up the others.

A process's delivery threads are shared fairly:

- one owner, and one receiver (host and port of the URL), hold at most a *share* of
  them at once (half, at least one): rows of an owner or a receiver at its share are
  passed over, whatever their due time, so the other threads stay free for others;
- owners take turns (round robin, by name) rather than the oldest row going first, so
  an owner with a thousand rows due waits between two of them for everyone else's;
- a receiver that keeps failing (no connection, no answer in time, 5xx) rests as a
  whole: after ``failures`` failures in a row its rows are not attempted for
  ``cooldown`` seconds (:class:`Breaker`); a thread that takes one puts it back, due
  when the rest ends, without spending an attempt (:meth:`Turns.resting`).

All of this is per process and in memory: each process shares its own threads, and a
process started anew starts with every breaker closed.  The rows themselves are
claimed in the store under a lease, as before, so several processes never attempt
one row at once.  No SQL here: the store is passed in (:class:`Turns`).
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

FAILURES = 5            # failures in a row that open a receiver's breaker
COOLDOWN = 60.0         # seconds its rows then wait
PER_OWNER = 16          # of an owner's due rows looked at per claim
CANDIDATES = 256        # due rows chosen from per claim, owners' first rows first
HEAD = 2000             # the oldest due rows these are taken from (owners at their share
                        # left out): its cost, whatever the number due
MAX_BROKEN = 10_000     # receivers remembered as failing (the oldest forgotten first)


class Outbox(Protocol):
    """What :class:`Turns` needs of the store (uws.store.callbacks)."""

    def due_callbacks(self, skip_owners: Sequence[str], per_owner: int, limit: int,
                      head: int) -> Sequence[Any]: ...

    def lease_callback(self, row_id: int, worker: str, lease_seconds: float) -> Any: ...


def receiver(url: str) -> str:
    """The receiver a URL names, ``host:port`` (lower case), whose share and breaker
    its deliveries count against."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".")
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:      # a URL no longer valid: its attempt will say so
        return url.lower()
    return f"{host}:{port}"


def share_of(threads: int) -> int:
    """The most delivery threads one owner or one receiver may hold."""
    return max(1, threads // 2)


class Breaker:
    """Per receiver: closed while it answers; open for ``cooldown`` seconds after
    ``failures`` failures in a row.  When the cool-down has passed its rows are
    attempted again: a success closes it, one more failure opens it again."""

    def __init__(self, failures: int = FAILURES, cooldown: float = COOLDOWN,
                 clock: Callable[[], float] = time.monotonic):
        self.failures, self.cooldown, self.clock = failures, cooldown, clock
        self._failed: dict[str, int] = {}       # failures in a row, receivers failing
        self._until: dict[str, float] = {}      # when open breakers close

    def is_open(self, host: str) -> bool:
        return self.remaining(host) > 0

    def remaining(self, host: str) -> float:
        """Seconds until the receiver's breaker closes (0: it is closed)."""
        until = self._until.get(host)
        return 0.0 if until is None else max(0.0, until - self.clock())

    def succeeded(self, host: str) -> None:
        self._failed.pop(host, None)
        self._until.pop(host, None)

    def failed(self, host: str) -> None:
        self._failed[host] = self._failed.pop(host, 0) + 1     # newest last
        if self._failed[host] >= self.failures:
            self._until[host] = self.clock() + self.cooldown
        while len(self._failed) > MAX_BROKEN:       # a bound, whatever hosts are named
            oldest = next(iter(self._failed))
            self._failed.pop(oldest)
            self._until.pop(oldest, None)


class Turns:
    """Claims rows for a process's ``threads`` delivery threads fairly (module doc).
    :meth:`claim` a row, attempt it, then :meth:`done` with how the receiver did."""

    def __init__(self, outbox: Outbox, threads: int, breaker: Breaker | None = None,
                 share: int | None = None):
        self.outbox = outbox
        self.share = share or share_of(threads)
        self.breaker = breaker or Breaker()
        self._owners: Counter[str] = Counter()      # attempts in flight here
        self._hosts: Counter[str] = Counter()
        self._last: str | None = None               # the owner served last
        # One claim at a time in this process: the counts are then exact.
        self._lock = threading.Lock()

    def claim(self, worker: str, lease_seconds: float):
        """A due row leased to ``worker`` whose owner and receiver are under their
        share, the next owner's in turn; None when there is none."""
        with self._lock:
            busy = sorted(o for o, n in self._owners.items() if n >= self.share)
            rows = self.outbox.due_callbacks(busy, PER_OWNER, CANDIDATES, HEAD)
            for candidate in self.in_turn(rows):
                row = self.outbox.lease_callback(candidate.id, worker, lease_seconds)
                if row is not None:     # else another process took it first
                    self._owners[row.owner] += 1
                    self._hosts[receiver(row.url)] += 1
                    self._last = row.owner
                    return row
        return None

    def resting(self, url: str) -> float:
        """Seconds the receiver of ``url`` still rests (0: it may be attempted)."""
        with self._lock:
            return self.breaker.remaining(receiver(url))

    def done(self, row, answered: bool | None) -> None:
        """The attempt at ``row`` ended: ``answered`` True (the receiver answered with
        a status under 500), False (it failed: no connection, no answer in time, a
        5xx), None (not attempted: nothing learnt about the receiver)."""
        host = receiver(row.url)
        with self._lock:
            _decrement(self._owners, row.owner)
            _decrement(self._hosts, host)
            if answered is True:
                self.breaker.succeeded(host)
            elif answered is False:
                self.breaker.failed(host)

    def in_turn(self, rows: Iterable[Any]) -> Iterator[Any]:
        """Of ``rows`` (due, each owner's in due order), those that may be attempted
        now: owners in turn by name, starting after the one served last; each owner's
        rows in their order."""
        by_owner: dict[str, list[Any]] = {}
        for row in rows:
            host = receiver(row.url)
            if self._owners[row.owner] >= self.share or self._hosts[host] >= self.share:
                continue
            by_owner.setdefault(row.owner, []).append(row)
        owners = sorted(by_owner)
        after = [o for o in owners if self._last is None or o > self._last]
        for owner in after + [o for o in owners if o not in after]:
            yield from by_owner[owner]


def _decrement(counts: Counter[str], key: str) -> None:
    counts[key] -= 1
    if counts[key] <= 0:
        del counts[key]
