"""Job events: what clients follow instead of polling each job.

Every change of a job's existence or phase is logged by the store in the
changing transaction (:mod:`uws.store.events`).  Here: reading that log for a
caller (:class:`EventFeed`, always scoped to the caller's own jobs unless an
administrator asks), and the streams that follow it live.

A stream holds an HTTP thread, so streams are bounded per server and per owner
(:class:`TooManyStreams` past the bound) and each ends after
``event_stream_seconds`` (clients reconnect and resume after their last event).
It wakes when a change is committed: in this process through the store's
listeners, from other processes through PostgreSQL's LISTEN (the :class:`Bell`
is a :class:`uws.usecases.ports.ChangeSink`); without that channel (SQLite, or while it
is down) it reads the log every :data:`POLL` seconds.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

from ..domain.errors import BadRequest, Forbidden, UWSError
from ..domain.model import Caller, EventPage, JobEvent
from .ports import ChangeSink, EventStore, Settings

#: seconds between two comment lines on an idle stream (keeps proxies from closing it)
HEARTBEAT = 15.0
#: how long a client waits before reconnecting, in milliseconds (the SSE ``retry:``)
RETRY_MS = 2000
#: seconds between two reads of the log when changes are not pushed (SQLite)
POLL = 1.0
#: seconds between two reads while written events wait for older transactions
SETTLE_POLL = 0.1
#: seconds between two checks that the client is still connected, where the server can tell
CHECK = 1.0
#: events per page (polling) and per read (streams)
MAX_PAGE = 1000
DEFAULT_PAGE = 100


class TooManyStreams(UWSError):
    """Past the bound of concurrent streams: retry after ``retry_after`` seconds."""
    status = 503

    def __init__(self, message: str, retry_after: int = 5):
        super().__init__(message)
        self.retry_after = retry_after


class Bell:
    """Rings at every committed change this process hears of; streams wait on it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._rings = 0
        self.pushed = False         # other processes' changes ring it too (LISTEN is up)
        self.stopped = False

    def notify(self, job_id: str | None = None) -> None:
        with self._cond:
            self._rings += 1
            self._cond.notify_all()

    def set_pushed(self, pushed: bool) -> None:
        self.pushed = pushed
        self.notify()       # changes may have been missed while it was down: read again

    def mark(self) -> int:
        with self._cond:
            return self._rings

    def wait(self, mark: int, timeout: float) -> None:
        """Until a ring after ``mark``, :meth:`stop`, or ``timeout`` seconds."""
        with self._cond:
            self._cond.wait_for(lambda: self._rings != mark or self.stopped, timeout)

    def stop(self) -> None:
        with self._cond:
            self.stopped = True
            self._cond.notify_all()


class Sinks:
    """One :class:`uws.usecases.ports.ChangeSink` passing everything to several."""

    def __init__(self, *sinks: ChangeSink):
        self._sinks = sinks

    def notify(self, job_id: str) -> None:
        for sink in self._sinks:
            sink.notify(job_id)

    def set_pushed(self, pushed: bool) -> None:
        for sink in self._sinks:
            sink.set_pushed(pushed)


@dataclasses.dataclass(frozen=True)
class Position:
    """Where a reading starts: after event ``after`` (its id), at or after ``since``."""
    after: int | None = None
    since: dt.datetime | None = None


class EventFeed:
    """The use cases of the event log for one server."""

    def __init__(self, *, config: Settings, store: EventStore, bell: Bell):
        self.config = config
        self.store = store
        self.bell = bell
        self.heartbeat = HEARTBEAT
        self._lock = threading.Lock()
        self._streams: Counter[str] = Counter()     # open streams per owner

    def scope(self, caller: Caller, owner: str | None) -> str | None:
        """Whose events ``caller`` reads: its own; an administrator's are everyone's,
        or ``owner``'s.  Forbidden when someone else asks for another owner's."""
        if caller.admin:
            return owner
        if owner is not None and owner != caller.owner:
            raise Forbidden("only administrators may follow another owner's jobs")
        return caller.owner

    def page(self, service: str, scope: str | None, at: Position, limit: int) -> EventPage:
        """Up to ``limit`` events from ``at`` on, in log order; ``pending`` when more
        are committed but wait for older transactions to end (ask again shortly)."""
        return self.store.events_after(service, scope, at.after, at.since, _bounded(limit))

    def latest(self, service: str, scope: str | None, limit: int) -> EventPage:
        """The newest event of each of the ``limit`` jobs changed last, in log order."""
        return self.store.latest_events(service, scope, _bounded(limit))

    def last_event_id(self, service: str, scope: str | None) -> int:
        """The id after which a reader that starts now goes on (0: from the start)."""
        return self.store.last_event_id(service, scope)

    def stream(self, service: str, scope: str | None, caller: Caller, at: Position | None,
               disconnected: Callable[[], bool] = lambda: False) -> Stream:
        """A stream of events from ``at`` (from now when None) then live.  Raises
        TooManyStreams past the server's or the caller's bound."""
        self._enter(caller.owner)
        try:
            if at is None:
                at = Position(after=self.last_event_id(service, scope))
        except BaseException:
            self._leave(caller.owner)
            raise
        return Stream(self, service, scope, at, caller.owner, disconnected)

    @property
    def open_streams(self) -> int:
        with self._lock:
            return sum(self._streams.values())

    def stop(self) -> None:
        """End every stream (server shutdown)."""
        self.bell.stop()

    def _enter(self, owner: str) -> None:
        with self._lock:
            if sum(self._streams.values()) >= self.config.event_stream_limit:
                raise TooManyStreams("too many event streams are open on this server; "
                                     "retry later")
            if self._streams[owner] >= self.config.event_streams_per_owner:
                raise TooManyStreams(f"you already have {self._streams[owner]} event streams "
                                     "open, the limit; close one or retry later")
            self._streams[owner] += 1

    def _leave(self, owner: str) -> None:
        with self._lock:
            self._streams[owner] -= 1
            if self._streams[owner] <= 0:
                del self._streams[owner]


class Stream:
    """Iterates over events as they are committed, and None when a heartbeat is due;
    ends after ``event_stream_seconds``, at shutdown or when the client is gone.
    :meth:`close` (also called when iteration ends) frees its place."""

    def __init__(self, feed: EventFeed, service: str, scope: str | None, at: Position,
                 owner: str, disconnected: Callable[[], bool]):
        self._feed = feed
        self._service = service
        self._scope = scope
        self._at = at
        self._owner = owner
        self._disconnected = disconnected
        self._closed = False

    def __iter__(self) -> Iterator[JobEvent | None]:
        feed, bell = self._feed, self._feed.bell
        now = time.monotonic()
        end = now + feed.config.event_stream_seconds
        beat = now + feed.heartbeat
        try:
            while not bell.stopped and time.monotonic() < end:
                mark = bell.mark()      # a change committed after it is read below
                page = feed.store.events_after(self._service, self._scope, self._at.after,
                                               self._at.since, MAX_PAGE)
                for event in page.events:
                    yield event
                    self._at = Position(after=event.seq)
                if len(page.events) == MAX_PAGE:
                    continue
                read_at = time.monotonic() + self._pause(page.pending)
                while bell.mark() == mark and not bell.stopped:
                    now = time.monotonic()
                    if now >= end or self._disconnected():
                        return
                    if now >= read_at:
                        break
                    if now >= beat:
                        yield None
                        beat = now + feed.heartbeat
                    bell.wait(mark, min(read_at, beat, end, now + CHECK) - now)
        finally:
            self.close()

    def _pause(self, pending: bool) -> float:
        """How long until the log is read again if nothing rings the bell."""
        if pending:
            return SETTLE_POLL
        if not self._feed.bell.pushed:
            return POLL
        return float("inf")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._feed._leave(self._owner)


def _bounded(limit: int) -> int:
    if not 1 <= limit <= MAX_PAGE:
        raise BadRequest(f"limit: must be from 1 to {MAX_PAGE}")
    return limit
