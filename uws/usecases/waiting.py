"""Blocking GET support: wake waiters when a job's phase changes.

Changes made in this process wake waiters at once (the store calls
:meth:`PhaseWatch.notify`).  Changes made by other processes sharing the
database reach :meth:`PhaseWatch.notify` too when the store pushes them (a
PostgreSQL LISTEN, see :meth:`PhaseWatch.set_pushed`); otherwise (SQLite, or
while that connection is down) one poller thread, only while someone waits,
reads the phases of all waited-for jobs in a single query every ``interval``
seconds.  So the cost is one small query per interval however many wait, and
none at all while changes are pushed.

A waiter is either a blocked thread (:meth:`PhaseWatch.wait`, bounded by ``limit``:
each holds one) or a :class:`Subscription` (:meth:`PhaseWatch.subscribe`), a
callback for a request parked by ``uws serve`` without a thread
(:mod:`uws.http.parking`), which its caller bounds.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable

from ..domain import timing
from ..domain.phases import Phase

log = logging.getLogger(__name__)
ERROR_LOG_INTERVAL = 60.0   # seconds between two logged failures of the poller
RECENT = 10000              # job ids whose last notification is remembered (see mark())


class _Waiter:
    """A blocked request's thread waiting on its event."""
    __slots__ = ("phase", "event")

    def __init__(self, phase: Phase):
        self.phase = phase
        self.event = threading.Event()


class Subscription:
    """A wait that holds no thread: ``wake`` is called once, from whichever thread
    sees the job leave ``phase`` (or from :meth:`PhaseWatch.stop`), unless
    :meth:`cancel` came first."""
    __slots__ = ("phase", "job_id", "wake", "_watch")

    def __init__(self, watch: PhaseWatch, job_id: str, phase: Phase, wake: Callable[[], None]):
        self.phase = phase
        self.job_id = job_id
        self.wake = wake
        self._watch = watch

    def cancel(self) -> None:
        """Forget it at once (its client hung up, or it timed out): no wake follows."""
        self._watch._unsubscribe(self)


class PhaseWatch:
    def __init__(self, phases_of, interval: float = timing.WAIT_POLL, limit: int = 1000):
        self._phases_of = phases_of      # callable: ids -> {id: Phase}
        self._interval = interval
        self._limit = limit
        self._lock = threading.Lock()
        self._waiters: dict[str, set[_Waiter | Subscription]] = defaultdict(set)
        self._count = 0         # blocked threads and subscriptions
        self._blocked = 0       # blocked threads (bounded by ``limit``)
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
            if self._blocked >= self._limit or self._stopped:
                return False
            self._add(job_id, waiter, since)
            self._blocked += 1
        try:
            return waiter.event.wait(timeout)
        finally:
            with self._lock:
                self._blocked -= 1
                self._remove(job_id, waiter)

    def subscribe(self, job_id: str, phase: Phase, wake: Callable[[], None],
                  since: int | None = None) -> Subscription | None:
        """As :meth:`wait`, holding no thread: ``wake`` is called once the job leaves
        ``phase`` (the caller keeps the deadline, and cancels the subscription at it).
        None when the answer is due now: a change came after ``since``, or the watch
        has stopped.  The caller bounds how many it holds (they cost no thread)."""
        with self._lock:
            if self._stopped or (since is not None and self._notified.get(job_id, -1) > since):
                return None
            subscription = Subscription(self, job_id, phase, wake)
            self._add(job_id, subscription, since)
            return subscription

    def _add(self, job_id: str, waiter, since: int | None) -> None:
        """Under the lock."""
        self._waiters[job_id].add(waiter)
        self._count += 1
        if since is None or since < self._sure_since:
            self._recheck = True    # a change may have been missed: read once
        self._wake_poller.notify()

    def _remove(self, job_id: str, waiter) -> bool:
        """Under the lock: whether it was still there."""
        bucket = self._waiters.get(job_id)
        if bucket is None or waiter not in bucket:
            return False
        bucket.discard(waiter)
        self._count -= 1
        if not bucket:
            del self._waiters[job_id]
        return True

    def _unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            self._remove(subscription.job_id, subscription)

    def _fire(self, job_id: str, waiters) -> list[Subscription]:
        """Under the lock: wake blocked threads, and take out the subscriptions
        to be woken (outside the lock: their wake takes other locks)."""
        taken = []
        for waiter in list(waiters):
            if isinstance(waiter, Subscription):
                if self._remove(job_id, waiter):
                    taken.append(waiter)
            else:
                waiter.event.set()
        return taken

    @staticmethod
    def _wake(subscriptions: list[Subscription]) -> None:
        for subscription in subscriptions:
            try:
                subscription.wake()
            except Exception:       # one broken waiter must not keep the others asleep
                log.exception("waking a parked WAIT failed")

    def notify(self, job_id: str) -> None:
        with self._lock:
            self._seq += 1
            self._remember(job_id)
            taken = self._fire(job_id, self._waiters.get(job_id, ()))
        self._wake(taken)

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
            taken = [s for job_id, bucket in list(self._waiters.items())
                     for s in self._fire(job_id, bucket)]
        self._wake(taken)

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

    def _check(self, watched: dict[str, set]) -> bool:
        try:
            current = self._phases_of(watched)
        except Exception:       # the database may be briefly unavailable; retry next tick
            now = time.monotonic()
            if now - self._last_error_log >= ERROR_LOG_INTERVAL:    # not 20 lines a second
                self._last_error_log = now
                log.exception("cannot read the phases of waited-for jobs; retrying")
            return False
        taken = []
        with self._lock:
            for job_id, waiters in watched.items():
                phase = current.get(job_id)     # None: the job was deleted
                taken += self._fire(job_id, [w for w in waiters if phase is not w.phase])
        self._wake(taken)
        return True
