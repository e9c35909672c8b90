"""Batch records and the rule of a batch's aggregate status.  Pure: no storage or HTTP."""
from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import re

from .phases import Phase

_BATCH_ID = re.compile(r"[0-9a-f]{32}")


def is_batch_id(text: str) -> bool:
    return _BATCH_ID.fullmatch(text) is not None


class Status(str, enum.Enum):
    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"
    PARTIALLY_FAILED = "partially failed"
    ABORTED = "aborted"

    def __str__(self) -> str:
        return self.value


#: Jobs not started yet, and jobs started but not finished.
WAITING = frozenset({Phase.PENDING, Phase.HELD})
RUNNING = frozenset({Phase.QUEUED, Phase.EXECUTING, Phase.SUSPENDED, Phase.UNKNOWN})
#: What REPEAT copies: the jobs that failed or were stopped.
REPEATED = frozenset({Phase.ERROR, Phase.ABORTED})


def status_of(counts: dict[Phase, int]) -> Status:
    """The aggregate status of jobs counted by phase (README.rst, "Batches"), the
    first rule that holds: all waiting (PENDING, HELD) -> pending; any waiting or
    running -> processing; any ABORTED -> aborted; all ERROR -> failed; any ERROR
    -> partially failed; otherwise (COMPLETED, ARCHIVED, or no job left) -> completed."""
    total = sum(counts.values())
    waiting = sum(counts.get(p, 0) for p in WAITING)
    if total and waiting == total:
        return Status.PENDING
    if waiting or any(counts.get(p, 0) for p in RUNNING):
        return Status.PROCESSING
    if counts.get(Phase.ABORTED):
        return Status.ABORTED
    errors = counts.get(Phase.ERROR, 0)
    if errors and errors == total:
        return Status.FAILED
    if errors:
        return Status.PARTIALLY_FAILED
    return Status.COMPLETED


@dataclasses.dataclass(frozen=True)
class Batch:
    """One batch row: jobs created together by one request."""
    id: str
    service: str
    owner: str
    creation_time: dt.datetime
    job_count: int              # jobs created; some may have been deleted since
    run_id: str | None = None
    callback_url: str | None = None     # POSTed the batch when its last job ends


@dataclasses.dataclass(frozen=True)
class Progress:
    """Where a batch's jobs stand: counts by phase, and the EXECUTING jobs' summed percent."""
    counts: dict[Phase, int]
    executing_percent: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def status(self) -> Status:
        return status_of(self.counts)

    @property
    def finished(self) -> int:
        return sum(n for p, n in self.counts.items() if p not in WAITING | RUNNING)

    @property
    def percent(self) -> float:
        """Finished jobs, plus the running jobs' own progress, over all jobs left."""
        if not self.total:
            return 100.0
        done = self.finished + self.executing_percent / 100.0
        return round(min(100.0 * done / self.total, 100.0), 1)


@dataclasses.dataclass(frozen=True)
class BatchJob:
    """One line of a batch's report."""
    id: str
    phase: Phase
    run_id: str | None
    creation_time: dt.datetime
    error_message: str | None = None
