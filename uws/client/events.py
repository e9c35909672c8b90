"""Job events (this package's extension, README "Events"): pages of JSON to poll, or a
Server-Sent Events stream to follow, resumed after the last event seen.

Every integer the server sends (an event's id, ``lastEventId``, a stream's ``id:`` and
``retry:``) is checked to be one: anything else is a ProtocolError naming it.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import re
import time
from collections.abc import Iterable, Iterator

from . import jsonfields as f
from .errors import ConnectionFailed, HTTPError, ProtocolError
from .http import Transport
from .urls import child_url, resolved

STREAM = {"Accept": "text/event-stream"}
RETRY_S = 2.0           # before reconnecting, until the server's ``retry:`` says otherwise
MAX_RETRY_S = 60.0
IDLE_S = 45.0           # the server sends a heartbeat every 15 s
MAX_PAGES = 100_000
_DIGITS = re.compile(rb"[0-9]{1,19}")       # an event id fits the database's 64 bits


@dataclasses.dataclass(frozen=True)
class Event:
    id: int
    job_id: str
    old_phase: str | None           # None: the job was created
    new_phase: str | None           # None: the job was deleted
    time: dt.datetime | None
    service: str | None = None
    batch_id: str | None = None
    owner_id: str | None = None
    progress: float | None = None   # a progress report (old and new phase both EXECUTING)


@dataclasses.dataclass(frozen=True)
class EventPage:
    events: tuple[Event, ...]
    last_event_id: int              # where to go on from (``after``)
    next: str | None                # the next page's URL, when this one is full
    pending: bool                   # more events committed, not yet deliverable


class EventOperations:
    """The event operations of a Client (its job list at ``url``, its ``http``)."""

    url: str
    http: Transport

    def events(self, after: int | None = None, since: str | None = None,
               owner: str | None = None, limit: int | None = None) -> EventPage:
        """One page of the caller's events, oldest first: after event ``after`` and/or
        at or after the time ``since``."""
        params = _query(after=after, since=since, owner=owner, limit=limit)
        reply = self.http.get(child_url(self.url, "events"), params=params)
        return parse_page(reply.body, reply.url)

    def all_events(self, after: int | None = None, since: str | None = None,
                   owner: str | None = None) -> Iterator[Event]:
        """Every event there is now, page after page."""
        page = self.events(after, since, owner, limit=1000)
        for _ in range(MAX_PAGES):
            yield from page.events
            if page.next is None:
                return
            reply = self.http.get(page.next)
            page = parse_page(reply.body, reply.url)
        raise ProtocolError(f"{self.url}: more than {MAX_PAGES} pages of events")

    def latest_event_id(self, owner: str | None = None) -> int:
        """The id to follow on from to miss nothing from now on."""
        reply = self.http.get(child_url(self.url, "events"),
                              params={"latest": "", "limit": "1", **_query(owner=owner)})
        return parse_page(reply.body, reply.url).last_event_id

    def follow_events(self, after: int | None = None, since: str | None = None,
                      owner: str | None = None, idle: float = IDLE_S) -> Iterator[Event]:
        """Events as they happen, without end: a stream that ends or breaks (the server
        ends each after a while) is opened again with ``Last-Event-ID``, the last event
        yielded, so none is missed or repeated. Without ``after`` or ``since``, from now."""
        if after is None and since is None:
            after = self.latest_event_id(owner)
        url, delay = child_url(self.url, "events"), RETRY_S
        while True:
            headers = dict(STREAM)
            if after is not None:
                headers["Last-Event-ID"] = str(after)
            params = _query(since=since if after is None else None, owner=owner)
            try:
                for item in read_stream(self.http.event_lines(url, idle, headers=headers,
                                                              params=params), url):
                    if isinstance(item, Event):
                        after = item.id
                        yield item
                    else:
                        delay = min(item / 1000, MAX_RETRY_S)
            except ConnectionFailed:
                pass
            except HTTPError as exc:
                if exc.status != 503:       # 503: too many streams for now
                    raise
            time.sleep(delay)


def _query(**values) -> dict[str, str]:
    return {name: str(value) for name, value in values.items() if value is not None}


def parse_page(body: bytes, url: str) -> EventPage:
    data = f.document(body, f"{url} (a page of events)")
    following = f.text(data, "next", url, optional=True)
    return EventPage(events=tuple(parse_event(e, url) for e in f.items(data, "events", url)),
                     last_event_id=_int(f.integer(data, "lastEventId", url)),
                     next=None if following is None else resolved(url, following),
                     pending=f.flag(data, "pending", url))


def parse_event(data: dict, where: str) -> Event:
    where = f"{where}: an event"
    return Event(id=_int(f.integer(data, "id", where)), job_id=f.text(data, "jobId", where) or "",
                 old_phase=f.text(data, "oldPhase", where, optional=True),
                 new_phase=f.text(data, "newPhase", where, optional=True),
                 time=f.time(data, "time"), service=f.text(data, "service", where, optional=True),
                 batch_id=f.text(data, "batchId", where, optional=True),
                 owner_id=f.text(data, "ownerId", where, optional=True),
                 progress=f.number(data, "progress", where, optional=True))


def _int(value: int | None) -> int:
    assert value is not None        # f.integer raised for a missing one
    return value


def read_stream(lines: Iterable[bytes], url: str) -> Iterator[Event | int]:
    """The events of a Server-Sent Events stream, and each ``retry:`` (milliseconds) as an
    int. Comments (heartbeats) and unknown fields are skipped, as the format says."""
    data: list[bytes] = []
    event_id: bytes | None = None
    for line in lines:
        if not line:
            if data:
                yield _stream_event(b"\n".join(data), event_id, url)
            data, event_id = [], None
            continue
        name, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if name == b"data":
            data.append(value)
        elif name == b"id":
            event_id = value
        elif name == b"retry":
            yield _stream_int("retry", value, url)


def _stream_event(data: bytes, event_id: bytes | None, url: str) -> Event:
    if event_id is not None:
        _stream_int("id", event_id, url)
    found = parse_event(f.document(data, f"{url}: an event's data"), url)
    return found


def _stream_int(name: str, value: bytes, url: str) -> int:
    if not _DIGITS.fullmatch(value):
        raise ProtocolError(f"{url}: the stream's {name}: is not an integer: "
                            f"{value[:40].decode('utf-8', 'replace')!r}")
    return int(value)
