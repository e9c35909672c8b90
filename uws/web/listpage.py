"""One page of a job list for browsers: filters, a window of jobs and links around it.

The same query names as the XML list: ``PHASE`` (repeatable), ``AFTER``,
``LAST`` (caps the whole list), ``start`` (offset) and ``extend`` (page size).
The total is one index-only count; a page is one bounded read.
"""
from __future__ import annotations

import dataclasses
from urllib.parse import urlencode

from ..errors import BadRequest
from ..phases import Phase, parse_phase
from ..model import ListQuery
from ..timeutil import format_time
from . import paging
from .http import query_values

PAGE_SIZE = 50
FILTER_PHASES = tuple(p for p in Phase if p is not Phase.UNKNOWN)   # never set here


@dataclasses.dataclass(frozen=True)
class PageRequest:
    phases: tuple[Phase, ...]
    after: object
    last: int | None
    start: int
    size: int

    def filters(self) -> ListQuery:
        return ListQuery(self.phases, self.after)

    def window(self, total: int) -> ListQuery:
        return ListQuery(self.phases, self.after, max(min(self.size, total - self.start), 0),
                         self.start)

    def params(self, **changes) -> list[tuple[str, str]]:
        """Query pairs of this request with some values changed (None drops one)."""
        values = {"PHASE": [p.value for p in self.phases],
                  "AFTER": format_time(self.after) if self.after else None,
                  "LAST": self.last, "extend": None if self.size == PAGE_SIZE else self.size,
                  "start": self.start or None}
        values.update(changes)
        return [(name, str(v)) for name, vs in values.items()
                for v in (vs if isinstance(vs, list) else [vs]) if v is not None]


def page_request() -> PageRequest:
    try:
        phases = tuple(parse_phase(p) for p in query_values("PHASE"))
    except ValueError as exc:
        raise BadRequest(f"PHASE: {exc}") from None
    start = paging.int_value("start", minimum=0) or 0
    if start > paging.MAX_START:
        raise BadRequest(f"start: at most {paging.MAX_START}")
    size = min(paging.int_value("extend", minimum=1) or PAGE_SIZE, 500)
    return PageRequest(phases, paging.time_value("AFTER"),
                       paging.int_value("LAST", minimum=1), start, size)


@dataclasses.dataclass(frozen=True)
class Page:
    """What the list template shows around the jobs of one page."""
    request: PageRequest
    total: int
    shown: int
    list_url: str

    @property
    def first(self) -> int:
        return self.request.start + 1 if self.shown else 0

    @property
    def last(self) -> int:
        return self.request.start + self.shown

    def url(self, **changes) -> str:
        query = urlencode(self.request.params(**changes))
        return f"{self.list_url}?{query}" if query else self.list_url

    @property
    def previous_url(self) -> str | None:
        if self.request.start <= 0:
            return None
        return self.url(start=max(self.request.start - self.request.size, 0) or None)

    @property
    def next_url(self) -> str | None:
        if self.last >= self.total:
            return None
        return self.url(start=self.last)

    def phase_filters(self) -> list[tuple[str, bool, str]]:
        """(phase, selected, URL toggling it) for each phase."""
        chosen = [p.value for p in self.request.phases]
        out = []
        for phase in FILTER_PHASES:
            on = phase.value in chosen
            toggled = [p for p in chosen if p != phase.value] if on else chosen + [phase.value]
            out.append((phase.value, on, self.url(PHASE=toggled, start=None)))
        return out

    @property
    def all_phases_url(self) -> str:
        return self.url(PHASE=[], start=None)


def load(api, service: str, list_url: str, caller) -> tuple[Page, list]:
    """The page asked for and its jobs (newest first)."""
    req = page_request()
    total = api.count(service, req.filters(), caller)
    if req.last is not None:
        total = min(total, req.last)
    window = req.window(total)
    refs = api.list(service, window, caller) if window.limit else []
    return Page(req, total, len(refs), list_url), refs
