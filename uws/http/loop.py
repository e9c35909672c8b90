"""The event loop of ``uws serve``'s waitress server (:class:`PollLoop`): ``poll()``, an
event only for the connection it was for, parked connections resting in a set kept
between turns, and the parked WAITs' deadlines.  Connections are
:class:`uws.http.server.Channel` (typed loosely here: that module imports this one).
"""
from __future__ import annotations

import collections
import select
import time
from typing import Any

from waitress import wasyncore

from .parking import Parking


class PollLoop:
    """wasyncore's ``loop`` with ``poll()`` (the ``asyncore`` a waitress server runs),
    but an event is handled only by the connection it was for: handling one event
    may close a connection and accept another under the same descriptor number,
    which must not receive the closed one's events (a hang-up would close it
    unserved).  A fresh poll set each turn, as waitress builds it: registrations
    kept between turns (epoll) could outlive a closed socket and report its events
    under a reused number.

    Parked connections are the exception (:meth:`rest`): their interest stays the
    same while parked (readable, to see a hang-up or a request pipelined behind),
    and asking each of thousands for it on every turn made a turn cost tens of
    milliseconds.  They rest in one epoll set kept between turns, which the turn's
    poll set holds as a single descriptor.  That set is kept safe against reused
    numbers: a connection leaves it before its socket is closed
    (:meth:`forget`, from ``del_channel``), its events are read only after the
    turn's other events were handled, and each goes only to the connection
    resting under that number that is still in the map.  Any change of a parked
    connection's state is reviewed by the loop's thread (:meth:`review`), which
    alone touches the set.

    Each turn also answers the parked WAITs whose deadline has come, and sleeps no
    longer than until the next one."""

    #: what a resting connection waits for (as the poll set asks a readable one)
    RESTING_EVENTS = select.POLLIN | select.POLLPRI

    def __init__(self, parking: Parking | None = None):
        self.parking = parking
        self._resting: dict[int, Any] = {}      # descriptor -> connection, in _epoll
        self._epoll = select.epoll() if hasattr(select, "epoll") else None
        self._reviews: collections.deque = collections.deque()    # filled from any thread

    def loop(self, timeout=30.0, use_poll=True, map=None, count=None):
        while map and (count is None or count > 0):
            self.turn(timeout, map)
            if count is not None:
                count -= 1

    def turn(self, timeout: float, map: dict) -> None:
        if self.parking is not None:
            now = time.monotonic()
            self.parking.expire(now)
            due = self.parking.seconds_to_next(now)
            if due is not None:
                timeout = min(timeout, due)
        self._review_all(map)
        poller = self._poller()
        wanted = {}
        # a set difference in C: the resting ones cost nothing per turn here
        awake = map.keys() - self._resting.keys() if self._resting else list(map)
        for fd in awake:
            obj = map[fd]
            flags = 0
            if obj.readable():
                flags |= select.POLLIN | select.POLLPRI
            if obj.writable() and not obj.accepting:
                flags |= select.POLLOUT
            if flags:
                poller.register(fd, flags)
                wanted[fd] = obj
        stirred = False
        if self._resting:
            assert self._epoll is not None
            poller.register(self._epoll.fileno(), select.POLLIN)
        try:
            events = poller.poll(timeout * 1000)
        except InterruptedError:
            return
        for fd, flags in events:
            obj = wanted.get(fd)
            if obj is not None and map.get(fd) is obj:
                wasyncore.readwrite(obj, flags)
            elif self._epoll is not None and fd == self._epoll.fileno():
                stirred = True
        if stirred:
            self._stir(map)

    # -- parked connections -------------------------------------------------------------

    def review(self, channel: Any) -> None:
        """From any thread: the connection was parked or left parking; the loop's
        thread moves it into or out of the resting set at its next turn.  (Leaving
        needs no wake-up here: its worker thread wakes the loop once it has written.)"""
        if self._epoll is not None:
            self._reviews.append(channel)

    def forget(self, channel: Any) -> None:
        """The connection is being closed: out of the resting set while its socket
        is still open (so that the kernel forgets it too, and a socket that gets
        its number later is not in the set)."""
        fd = channel._fileno
        if fd is not None and self._resting.get(fd) is channel:
            self._unrest(fd)

    def _review_all(self, map: dict) -> None:
        while self._reviews:
            self._place(self._reviews.popleft(), map)

    def _place(self, channel: Any, map: dict) -> None:
        """Rest a parked connection that only waits to read; wake any other."""
        fd = channel._fileno
        if fd is None or not self._in(map, fd, channel):
            return      # closed meanwhile: forget() has taken it out
        rests = channel.parked is not None and channel.readable() and not channel.writable()
        resting = self._resting.get(fd) is channel
        if rests and not resting:
            assert self._epoll is not None
            self._epoll.register(fd, self.RESTING_EVENTS)
            self._resting[fd] = channel
        elif resting and not rests:
            self._unrest(fd)

    def _unrest(self, fd: int) -> None:
        del self._resting[fd]
        try:
            assert self._epoll is not None
            self._epoll.unregister(fd)
        except OSError:     # already closed: the kernel has forgotten it
            pass

    def _stir(self, map: dict) -> None:
        """Handle the resting connections' events (a hang-up, a pipelined request),
        then see whether each still rests."""
        assert self._epoll is not None
        for fd, flags in self._epoll.poll(0):
            channel = self._resting.get(fd)
            if channel is None or not self._in(map, fd, channel):
                continue
            wasyncore.readwrite(channel, flags)
            self._place(channel, map)

    @staticmethod
    def _in(map: dict, fd: int, channel: Any) -> bool:
        """Whether ``channel`` is still the connection of that number."""
        return map.get(fd) is channel

    @staticmethod
    def _poller():
        return select.poll()

    def __getattr__(self, name):
        # the rest of what waitress reaches through ``self.asyncore`` (close_all, ...)
        return getattr(wasyncore, name)
