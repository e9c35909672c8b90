"""Job-list filters (UWS 1.1 §2.2.2.1) and our paging extension, from the query string:
the one parser of both the XML list and the HTML list page.

Paging: ``extend=N`` asks for a page of N jobs, newest first, and ``start=K``
skips K (an offset, kept for clients of the proposed UWS paging).  Every full
page carries ``Link: <...>; rel="next"`` whose ``cursor`` is an opaque keyset
position, so following pages cost the same however deep they are.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
from urllib.parse import urlencode

from ..domain import numbers
from ..domain.errors import BadRequest
from ..domain.model import ListQuery, is_job_id
from ..domain.phases import Phase, parse_phase
from ..domain.timeutil import parse_time
from .http import query_value, query_values

MAX_PAGE = 10000
MAX_LAST = 2**31 - 1
MAX_START = 100000     # deeper offsets cost a scan; the Link cursor does not
DEFAULT_PAGE = 100     # start or cursor without extend


def phase_value(text: str) -> Phase:
    """A PHASE query value (the list filter, or the phase a WAIT watches); 400 if unknown."""
    try:
        return parse_phase(text)
    except ValueError as exc:
        raise BadRequest(f"PHASE: {exc}") from None


@dataclasses.dataclass(frozen=True)
class ListParams:
    """The list query parameters of a request, checked: what the XML list and the
    HTML list page both read, so both accept and refuse the same requests."""
    phases: tuple[Phase, ...] = ()
    after: dt.datetime | None = None
    last: int | None = None
    start: int = 0
    extend: int | None = None
    cursor: str | None = None                       # as sent, for links that keep it
    before: tuple[dt.datetime, str] | None = None   # the cursor decoded

    @property
    def paged(self) -> bool:
        return self.extend is not None or self.start > 0 or self.cursor is not None

    def query(self) -> ListQuery:
        """What the XML list reads: LAST, or a page (``extend``, or 100 when paging)."""
        limit = self.last if self.last is not None else \
            (self.extend or (DEFAULT_PAGE if self.paged else None))
        return ListQuery(self.phases, self.after, limit, self.start, self.before)


def list_params() -> ListParams:
    """The list query parameters of this request; BadRequest for any bad one."""
    phases = tuple(phase_value(p) for p in query_values("PHASE"))
    after = time_value("AFTER")
    last = int_value("LAST", minimum=1)
    if last is not None:
        last = min(last, MAX_LAST)      # "at most N": a larger N means every job
    start = int_value("start", minimum=0) or 0
    extend = int_value("extend", minimum=1)
    cursor = query_value("cursor")
    params = ListParams(phases, after, last, start, extend, cursor)
    if last is not None and params.paged:
        raise BadRequest("LAST cannot be combined with start, extend or cursor")
    if start > MAX_START:
        raise BadRequest(f"start: at most {MAX_START}; follow the Link header's cursor "
                         "to page deeper")
    if extend is not None and extend > MAX_PAGE:
        raise BadRequest(f"extend: at most {MAX_PAGE}")
    if cursor is not None:
        params = dataclasses.replace(params, before=decode_cursor(cursor))
    return params


def list_query() -> tuple[ListQuery, bool]:
    """The ListQuery of this request for the XML list, and whether it asked for paging."""
    params = list_params()
    return params.query(), params.paged


def int_value(name: str, minimum: int) -> int | None:
    text = query_value(name)
    if text is None:
        return None
    try:
        value = numbers.integer(text)
    except ValueError as exc:
        raise BadRequest(f"{name}: {exc}") from None
    if value < minimum:
        raise BadRequest(f"{name}: must be at least {minimum}")
    return value


def time_value(name: str) -> dt.datetime | None:
    text = query_value(name)
    if text is None:
        return None
    try:
        return parse_time(text)
    except ValueError as exc:
        raise BadRequest(f"{name}: {exc}") from None


def encode_cursor(creation_time: dt.datetime, job_id: str) -> str:
    raw = f"{creation_time.isoformat()}|{job_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str) -> tuple[dt.datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
        when, job_id = raw.split("|", 1)
        if not is_job_id(job_id):
            raise ValueError(job_id)
        return dt.datetime.fromisoformat(when), job_id
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise BadRequest("cursor: not a cursor this server issued") from None


def link_to_next(url: str) -> str:
    """The ``Link`` header naming ``url`` as the next page."""
    return f'<{url}>; rel="next"'


def next_url(list_url: str, q: ListQuery, last_ref) -> str:
    params = [("PHASE", p.value) for p in q.phases]
    if q.after is not None:
        params.append(("AFTER", q.after.isoformat() + "Z"))
    params.append(("extend", str(q.limit)))
    params.append(("cursor", encode_cursor(last_ref.creation_time, last_ref.id)))
    return f"{list_url}?{urlencode(params)}"
