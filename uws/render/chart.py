"""The statistics page's chart of jobs per phase over time, as SVG geometry the
template draws inline (no script, nothing fetched: the pages' CSP allows neither)."""
from __future__ import annotations

import dataclasses
import datetime as dt

from ..domain.phases import Phase
from ..domain.timeutil import format_time

WIDTH, HEIGHT = 640, 200
#: Stroke colours (SVG attributes, not inline styles, which the CSP refuses).
COLOURS = {Phase.PENDING: "#697586", Phase.QUEUED: "#1849a9", Phase.EXECUTING: "#dc6803",
           Phase.COMPLETED: "#079455", Phase.ERROR: "#d92d20", Phase.ABORTED: "#932f19",
           Phase.HELD: "#6938ef", Phase.SUSPENDED: "#9e77ed", Phase.ARCHIVED: "#98a2b3",
           Phase.UNKNOWN: "#475467"}


@dataclasses.dataclass(frozen=True)
class Series:
    phase: Phase
    points: str         # an SVG polyline's points
    last: int           # the latest sample's count
    end: tuple[float, float]    # where the latest sample is drawn

    @property
    def colour(self) -> str:
        return COLOURS[self.phase]


@dataclasses.dataclass(frozen=True)
class Chart:
    width: int
    height: int
    top: int            # the count at the top edge
    since: str          # the axis's ends, as ISO times (the page's script shows them in
    until: str          # the reader's local time, as every other time of the page)
    samples: int
    series: list[Series]

    @property
    def since_text(self) -> str:
        return _utc(self.since)

    @property
    def until_text(self) -> str:
        return _utc(self.until)


def _utc(iso: str) -> str:
    """An axis label without a script: ``2026-12-03 16:05 UTC``."""
    return iso[:16].replace("T", " ") + " UTC"


def phase_chart(history: list[tuple[dt.datetime, Phase, int]], since: dt.datetime,
                until: dt.datetime, now: dict[Phase, int] | None = None) -> Chart:
    """One polyline per phase seen in the samples; a phase missing from a sample
    had no jobs then.  ``now``, the counts the page's table shows, ends every line at
    ``until``: the samples are minutes apart, and the chart's last point would
    otherwise disagree with the table beside it."""
    samples = len({at for at, _, _ in history})
    if now is not None:
        history = [s for s in history if s[0] < until] + \
            [(until, phase, n) for phase, n in now.items() if n]
    times = sorted({at for at, _, _ in history} | ({until} if now is not None else set()))
    counts = {(at, phase): n for at, phase, n in history}
    phases = [p for p in Phase if any(phase is p for _, phase, _ in history)]
    top = max([n for _, _, n in history] + [1])
    span = max((until - since).total_seconds(), 1.0)

    def x(at: dt.datetime) -> float:
        return round((at - since).total_seconds() / span * WIDTH, 1)

    def y(n: int) -> float:
        return round(HEIGHT - n / top * HEIGHT, 1)

    series = [Series(p, " ".join(f"{x(at)},{y(counts.get((at, p), 0))}" for at in times),
                     counts.get((times[-1], p), 0), (x(times[-1]), y(counts.get((times[-1], p), 0))))
              for p in phases]
    return Chart(WIDTH, HEIGHT, top, format_time(since), format_time(until), samples, series)
