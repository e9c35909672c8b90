"""One page of a job list for browsers: filters, a window of jobs and links around it.

The query is read by the XML list's parser (:func:`uws.web.paging.list_params`), so
the same requests are accepted and refused: ``PHASE`` (repeatable), ``AFTER``,
``LAST`` (the newest N, on one page), ``start`` (offset), ``extend`` (page size) and
``cursor`` (a position from the XML list's Link header).  A page shows at most
MAX_PAGE_SIZE rows.  The total is one index-only count; a page is one bounded read.
"""
from __future__ import annotations

import dataclasses
from urllib.parse import urlencode

from ..domain.model import ListQuery
from ..domain.phases import Phase
from ..domain.timeutil import format_time
from . import paging

PAGE_SIZE = 50
MAX_PAGE_SIZE = 500     # rows one page shows at most (the XML list allows paging.MAX_PAGE)
FILTER_PHASES = tuple(p for p in Phase if p is not Phase.UNKNOWN)   # never set here


@dataclasses.dataclass(frozen=True)
class PageRequest:
    asked: paging.ListParams
    size: int

    @property
    def phases(self) -> tuple[Phase, ...]:
        return self.asked.phases

    @property
    def start(self) -> int:
        return self.asked.start

    @property
    def last(self) -> int | None:
        return self.asked.last

    def filters(self) -> ListQuery:
        return ListQuery(self.phases, self.asked.after, before=self.asked.before)

    def window(self, total: int) -> ListQuery:
        return dataclasses.replace(self.filters(), limit=max(min(self.size, total - self.start), 0),
                                   offset=self.start)

    def params(self, **changes) -> list[tuple[str, str]]:
        """Query pairs of this request with some values changed (None drops one)."""
        a = self.asked
        values = {"PHASE": [p.value for p in a.phases],
                  "AFTER": format_time(a.after) if a.after else None,
                  "LAST": a.last, "extend": None if a.extend is None else self.page_extend,
                  "start": a.start or None,
                  "cursor": a.cursor}
        values.update(changes)
        return [(name, str(v)) for name, vs in values.items()
                for v in (vs if isinstance(vs, list) else [vs]) if v is not None]

    @property
    def page_extend(self) -> int | None:
        """The extend a link to another page carries: none for the default size."""
        return None if self.size == PAGE_SIZE else self.size


def page_request() -> PageRequest:
    asked = paging.list_params()
    size = min(asked.last or asked.extend or PAGE_SIZE, MAX_PAGE_SIZE)
    return PageRequest(asked, size)


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
        # LAST allows no paging: past a page of it, the list goes on uncapped
        return self.url(start=self.last, LAST=None, extend=self.request.page_extend)

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
