"""The records: jobs, and who asks of them (Caller), administrative holds, job events and
callback deliveries.  Plain dataclasses with no storage or HTTP in them."""
from __future__ import annotations

import dataclasses
import datetime as dt
import re
import uuid
from typing import NamedTuple

from .phases import Phase

_JOB_ID = re.compile(r"[0-9a-f]{32}")
# What XML 1.0 cannot carry: control characters but tab, LF and CR; surrogates;
# U+FFFE and U+FFFF.  A value with one could not be shown back unchanged.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def new_job_id() -> str:
    # Lowercase hex only: a legal path segment that also survives the
    # uws-client ``lstrip('https://')`` bug (ids starting with h, t, p, s).
    return uuid.uuid4().hex


def is_job_id(text: str) -> bool:
    return _JOB_ID.fullmatch(text) is not None


def fits_xml(text: str) -> bool:
    """Whether a UWS document can show ``text`` exactly (XML 1.0 characters only)."""
    return _NOT_XML.search(text) is None


def xml_text(text: str) -> str:
    """``text`` without the characters XML 1.0 cannot carry (for what a job wrote)."""
    return text if text.isprintable() else _NOT_XML.sub("", text)


#: A by-reference value starting with this stands for a file uploaded with a
#: request (UWS 1.1 §2.2.3.1.1); the file is kept under the parameter's name.
UPLOAD_MARKER = "param:"


def is_upload_value(value: str) -> bool:
    """Whether a by-reference ``value`` names an uploaded part (not a URL)."""
    return value.startswith(UPLOAD_MARKER)


@dataclasses.dataclass(frozen=True)
class Parameter:
    name: str
    value: str
    by_reference: bool = False

    @classmethod
    def upload(cls, name: str) -> Parameter:
        """The parameter ``name`` whose value is the file uploaded under that name."""
        return cls(name, UPLOAD_MARKER + name, True)

    @property
    def is_upload(self) -> bool:
        return self.by_reference and is_upload_value(self.value)


MAX_RUN_ID = 1024


def check_run_id(run_id: str) -> None:
    """ValueError unless ``run_id`` may be a job's RUNID: bounded, and shown back
    unchanged in the job document (so no control characters)."""
    if len(run_id) > MAX_RUN_ID or not fits_xml(run_id):
        raise ValueError(f"at most {MAX_RUN_ID} characters, and no control characters")


# A result id is one URL path segment (escaped in hrefs) and an XML attribute.
_RESULT_ID = re.compile(r"[^\s/\\]{1,128}")
_TOKEN = r"[A-Za-z0-9!#$&^_.+-]+"
_MIME_TYPE = re.compile(rf"{_TOKEN}/{_TOKEN}(\s*;\s*{_TOKEN}=({_TOKEN}|\"[^\"\x00-\x1f]*\"))*")


def valid_result_id(name: str) -> bool:
    return bool(_RESULT_ID.fullmatch(name)) and name not in (".", "..") and fits_xml(name)


def valid_mime_type(text: str) -> bool:
    """type/subtype with optional parameters (RFC 9110 §8.3.1)."""
    return bool(_MIME_TYPE.fullmatch(text))


@dataclasses.dataclass(frozen=True)
class Result:
    id: str
    path: str          # relative to the job's result directory
    mime_type: str = "application/octet-stream"
    size: int | None = None


@dataclasses.dataclass(frozen=True)
class ErrorSummary:
    type: str          # "fatal" or "transient" (UWS 1.1 ErrorType)
    message: str
    detail: str | None = None

    @property
    def has_detail(self) -> bool:
        return bool(self.detail)


@dataclasses.dataclass
class Job:
    id: str
    service: str
    owner: str                      # "" when there was no authenticated creator
    phase: Phase
    creation_time: dt.datetime
    execution_duration: int         # seconds, 0 = unlimited
    destruction: dt.datetime | None
    run_id: str | None = None
    quote: dt.datetime | None = None
    start_time: dt.datetime | None = None
    end_time: dt.datetime | None = None
    error: ErrorSummary | None = None
    progress: float | None = None   # percent complete, 0..100
    progress_message: str | None = None
    parameters: list[Parameter] = dataclasses.field(default_factory=list)
    results: list[Result] = dataclasses.field(default_factory=list)
    priority: int = 0               # higher is taken first from the queue
    start_after: dt.datetime | None = None     # not started before (STARTAFTER, retry backoff)
    past_errors: list[ErrorSummary] = dataclasses.field(default_factory=list)  # failed attempts
    held: str | None = None         # while HELD: why (shown in jobInfo)
    callback_url: str | None = None     # the CALLBACK the job named (uws.usecases.callbacks)
    callback: Delivery | None = None    # what became of it, when asked for

    @property
    def attempt(self) -> int:
        """Which attempt this is (1 until the job is run again after a failure)."""
        return len(self.past_errors) + 1

    def parameter_values(self, name: str) -> list[str]:
        return [p.value for p in self.parameters if p.name == name]


class Claim(NamedTuple):
    """One worker's attempt at a job, as its claim left the job: what that worker's
    writes about the attempt are fenced by.  Another attempt (the job queued again
    after the lease expired, then claimed) has another start time, and another worker
    or none as its lease owner, so the store refuses this one's late writes."""
    job_id: str
    worker: str
    started: dt.datetime

    def holds(self, lease: LeaseState | None) -> bool:
        """Whether a job's lease state says this attempt still runs it."""
        return lease == (Phase.EXECUTING, self.worker, self.started)


#: A job's (phase, lease owner, start time): which attempt, if any, holds it.
LeaseState = tuple[Phase, str | None, dt.datetime | None]


class JobRef(NamedTuple):
    """One line of a job list: what ``<uws:jobref>`` shows (a tuple: a list makes
    one per job, three times faster than a frozen dataclass)."""
    id: str
    phase: Phase
    run_id: str | None
    owner: str
    creation_time: dt.datetime


@dataclasses.dataclass(frozen=True)
class ListQuery:
    """Filters of a job list (UWS 1.1 §2.2.2.1) plus our paging."""
    phases: tuple[Phase, ...] = ()         # empty: every phase but ARCHIVED
    after: dt.datetime | None = None       # creationTime strictly after
    limit: int | None = None               # page size / LAST
    offset: int = 0                        # the start=… extension
    before: tuple[dt.datetime, str] | None = None   # keyset cursor (creation_time, id)


# -- who asks ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Caller:
    """Who is asking: an owner name ("" = anonymous) and whether they administer."""
    owner: str = ""
    admin: bool = False

    @property
    def scope(self) -> str | None:
        return None if self.admin else self.owner


ANONYMOUS = Caller()


# -- administrative holds ------------------------------------------------------------------

#: The owner of a hold on a whole service.
EVERYONE = "*"
#: Why a job is HELD (uws_job.held_for): an administrative hold, or its owner's quota.
STOPPED = "hold"
QUOTA = "quota"


@dataclasses.dataclass(frozen=True)
class Hold:
    service: str
    owner: str              # EVERYONE for the whole service
    who: str                # the administrator who placed it
    created: dt.datetime
    reason: str = ""

    @property
    def whole_service(self) -> bool:
        return self.owner == EVERYONE


def held_text(kind: str | None, reason: str | None, running_cap: int) -> str:
    """What a HELD job's page and jobInfo say of why it waits."""
    if kind == QUOTA:
        return (f"waiting for a running slot: at most {running_cap} of its owner's jobs run "
                "at once in this service (max_running_per_owner)")
    if kind == STOPPED:
        return "held by an administrator" + (f": {reason}" if reason else "")
    return "held"


# -- job events ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class JobEvent:
    seq: int                    # the event id, what Last-Event-ID and after= name
    time: dt.datetime
    service: str
    owner: str                  # "" = anonymous
    job_id: str
    batch_id: str | None
    old_phase: str | None       # None: the job was created
    new_phase: str | None       # None: the job was deleted
    progress: float | None


@dataclasses.dataclass(frozen=True)
class EventPage:
    events: list[JobEvent]
    pending: bool       # later events exist but wait for older transactions to end
    # where a reader goes on from, read with the events (see events_after, latest_events)
    last_id: int | None = None


# -- callbacks -----------------------------------------------------------------------------

#: Delivery states: waiting for the subject to end, then pending until delivered or failed.
WAITING, PENDING, DELIVERED, FAILED = "waiting", "pending", "delivered", "failed"


@dataclasses.dataclass(frozen=True)
class Delivery:
    """What became of a job's callback, shown in its ``jobInfo``."""
    url: str
    state: str = WAITING
    attempts: int = 0
    status: int | None = None           # the receiver's last HTTP status
    error: str | None = None            # why the last attempt failed
    delivered: dt.datetime | None = None
