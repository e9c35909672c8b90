"""Statistics of a service or of the whole server: the use case and its arithmetic.

Counts come from the maintained job counters.  Durations come from histograms kept
as jobs start and end (:mod:`uws.store.stats`), so a window of a million finished
jobs costs a read of a few hundred rows, never a scan of the jobs:

* **wait time**: from a job's creation to its start (so it includes any time the
  job spent PENDING before its owner ran it, or HELD), recorded when it starts;
* **run time**: from its start to its end, whatever the end (COMPLETED, ERROR,
  ABORTED), recorded when it ends.

Each duration lands in a log-spaced bin (``RATIO`` apart, from ``FLOOR`` seconds)
of two time buckets of the moment it was recorded: one of 5 minutes, which the
hour window reads, and one of an hour, which the day window reads (``WIDTHS``), so
either window reads at most 25 buckets.  A percentile is therefore the middle of
its bin, within about 9 % of the true value, and a window starts at the edge of a
bucket (it may reach up to one bucket width further back).  No Flask and no SQL in
here.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Iterable, Mapping
from typing import Protocol

from ..domain.errors import BadRequest
from ..domain.phases import Phase

#: Width of a time bucket of the phase samples (and of the finer histograms).
BUCKET_SECONDS = 300
#: The windows a client may ask for, in seconds.
WINDOWS = {"hour": 3600, "day": 86400}
#: The width of the histograms' time buckets each window reads, in seconds.
WIDTHS = {"hour": BUCKET_SECONDS, "day": 3600}
DEFAULT_WINDOW = "hour"
#: How long histograms and samples are kept (the longest window, and a margin).
KEEP_SECONDS = 2 * 86400
#: Consecutive bins' bounds differ by this factor (2 ** 0.25: about +-9 % at the middle).
RATIO = 2 ** 0.25
#: The upper bound of bin 0: shorter durations (and clock skew's negatives) go there.
FLOOR = 0.001
#: The last bin (about 12 days from FLOOR * RATIO ** 120): longer durations go there.
TOP_BIN = 120
PERCENTILES = (50, 90, 99)
WAIT, RUN = "wait", "run"
KINDS = (WAIT, RUN)


def bin_of(seconds: float) -> int:
    """The histogram bin of a duration."""
    if seconds <= FLOOR:
        return 0
    return min(TOP_BIN, 1 + int(math.log(seconds / FLOOR, RATIO)))


def bin_middle(index: int) -> float:
    """The value reported for a bin: the geometric middle of its bounds."""
    if index == 0:
        return FLOOR
    return FLOOR * RATIO ** (index - 0.5)


def bucket_of(when: dt.datetime, width: int = BUCKET_SECONDS) -> dt.datetime:
    """The start of the time bucket (``width`` seconds, dividing a day) holding an instant."""
    seconds = when.hour * 3600 + when.minute * 60 + when.second
    start = seconds - seconds % width
    return when.replace(hour=start // 3600, minute=start % 3600 // 60, second=start % 60,
                        microsecond=0)


def window_start(now: dt.datetime, window: str) -> dt.datetime:
    """The first bucket of a window ending now (of the width the window reads)."""
    return bucket_of(now - dt.timedelta(seconds=WINDOWS[window]), WIDTHS[window])


def parse_window(text: str | None) -> str:
    """The window a client named (``hour`` when none); BadRequest for another."""
    if text is None:
        return DEFAULT_WINDOW
    window = text.strip().lower()
    if window not in WINDOWS:
        raise BadRequest(f"window: {text!r} is not one of {', '.join(WINDOWS)}")
    return window


@dataclasses.dataclass(frozen=True)
class Durations:
    """Percentiles (seconds) of the durations recorded in a window; None without any."""
    samples: int = 0
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, bins: Mapping[int, int]) -> Durations:
        values = percentiles(bins, PERCENTILES)
        return cls(sum(bins.values()), *values)


def percentiles(bins: Mapping[int, int], wanted: Iterable[int]) -> list[float | None]:
    """The ``wanted`` percentiles of a histogram (nearest rank, as bin middles)."""
    total = sum(bins.values())
    if total <= 0:
        return [None for _ in wanted]
    ordered = sorted((b, n) for b, n in bins.items() if n > 0)
    out: list[float | None] = []
    for p in wanted:
        rank = max(1, math.ceil(p / 100 * total))
        seen = 0
        for index, n in ordered:
            seen += n
            if seen >= rank:
                out.append(bin_middle(index))
                break
    return out


@dataclasses.dataclass(frozen=True)
class Figures:
    """What one owner (or everyone) did: jobs by phase, and durations."""
    jobs: dict[Phase, int]
    wait: Durations
    run: Durations

    @property
    def queued(self) -> int:
        return self.jobs.get(Phase.QUEUED, 0)

    @property
    def held(self) -> int:
        return self.jobs.get(Phase.HELD, 0)


@dataclasses.dataclass(frozen=True)
class Report:
    """The statistics document: of one service (or the server, None) over a window;
    ``owners`` (by name) only for administrators."""
    service: str | None
    window: str
    since: dt.datetime
    until: dt.datetime
    total: Figures
    owners: dict[str, Figures] | None


#: Bins by kind then bin, of one owner (or everyone).
Bins = dict[str, dict[int, int]]


class StatsStore(Protocol):
    """What the statistics read (:class:`uws.store.stats.StatsStore`)."""

    def job_counts(self, service: str | None = None,
                   owner: str | None = None) -> dict[tuple[str, str, Phase], int]: ...
    def duration_bins(self, service: str | None, owner: str | None, width: int,
                      since: dt.datetime) -> dict[str, Bins]:
        """Bins by owner, kind and bin, of the buckets of ``width`` from ``since`` on."""
    def phase_history(self, service: str | None,
                      since: dt.datetime) -> list[tuple[dt.datetime, Phase, int]]: ...


class Statistics:
    """Reports scoped to their caller: an owner's own figures, or everyone's (and
    each owner's) for an administrator (``scope`` None)."""

    def __init__(self, store: StatsStore):
        self.store = store

    def report(self, service: str | None, scope: str | None, window: str,
               now: dt.datetime) -> Report:
        since = window_start(now, window)
        counts = self.store.job_counts(service, scope)
        bins = self.store.duration_bins(service, scope, WIDTHS[window], since)
        owners: dict[str, Figures] = {}
        for owner in sorted({o for _, o, _ in counts} | set(bins)):
            jobs: dict[Phase, int] = {}
            for (_, o, phase), n in counts.items():
                if o == owner:
                    jobs[phase] = jobs.get(phase, 0) + n
            owners[owner] = _figures(jobs, bins.get(owner, {}))
        total = _figures(_sum_jobs(f.jobs for f in owners.values()),
                         _sum_bins(bins.values()))
        return Report(service, window, since, now, total, owners if scope is None else None)

    def history(self, service: str | None, window: str,
                now: dt.datetime) -> list[tuple[dt.datetime, Phase, int]]:
        """The sampled job counts by phase (everyone's: administrators only)."""
        start = bucket_of(now - dt.timedelta(seconds=WINDOWS[window]))
        return self.store.phase_history(service, start)


def _figures(jobs: dict[Phase, int], bins: Bins) -> Figures:
    return Figures(jobs, Durations.of(bins.get(WAIT, {})), Durations.of(bins.get(RUN, {})))


def _sum_jobs(parts: Iterable[dict[Phase, int]]) -> dict[Phase, int]:
    out: dict[Phase, int] = {}
    for part in parts:
        for phase, n in part.items():
            out[phase] = out.get(phase, 0) + n
    return out


def _sum_bins(parts: Iterable[Bins]) -> Bins:
    out: Bins = {}
    for part in parts:
        for kind, bins in part.items():
            mine = out.setdefault(kind, {})
            for index, n in bins.items():
                mine[index] = mine.get(index, 0) + n
    return out
