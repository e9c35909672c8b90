"""Blocking GET support: wake waiters when a job's phase changes.

Changes made in this process wake waiters at once (the store calls
:meth:`PhaseWatch.notify`).  Changes made by any other process sharing the
database are seen by one poller thread that, only while someone waits, reads
the phases of all waited-for jobs in a single query every ``interval``
seconds.  So the cost is one small query per interval however many wait.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict

from . import timing
from .phases import Phase

log = logging.getLogger(__name__)
ERROR_LOG_INTERVAL = 60.0   # seconds between two logged failures of the poller


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
        self._thread = threading.Thread(target=self._poll, name="uws-wait-poller", daemon=True)
        self._thread.start()

    def wait(self, job_id: str, phase: Phase, timeout: float) -> bool:
        """Block until the job leaves ``phase`` or ``timeout`` passes.

        Returns False at once when too many requests already wait: UWS 1.1
        lets a server cut a blocking request short, and a bounded number of
        parked requests keeps threads free for everyone else.
        """
        waiter = _Waiter(phase)
        with self._lock:
            if self._count >= self._limit:
                return False
            self._waiters[job_id].add(waiter)
            self._count += 1
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
            for waiter in self._waiters.get(job_id, ()):
                waiter.event.set()

    @property
    def waiting(self) -> int:
        return self._count

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._wake_poller.notify()

    def _poll(self) -> None:
        while True:
            with self._lock:
                while not self._waiters and not self._stopped:
                    self._wake_poller.wait()
                if self._stopped:
                    return
                watched = {job_id: set(ws) for job_id, ws in self._waiters.items()}
            self._check(watched)
            with self._lock:
                if self._stopped:
                    return
                self._wake_poller.wait(self._interval)

    def _check(self, watched: dict[str, set[_Waiter]]) -> None:
        try:
            current = self._phases_of(watched)
        except Exception:       # the database may be briefly unavailable; retry next tick
            now = time.monotonic()
            if now - self._last_error_log >= ERROR_LOG_INTERVAL:    # not 20 lines a second
                self._last_error_log = now
                log.exception("cannot read the phases of waited-for jobs; retrying")
            return
        for job_id, waiters in watched.items():
            phase = current.get(job_id)     # None: the job was deleted
            for waiter in waiters:
                if phase is not waiter.phase:
                    waiter.event.set()
