"""UWS job and job-list documents as typed objects.

Parsed by local name, whatever the namespace prefix (and with UWS 1.0's lack of a
``version``), with a parser that reads no DTD, expands no entity and fetches nothing.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
import warnings

from lxml import etree

from .errors import ProtocolError
from .urls import child_url, resolved

XLINK = "http://www.w3.org/1999/xlink"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
FINAL_PHASES = frozenset({"COMPLETED", "ERROR", "ABORTED", "ARCHIVED"})
_COUNT = re.compile(r"[0-9]{1,20}")     # ASCII digits, few enough for int()

_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                          dtd_validation=False, huge_tree=False, remove_comments=True)


@dataclasses.dataclass(frozen=True)
class Parameter:
    id: str
    value: str
    by_reference: bool = False
    is_post: bool = False


@dataclasses.dataclass(frozen=True)
class Result:
    id: str
    href: str | None            # absolute (resolved against the job's URL)
    size: int | None = None
    mime_type: str | None = None


@dataclasses.dataclass(frozen=True)
class ErrorSummary:
    type: str                   # "fatal" or "transient"
    has_detail: bool
    message: str


def _deprecated_job_id(obj) -> str:
    warnings.warn("job_id is deprecated: use id (Job and JobRef both name the job's id so)",
                  DeprecationWarning, stacklevel=3)
    return obj.id


@dataclasses.dataclass(frozen=True)
class Job:
    url: str
    id: str
    phase: str
    run_id: str | None = None
    owner_id: str | None = None
    quote: dt.datetime | None = None
    creation_time: dt.datetime | None = None
    start_time: dt.datetime | None = None
    end_time: dt.datetime | None = None
    execution_duration: int | None = None
    destruction: dt.datetime | None = None
    parameters: tuple[Parameter, ...] = ()
    results: tuple[Result, ...] = ()
    error_summary: ErrorSummary | None = None
    progress: float | None = None       # percent from jobInfo, when the server reports it
    progress_message: str | None = None
    version: str | None = None          # "1.1"; None from UWS 1.0 servers

    @property
    def is_final(self) -> bool:
        return self.phase in FINAL_PHASES

    @property
    def job_id(self) -> str:
        """Deprecated: ``id`` (the name JobRef, Result and Parameter use too)."""
        return _deprecated_job_id(self)

    def parameter(self, name: str) -> str | None:
        """A parameter's value; names are case-insensitive (DALI)."""
        for p in self.parameters:
            if p.id.lower() == name.lower():
                return p.value
        return None


@dataclasses.dataclass(frozen=True)
class JobRef:
    id: str
    url: str
    phase: str
    run_id: str | None = None
    owner_id: str | None = None
    creation_time: dt.datetime | None = None

    @property
    def job_id(self) -> str:
        """Deprecated: ``id``, as for a Job."""
        return _deprecated_job_id(self)


def to_dict(obj) -> dict:
    """A job or jobref as JSON-ready data (times in ISO 8601). A job's id is ``id`` and,
    for scripts written before it was, ``job_id`` too (deprecated)."""
    def convert(value):
        if isinstance(value, dt.datetime):
            return value.isoformat().replace("+00:00", "Z")
        if isinstance(value, list | tuple):
            return [convert(v) for v in value]
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        return value
    data = convert(dataclasses.asdict(obj))
    if isinstance(obj, Job):
        data["job_id"] = obj.id
    return data


def parse_job(body: bytes, url: str) -> Job:
    root = _root(body, "job")
    phase = _text(root, "phase")
    job_id = _text(root, "jobId")
    if not phase or not job_id:
        raise ProtocolError(f"{url}: the job document lacks jobId or phase")
    progress, message = _progress(_child(root, "jobInfo"))
    return Job(
        url=url, id=job_id, phase=phase.upper(), run_id=_text(root, "runId"),
        owner_id=_text(root, "ownerId"), quote=_time(root, "quote"),
        creation_time=_time(root, "creationTime"), start_time=_time(root, "startTime"),
        end_time=_time(root, "endTime"), execution_duration=_int(root, "executionDuration"),
        destruction=_time(root, "destruction"), parameters=_parameters(root),
        results=_results(root, url), error_summary=_error(root),
        progress=progress, progress_message=message, version=root.get("version"))


def parse_job_list(body: bytes, url: str, list_url: str | None = None) -> list[JobRef]:
    """The jobrefs of a list read from ``url``; a jobref without href is the job of its
    id in ``list_url`` (default: ``url`` without its query)."""
    root = _root(body, "jobs")
    base = list_url or url.split("?", 1)[0]
    refs = []
    for ref in _children(root, "jobref"):
        job_id = ref.get("id")
        phase = _text(ref, "phase")
        if not job_id or not phase:
            raise ProtocolError(f"{url}: a jobref lacks its id or phase")
        href = ref.get("{%s}href" % XLINK)
        job_url = resolved(url, href) if href else child_url(base, job_id)
        refs.append(JobRef(id=job_id, url=job_url, phase=phase.upper(), run_id=_text(ref, "runId"),
                           owner_id=_text(ref, "ownerId"), creation_time=_time(ref, "creationTime")))
    return refs


def _root(body: bytes, name: str) -> etree._Element:
    try:
        root = etree.fromstring(body, _PARSER)
    except etree.XMLSyntaxError as exc:
        raise ProtocolError(f"not XML: {exc}") from None
    if root is None or etree.QName(root).localname != name:
        found = etree.QName(root).localname if root is not None else "nothing"
        raise ProtocolError(f"expected a UWS <{name}> document, got <{found}>")
    return root


def _children(parent, name: str):
    return [c for c in parent if isinstance(c.tag, str) and etree.QName(c).localname == name]


def _child(parent, name: str):
    found = _children(parent, name)
    return found[0] if found else None


def _text(parent, name: str) -> str | None:
    el = _child(parent, name)
    if el is None or el.get("{%s}nil" % XSI) == "true":
        return None
    text = (el.text or "").strip()
    return text or None


def _int(parent, name: str) -> int | None:
    text = _text(parent, name)
    try:
        return None if text is None else int(float(text))
    except (ValueError, OverflowError):     # OverflowError: "inf"
        raise ProtocolError(f"<{name}> is not a number: {text!r}") from None


def _time(parent, name: str) -> dt.datetime | None:
    """An optional time; one that cannot be read is as good as missing."""
    text = _text(parent, name)
    try:
        return None if text is None else parse_time(text)
    except ProtocolError:
        return None


def parse_time(text: str) -> dt.datetime:
    """An xs:dateTime as an aware datetime; no zone means UTC (as UWS intends)."""
    try:
        value = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ProtocolError(f"not a date and time: {text!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _bool(value: str | None) -> bool:
    return (value or "").strip().lower() in ("true", "1")


def _parameters(root) -> tuple[Parameter, ...]:
    block = _child(root, "parameters")
    if block is None:
        return ()
    return tuple(Parameter(id=p.get("id", ""), value=(p.text or ""),
                           by_reference=_bool(p.get("byReference")), is_post=_bool(p.get("isPost")))
                 for p in _children(block, "parameter"))


def _results(root, url: str) -> tuple[Result, ...]:
    block = _child(root, "results")
    if block is None:
        return ()
    results = []
    for r in _children(block, "result"):
        href = r.get("{%s}href" % XLINK)
        results.append(Result(id=r.get("id", ""), href=resolved(url, href) if href else None,
                              size=_size(r.get("size")), mime_type=r.get("mime-type")))
    return tuple(results)


def _size(text: str | None) -> int | None:
    """An optional size in bytes: one that is not a count (``-1``, ``1.5``, ``²``, a
    number of 5,000 digits) is as good as missing."""
    text = (text or "").strip()
    return int(text) if _COUNT.fullmatch(text) else None


def _error(root) -> ErrorSummary | None:
    el = _child(root, "errorSummary")
    if el is None:
        return None
    return ErrorSummary(type=el.get("type", "fatal"), has_detail=_bool(el.get("hasDetail")),
                        message=_text(el, "message") or "")


def _progress(info) -> tuple[float | None, str | None]:
    """A percent in jobInfo: an element with a ``percent`` attribute (this package's
    server), or an element named ``percent``/``progress`` holding a number."""
    if info is None:
        return None, None
    for el in info.iter():
        if not isinstance(el.tag, str):
            continue
        text = (el.text or "").strip() or None
        if el.get("percent") is not None:
            return _number(el.get("percent")), text
        if etree.QName(el).localname in ("percent", "progress") and _number(text) is not None:
            return _number(text), None
    return None, None


def _number(text: str | None) -> float | None:
    """A finite number, or None (``nan`` and ``inf`` are no percent)."""
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None
