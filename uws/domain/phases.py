"""UWS 1.1 execution phases and the one table of legal transitions.

Every phase change in the server is one of the events below.  The store turns
an event into a conditional update (``... WHERE phase IN (sources)``), so the
rules live here and nowhere else.
"""
from __future__ import annotations

import enum


class Phase(str, enum.Enum):
    PENDING = "PENDING"
    QUEUED = "QUEUED"
    EXECUTING = "EXECUTING"
    COMPLETED = "COMPLETED"
    ERROR = "ERROR"
    ABORTED = "ABORTED"
    UNKNOWN = "UNKNOWN"
    HELD = "HELD"
    SUSPENDED = "SUSPENDED"
    ARCHIVED = "ARCHIVED"

    def __str__(self) -> str:
        return self.value


P = Phase

#: Phases in which a blocking GET waits (UWS 1.1 §2.2.1.2).
ACTIVE = frozenset({P.PENDING, P.QUEUED, P.EXECUTING})

#: Phases a job never leaves except by archiving or destruction.
TERMINAL = frozenset({P.COMPLETED, P.ERROR, P.ABORTED})
FINISHED = TERMINAL | {P.ARCHIVED}
#: Phases in which the execution duration may still change.
NOT_STARTED = frozenset({P.PENDING, P.QUEUED, P.HELD})


class Event(str, enum.Enum):
    RUN = "run"            # client PHASE=RUN
    START = "start"        # executor picks the job up
    COMPLETE = "complete"  # work succeeded
    FAIL = "fail"          # work or the system failed
    ABORT = "abort"        # client PHASE=ABORT, duration exceeded, destruction
    HOLD = "hold"          # server holds a queued job (its owner is at its running cap)
    RUN_HELD = "run-held"  # client PHASE=RUN while an administrative hold applies
    RELEASE = "release"    # the hold ended (released, or a running slot freed)
    SUSPEND = "suspend"
    RESUME = "resume"
    REQUEUE = "requeue"    # a lost worker's job, for services safe to retry
    ARCHIVE = "archive"    # destruction time reached on an archiving service


#: event -> (phases it may start from, phase it leads to)
TRANSITIONS: dict[Event, tuple[frozenset[Phase], Phase]] = {
    Event.RUN: (frozenset({P.PENDING, P.HELD}), P.QUEUED),
    Event.START: (frozenset({P.QUEUED}), P.EXECUTING),
    Event.COMPLETE: (frozenset({P.EXECUTING}), P.COMPLETED),
    Event.FAIL: (frozenset({P.PENDING, P.QUEUED, P.EXECUTING, P.HELD, P.SUSPENDED}), P.ERROR),
    Event.ABORT: (frozenset({P.PENDING, P.QUEUED, P.EXECUTING, P.HELD, P.SUSPENDED}), P.ABORTED),
    Event.HOLD: (frozenset({P.PENDING, P.QUEUED}), P.HELD),
    Event.RUN_HELD: (frozenset({P.PENDING}), P.HELD),
    Event.RELEASE: (frozenset({P.HELD}), P.QUEUED),
    Event.SUSPEND: (frozenset({P.EXECUTING}), P.SUSPENDED),
    Event.RESUME: (frozenset({P.SUSPENDED}), P.EXECUTING),
    Event.REQUEUE: (frozenset({P.EXECUTING}), P.QUEUED),
    Event.ARCHIVE: (frozenset(TERMINAL), P.ARCHIVED),
}


def sources(event: Event) -> frozenset[Phase]:
    return TRANSITIONS[event][0]


def target(event: Event) -> Phase:
    return TRANSITIONS[event][1]


def allowed(event: Event, phase: Phase) -> bool:
    return phase in sources(event)


def parse_phase(text: str) -> Phase:
    """The phase named by ``text`` (case-insensitive); ValueError otherwise."""
    try:
        return Phase(text.strip().upper())
    except ValueError:
        raise ValueError(f"unknown phase {text!r}") from None
