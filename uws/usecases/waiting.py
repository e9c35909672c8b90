"""Blocking GET support: wake waiters when a job's phase changes.

Changes made in this process wake waiters at once (the store calls
:meth:`PhaseWatch.notify`).  Changes made by other processes sharing the
database reach :meth:`PhaseWatch.notify` too when the store pushes them (a
PostgreSQL LISTEN, see :meth:`PhaseWatch.set_pushed`); otherwise (SQLite, or
while that connection is down) one poller thread, only while someone waits,
reads the phases of all waited-for jobs in a single query every ``interval``
seconds.  So the cost is one small query per interval however many wait, and
none at all while changes are pushed.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, defaultdict

from ..domain import timing
from ..domain.phases import Phase

log = logging.getLogger(__name__)
ERROR_LOG_INTERVAL = 60.0   # seconds between two logged failures of the poller
RECENT = 10000              # job ids whose last notification is remembered (see mark())


class _Waiter:
    __slots__ = ("phase", "event")

    def __init__(self, phase: Phase):
        self.phase = phase
        self.event = threading.Event()


class PhaseWatch:
    def __init__(self, phases_of, interval: float = timing.WAIT_POLL, limit: int = 1000):
        self._phases_of = phases_of      # callable: ids -> {id: Phase}
        self._interval = interval
        self._limit = limit
        self._lock = threading.Lock()
        self._waiters: dict[str, set[_Waiter]] = defaultdict(set)
        self._count = 0
        self._wake_poller = threading.Condition(self._lock)
        self._stopped = False
        self._last_error_log = -ERROR_LOG_INTERVAL
        # Notifications are numbered, so a waiter can tell whether one for its job
        # came between its read of the phase (mark()) and its wait().
        self._seq = 0
        self._notified: OrderedDict[str, int] = OrderedDict()   # job id -> its last seq
        self._sure_since = 0     # marks older than this may have missed a change
        self._pushed = False     # changes by other processes reach notify()
        self._recheck = False    # read the phases once even though they are pushed
        self._thread = threading.Thread(target=self._poll, name="uws-wait-poller", daemon=True)
        self._thread.start()

    def mark(self) -> int:
        """Taken before reading the phase that is then passed to :meth:`wait`."""
        with self._lock:
            return self._seq

    def wait(self, job_id: str, phase: Phase, timeout: float, since: int | None = None) -> bool:
        """Block until the job leaves ``phase`` or ``timeout`` passes.

        ``since`` is the :meth:`mark` taken before ``phase`` was read: a change
        notified after it ends the wait at once.  Returns False at once when too
        many requests already wait: UWS 1.1 lets a server cut a blocking request
        short, and a bounded number of parked requests keeps threads free for
        everyone else.
        """
        waiter = _Waiter(phase)
        with self._lock:
            if since is not None and self._notified.get(job_id, -1) > since:
                return True
            if self._count >= self._limit or self._stopped:
                return False
            self._waiters[job_id].add(waiter)
            self._count += 1
            if since is None or since < self._sure_since:
                self._recheck = True    # a change may have been missed: read once
            self._wake_poller.notify()
        try:
            return waiter.event.wait(timeout)
        finally:
            with self._lock:
                self._count -= 1
                bucket = self._waiters.get(job_id)
                if bucket is not None:
                    bucket.discard(waiter)
                    if not bucket:
                        del self._waiters[job_id]

    def notify(self, job_id: str) -> None:
        with self._lock:
            self._seq += 1
            self._remember(job_id)
            for waiter in self._waiters.get(job_id, ()):
                waiter.event.set()

    def set_pushed(self, pushed: bool) -> None:
        """Whether changes made by other processes are pushed to :meth:`notify`.

        While they are, the poller rests.  When pushing (re)starts, the phases of
        the jobs waited for are read once, since changes made meanwhile may have
        been missed; so are those of waits whose phase was read before."""
        with self._lock:
            if pushed and not self._pushed:
                self._seq += 1
                self._sure_since = self._seq
                self._recheck = bool(self._waiters)
            self._pushed = pushed
            self._wake_poller.notify()

    @property
    def waiting(self) -> int:
        return self._count

    def stop(self) -> None:
        """Stop the poller, and answer the blocked requests now (a stopping server
        holds no client until its WAIT runs out; new ones answer at once)."""
        with self._lock:
            self._stopped = True
            self._wake_poller.notify()
            for bucket in self._waiters.values():
                for waiter in bucket:
                    waiter.event.set()

    def _remember(self, job_id: str) -> None:
        self._notified[job_id] = self._seq
        self._notified.move_to_end(job_id)
        if len(self._notified) > RECENT:
            _, seq = self._notified.popitem(last=False)
            self._sure_since = max(self._sure_since, seq + 1)   # its news is gone

    def _due(self) -> bool:
        """Under the lock: whether the poller has phases to read now."""
        if not self._waiters:
            self._recheck = False       # nobody to read them for
            return False
        return self._recheck or not self._pushed

    def _poll(self) -> None:
        while True:
            with self._lock:
                while not self._stopped and not self._due():
                    self._wake_poller.wait()
                if self._stopped:
                    return
                self._recheck = False
                watched = {job_id: set(ws) for job_id, ws in self._waiters.items()}
            read = self._check(watched)
            with self._lock:
                if self._stopped:
                    return
                if not read:
                    self._recheck = self._recheck or self._pushed   # retry it next tick
                if not read or not self._pushed:
                    self._wake_poller.wait(self._interval)

    def _check(self, watched: dict[str, set[_Waiter]]) -> bool:
        try:
            current = self._phases_of(watched)
        except Exception:       # the database may be briefly unavailable; retry next tick
            now = time.monotonic()
            if now - self._last_error_log >= ERROR_LOG_INTERVAL:    # not 20 lines a second
                self._last_error_log = now
                log.exception("cannot read the phases of waited-for jobs; retrying")
            return False
        for job_id, waiters in watched.items():
            phase = current.get(job_id)     # None: the job was deleted
            for waiter in waiters:
                if phase is not waiter.phase:
                    waiter.event.set()
        return True
