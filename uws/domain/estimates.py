"""Quotes and time remaining: pure arithmetic over a job and what the queue holds."""
from __future__ import annotations

import datetime as dt
import statistics
import time

from . import timeutil
from .model import Job
from .phases import Phase


def typical_seconds(run_seconds: list[float]) -> float | None:
    """A service's typical run time: the median of its recent runs (None: no history)."""
    return statistics.median(run_seconds) if run_seconds else None


def quote(job: Job, now: dt.datetime, typical: float | None, ahead: int,
          slots: int) -> dt.datetime | None:
    """When the job is likely to complete (UWS 1.1 §2.1.6), or None when unknown.

    ``ahead`` is the number of QUEUED jobs that run before this one; each slot
    works through them one typical run at a time, from the job's start time
    (STARTAFTER, or a retry's backoff) if that is later than now.
    """
    if job.phase is Phase.EXECUTING:
        remaining = remaining_seconds(job, now)
        if remaining is None and typical is not None and job.start_time is not None:
            run = min(typical, job.execution_duration or typical)   # it is stopped there
            return max(now, timeutil.add_seconds(job.start_time, run))
        return None if remaining is None else timeutil.add_seconds(now, remaining)
    if job.phase not in (Phase.PENDING, Phase.QUEUED, Phase.HELD) or typical is None:
        return None
    waves = ahead // max(slots, 1)
    begin = max(now, job.start_after) if job.start_after is not None else now
    return timeutil.add_seconds(begin, typical * (waves + 1))


def elapsed_seconds(job: Job, now: dt.datetime) -> float | None:
    if job.start_time is None:
        return None
    return max(0.0, ((job.end_time or now) - job.start_time).total_seconds())


#: Below this percentage an extrapolation is noise (0.01 % after 0.1 s reads as
#: "17 minutes" one moment and "3 hours" the next), so none is made.
MIN_PROGRESS = 1.0


def remaining_seconds(job: Job, now: dt.datetime) -> float | None:
    """Extrapolated from progress so far, never past the execution-duration
    deadline (the job is stopped there); None until enough progress is reported."""
    elapsed, progress = elapsed_seconds(job, now), job.progress
    if job.phase is not Phase.EXECUTING or elapsed is None or progress is None \
            or progress < MIN_PROGRESS:
        return None
    remaining = elapsed * (100.0 - progress) / progress
    if job.execution_duration:
        remaining = min(remaining, max(0.0, job.execution_duration - elapsed))
    return remaining


class TypicalRunTimes:
    """Each service's typical run time, re-read from the store at most every minute."""
    TTL = 60.0

    def __init__(self, store):
        self._store = store
        self._cache: dict[str, tuple[float, float | None]] = {}

    def get(self, service: str) -> float | None:
        now = time.monotonic()
        cached = self._cache.get(service)
        if cached is None or now - cached[0] > self.TTL:
            cached = (now, typical_seconds(self._store.recent_run_seconds(service)))
            self._cache[service] = cached
        return cached[1]
