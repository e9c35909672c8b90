"""GET /{service}/events: the caller's job events, streamed (Server-Sent Events,
``Accept: text/event-stream``) or in JSON pages for clients that poll; chosen by
Accept, so every answer says ``Vary: Accept`` (a cache must not serve one for the other)."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from flask import Blueprint, Response, current_app, request
from werkzeug.exceptions import MethodNotAllowed

from ..domain import numbers
from ..domain.errors import BadRequest
from ..render import events as render
from ..usecases import events as ev
from . import identity
from .access import service_view
from .http import base_url, jobs_api, json_response, query_value
from .negotiation import NEGOTIATED
from .paging import int_value, time_value
from .passwords import Busy

bp = Blueprint("events", __name__)

STREAM_TYPE = "text/event-stream"
MAX_ID = 2**63 - 1      # the largest event id the database holds


@bp.route("/<service>/events", methods=["GET"])
@service_view
def events(service: str):
    jobs_api().service(service)     # 404 for no such service
    feed: ev.EventFeed = current_app.extensions["uws_events"]
    scope = feed.scope(identity.current_caller(), query_value("owner"))
    if _wants_stream():
        return _stream(feed, service, scope)
    if query_value("latest") is not None:
        return _latest(feed, service, scope)
    return _page(feed, service, scope)


@bp.route("/<service>/events", methods=["POST", "PUT", "DELETE", "PATCH"])
@service_view
def events_read_only(service: str):
    """405, rather than the job route's 404 for a job named "events"."""
    raise MethodNotAllowed(valid_methods=["GET", "HEAD"])


def _wants_stream() -> bool:
    return any(kind == STREAM_TYPE and quality > 0
               for kind, quality in request.accept_mimetypes)


def _stream(feed: ev.EventFeed, service: str, scope: str | None) -> Response:
    at = _resume_at()
    # waitress tells whether the client is gone when it reads ahead; else a write fails
    gone = request.environ.get("waitress.client_disconnected") or (lambda: False)
    try:
        stream = feed.stream(service, scope, identity.current_caller(), at, gone)
    except ev.TooManyStreams as exc:
        raise Busy(str(exc), exc.retry_after) from None
    return Response(_EventStream(stream), mimetype=STREAM_TYPE,
                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **NEGOTIATED})


def _resume_at(header_first: bool = True) -> ev.Position | None:
    """After Last-Event-ID (or ?lastEventId= for clients that cannot set headers), or
    ?after=, or from ?since=; from now without any.  A stream takes the header first
    (a browser reconnecting sends it with the page's first URL); a poll its query
    (the next page's URL), the header only without one."""
    names = ["lastEventId", "after"]
    header = request.headers.get("Last-Event-ID")
    for name in (["Last-Event-ID", *names] if header_first else [*names, "Last-Event-ID"]):
        text = header if name == "Last-Event-ID" else query_value(name)
        if text is not None:
            return ev.Position(after=_event_id(name, text))
    since = time_value("since")
    return None if since is None else ev.Position(since=since)


def _event_id(name: str, text: str) -> int:
    try:
        value = numbers.integer(text)
    except ValueError:
        raise BadRequest(f"{name}: not an event id: {text!r}") from None
    if not 0 <= value <= MAX_ID:
        raise BadRequest(f"{name}: not an event id: {text!r}")
    return value


class _EventStream:
    """The response body of a stream; closing it (the client left, or the body was
    never sent) frees the stream's place at once."""

    def __init__(self, stream: ev.Stream):
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        yield render.retry(ev.RETRY_MS)
        for event in self._stream:
            yield render.HEARTBEAT if event is None else render.sse(event)

    def close(self) -> None:
        self._stream.close()


def _limit() -> int:
    return int_value("limit", 1) or ev.DEFAULT_PAGE


def _latest(feed: ev.EventFeed, service: str, scope: str | None) -> Response:
    if any(query_value(name) is not None for name in ("after", "since", "lastEventId")):
        raise BadRequest("latest: cannot be combined with after, since or lastEventId")
    # lastEventId: where to go on from with ?after= (later events of these jobs follow it)
    found = feed.latest(service, scope, _limit())
    return json_response({"events": [render.event(e) for e in found.events],
                          "lastEventId": found.last_id, "next": None, "pending": found.pending},
                         headers=NEGOTIATED)


def _page(feed: ev.EventFeed, service: str, scope: str | None) -> Response:
    resumed = _resume_at(header_first=False)    # as a stream resumes, the next page first
    at = ev.Position(after=None if resumed is None else resumed.after,
                     since=time_value("since"))
    limit = _limit()
    found = feed.page(service, scope, at, limit)
    events = found.events
    doc: dict[str, Any] = {"events": [render.event(e) for e in events],
                           "lastEventId": found.last_id,
                           "next": None, "pending": found.pending}
    headers = dict(NEGOTIATED)
    if len(events) == limit:
        doc["next"] = _next_url(service, events[-1].seq, limit)
        headers["Link"] = f'<{doc["next"]}>; rel="next"'
    return json_response(doc, headers=headers)


def _next_url(service: str, after: int, limit: int) -> str:
    query: dict[str, str | int] = {"after": after, "limit": limit}
    owner = query_value("owner")
    if owner is not None:
        query["owner"] = owner
    since = query_value("since")
    if since is not None:
        query["since"] = since
    return f"{base_url()}{service}/events?{urlencode(query)}"
