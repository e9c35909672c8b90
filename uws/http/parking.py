"""Blocking GETs (``WAIT``) parked without a thread, under ``uws serve``.

A worker thread checks a WAIT as any request (identity, owner, job, the WAIT and
PHASE values).  When the answer must wait, the view calls :meth:`Ticket.park`,
which raises :class:`Parked`: the thread is freed (:meth:`uws.http.server.Channel.service`
catches it), the request stays at the head of its connection's queue, and the
waiting machinery holds only a callback (:meth:`Ticket.wake`).  The job leaving
its phase, the deadline (checked by the event loop, :meth:`Parking.expire`) or
the server stopping hands the same request to a worker thread again; the view
then answers, after a timeout without waiting again (:attr:`Ticket.answer_now`).
A client hanging up while parked drops its waiter at once (:meth:`Ticket.drop`,
from the connection's close).

Parked requests hold a connection each, and no thread: :class:`Parking` bounds
them all together (``max_waiters``) and per client address (a share of them), and
past a bound the answer is the job document at once.

Under another WSGI server (gunicorn, the Flask test client) there is no ticket in
the environ (:func:`ticket_of`) and a WAIT holds its thread, as before.
"""
from __future__ import annotations

import collections
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

#: the WSGI environ key of a request's :class:`Ticket`
ENVIRON_KEY = "uws.wait_ticket"

# A ticket's states.
RUNNING = "running"       # in a worker thread
PARKING = "parking"       # Parked raised, not yet caught by the channel
PARKED = "parked"         # no thread: waiting for a wake, its deadline or a hang-up
DROPPED = "dropped"       # its connection closed


class Parked(BaseException):
    """Raised by :meth:`Ticket.park` through the app to the channel: not an
    ``Exception``, so that no error handler on the way turns it into an answer."""

    def __init__(self, ticket: Ticket):
        super().__init__()
        self.ticket = ticket


def ticket_of(environ: dict) -> Ticket | None:
    """The request's ticket: None when the server cannot park requests."""
    return environ.get(ENVIRON_KEY)


def per_address_share(limit: int) -> int:
    """Parked WAITs one client address may hold: all of a small limit, else a tenth
    (at least 8), so that one address cannot take every place."""
    return limit if limit <= 8 else max(8, limit // 10)


class Parking:
    """The parked WAITs of one server: their bounds and deadlines (one lock for all)."""

    def __init__(self, limit: int, per_address: int, pull_trigger: Callable[[], None]):
        self.limit = limit
        self.per_address = per_address
        self._pull_trigger = pull_trigger      # wakes the event loop for an earlier deadline
        self.lock = threading.Lock()
        self.count = 0
        self._of: collections.Counter = collections.Counter()
        self._deadlines: list[tuple[float, int, Ticket]] = []
        self._order = itertools.count()

    def admit(self, ticket: Ticket) -> bool:
        """Under the lock: take a place for the ticket, if one is free."""
        if self.count >= self.limit or self._of[ticket.address] >= self.per_address:
            return False
        self.count += 1
        self._of[ticket.address] += 1
        return True

    def release(self, ticket: Ticket) -> None:
        """Under the lock: give its place back."""
        self.count -= 1
        self._of[ticket.address] -= 1
        if self._of[ticket.address] <= 0:
            del self._of[ticket.address]

    def schedule(self, ticket: Ticket) -> None:
        """Under the lock: expire the ticket at its deadline."""
        assert ticket.deadline is not None
        earliest = not self._deadlines or ticket.deadline < self._deadlines[0][0]
        heapq.heappush(self._deadlines, (ticket.deadline, next(self._order), ticket))
        if len(self._deadlines) > 2 * self.count + 1024:    # many left early: forget them
            self._deadlines = [d for d in self._deadlines if d[2].state == PARKED]
            heapq.heapify(self._deadlines)
        if earliest:
            self._pull_trigger()

    def seconds_to_next(self, now: float) -> float | None:
        """How long the event loop may sleep before a deadline (None: no deadline)."""
        deadlines = self._deadlines
        return max(0.0, deadlines[0][0] - now) if deadlines else None

    def expire(self, now: float) -> None:
        """From the event loop: answer the parked WAITs whose deadline has come."""
        due = []
        with self.lock:
            while self._deadlines and self._deadlines[0][0] <= now:
                _, _, ticket = heapq.heappop(self._deadlines)
                if ticket.state == PARKED and ticket.deadline is not None \
                        and ticket.deadline <= now:
                    ticket.answer_now = True
                    due.append(ticket)
        for ticket in due:
            ticket.wake()


class Ticket:
    """One request's WAIT across its dispatches (kept on the request)."""

    __slots__ = ("channel", "parking", "address", "deadline", "answer_now", "waited", "state",
                 "_subscription", "_woken")

    def __init__(self, channel: Any, parking: Parking):
        self.channel = channel
        self.parking = parking
        self.address: str = channel.client_host
        self.deadline: float | None = None      # monotonic; set at the first park()
        self.answer_now = False     # the deadline came: answer without waiting again
        self.waited: Any = None     # the phase waited on (the view's to keep)
        self.state = RUNNING
        self._subscription: Any = None
        self._woken = False         # woken between park() and parked()

    def park(self, subscription: Any, seconds: float) -> None:
        """Free the thread (raises :class:`Parked`) until ``subscription`` wakes it or
        ``seconds`` from the first call pass; returns (the subscription cancelled)
        when the answer is due now: the deadline has passed, or no place is free."""
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + seconds
        with self.parking.lock:
            admitted = self.deadline > now and self.parking.admit(self)
            if admitted:
                self.state, self._subscription, self._woken = PARKING, subscription, False
        if not admitted:
            subscription.cancel()
            return
        raise Parked(self)

    def parked(self) -> None:
        """From the channel, once the thread has let go of the request."""
        with self.parking.lock:
            if self.state != PARKING:
                return      # dropped meanwhile
            if not self._woken:
                self.state = PARKED
                self.channel.parked = self
                self.parking.schedule(self)
                return
            self._leave()
        self._resume()

    def wake(self) -> None:
        """From any thread: the job changed, the deadline came, or the server stops."""
        with self.parking.lock:
            if self.state == PARKING:
                self._woken = True      # parked() resumes it
                return
            if self.state != PARKED:
                return
            self._leave()
        self._resume()

    def drop(self) -> None:
        """From the event loop: the connection closed; forget the waiter now."""
        with self.parking.lock:
            if self.state not in (PARKING, PARKED):
                return
            subscription = self._subscription
            self._leave()
            self.state = DROPPED
        subscription.cancel()

    def _leave(self) -> None:
        """Under the lock: out of the parked ones, into a worker thread."""
        self.parking.release(self)
        self.state = RUNNING
        self.channel.parked = None
        if self.answer_now:
            self._subscription.cancel()     # only its own lock: no order to break
        self._subscription = None

    def _resume(self) -> None:
        self.channel.server.add_task(self.channel)
