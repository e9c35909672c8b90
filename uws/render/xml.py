"""UWS 1.1 XML documents, written as escaped text in the order the schema requires.

Roots carry ``version="1.1"`` and declare the literal prefixes ``uws``,
``xlink`` and ``xsi`` (namespace-unaware clients match on them).  The documents
are the bytes lxml would write for the same tree (tests compare the two), at a
fraction of the cost: a job document is on every GET of a job.
"""
from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Iterator
from urllib.parse import quote

from lxml import etree

from ..domain import timeutil
from ..domain.model import Job, JobRef, xml_text
from ..domain.timeutil import format_time

UWS_NS = "http://www.ivoa.net/xml/UWS/v1.0"
XLINK_NS = "http://www.w3.org/1999/xlink"
XSI_NS = "http://www.w3.org/2001/XMLSchema-instance"
NSMAP = {"uws": UWS_NS, "xlink": XLINK_NS, "xsi": XSI_NS}
VERSION = "1.1"

_U = "{%s}" % UWS_NS


class Links:
    """Absolute URLs of one job's resources, built from the request's base."""

    def __init__(self, job_url: str):
        self.job_url = job_url

    def result(self, result_id: str) -> str:
        return f"{self.job_url}/results/{quote(result_id, safe='')}"

    def parameter(self, name: str) -> str:
        return f"{self.job_url}/parameters/{quote(name, safe='')}"


def _root(tag: str, version: bool = True):
    el = etree.Element(_U + tag, nsmap=NSMAP)
    if version:
        el.set("version", VERSION)
    return el


def _start_tag(tag: str, version: bool = True) -> str:
    """lxml's start tag of a root (its namespace declarations), for a text document."""
    return etree.tostring(_root(tag, version)).decode()[:-2] + ">"


_DECLARATION = "<?xml version='1.0' encoding='UTF-8'?>\n"


def _text(text: str) -> str:
    """Element content escaped as lxml escapes it."""
    if _TEXT_SPECIAL.search(text) is None:
        return text
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\r", "&#13;"))


_TEXT_SPECIAL = re.compile(r"[&<>\r]")


def _element(tag: str, text: str) -> str:
    return f"<{tag}>{_text(text)}</{tag}>"


def _nil(tag: str) -> str:
    return f'<{tag} xsi:nil="true"/>'


def _time(tag: str, value) -> str:
    return f'<{tag} xsi:nil="true"/>' if value is None else f"<{tag}>{_instant(value)}</{tag}>"


def parameter_value(job_param, links: Links) -> str:
    """The text shown for a parameter: by-reference uploads become their URL."""
    if job_param.is_upload:
        return links.parameter(job_param.name)
    return job_param.value


def _parameters(job: Job, links: Links, start: str = "<uws:parameters>") -> str:
    if not job.parameters:
        return start[:-1] + "/>"
    parts = [start]
    for p in job.parameters:
        by_reference = ' byReference="true"' if p.by_reference else ""
        parts.append(f'<uws:parameter id="{_escape(p.name)}"{by_reference}>'
                     f"{_text(xml_text(parameter_value(p, links)))}</uws:parameter>")
    parts.append("</uws:parameters>")
    return "".join(parts)


def _results(job: Job, links: Links, start: str = "<uws:results>") -> str:
    if not job.results:
        return start[:-1] + "/>"
    parts = [start]
    for r in job.results:
        size = "" if r.size is None else f' size="{r.size}"'
        parts.append(f'<uws:result id="{_escape(r.id)}" xlink:type="simple" '
                     f'xlink:href="{_escape(links.result(r.id))}"{size} '
                     f'mime-type="{_escape(r.mime_type)}"/>')
    parts.append("</uws:results>")
    return "".join(parts)


def _error(job: Job) -> str:
    err = job.error
    assert err is not None      # called only for jobs with an error summary
    has_detail = "true" if err.has_detail else "false"
    return (f'<uws:errorSummary type="{_escape(err.type)}" hasDetail="{has_detail}">'
            f'{_element("uws:message", xml_text(err.message))}</uws:errorSummary>')


def _closed(start: str, tag: str, text: str | None) -> str:
    """An element from its start tag (``"<tag attrs"``): empty, or with content."""
    return start + "/>" if text is None else f"{start}>{text}</{tag}>"


INFO_NS = "urn:ivoa-uws-server:jobinfo"


def progress_info(job: Job, now) -> str:
    """``<uws:jobInfo>`` content: percent complete, message, time spent and remaining."""
    from ..domain.estimates import elapsed_seconds, remaining_seconds
    start = f'<info:progress xmlns:info="{INFO_NS}"'
    if job.progress is not None:
        start += f' percent="{job.progress:.1f}"'
    elapsed = elapsed_seconds(job, now)
    if elapsed is not None:
        start += f' elapsedSeconds="{elapsed:.1f}"'
    remaining = remaining_seconds(job, now)
    if remaining is not None:
        start += f' remainingSeconds="{remaining:.1f}"'
    message = _text(xml_text(job.progress_message)) if job.progress_message else None
    return _closed(start, "info:progress", message)


QUEUE_NS = "urn:ivoa-uws-server:queue"


def queue_info(job: Job) -> str:
    """``<uws:jobInfo>`` content: the job's priority, its start time when it has one,
    which attempt this is and the errors of the failed ones (automatic retries)."""
    start = f'<q:queue xmlns:q="{QUEUE_NS}" priority="{job.priority}"'
    if job.start_after is not None:
        start += f' startAfter="{format_time(job.start_after)}"'
    start += f' attempt="{job.attempt}"'
    if not job.past_errors:
        return start + "/>"
    failed = "".join(f'<q:failedAttempt type="{_escape(error.type)}">'
                     f"{_text(xml_text(error.message))}</q:failedAttempt>"
                     for error in job.past_errors)
    return f"{start}>{failed}</q:queue>"


def held_info(why: str) -> str:
    """``<info:held>``: why a HELD job waits (an administrative hold, its owner's quota)."""
    return f'<info:held xmlns:info="{INFO_NS}">{_text(xml_text(why))}</info:held>'


CALLBACK_NS = "urn:ivoa-uws-server:callback"


def callback_info(delivery) -> str:
    """``<cb:callback url= state= attempts= [status=] [delivered=]>last error</cb:callback>``."""
    start = (f'<cb:callback xmlns:cb="{CALLBACK_NS}" url="{_escape(xml_text(delivery.url))}" '
             f'state="{_escape(delivery.state)}" attempts="{delivery.attempts}"')
    if delivery.status is not None:
        start += f' status="{delivery.status}"'
    if delivery.delivered is not None:
        start += f' delivered="{format_time(delivery.delivered)}"'
    error = _text(xml_text(delivery.error)) if delivery.error else None
    return _closed(start, "cb:callback", error)


def _job_info(job: Job, now) -> str:
    parts = ["<uws:jobInfo>"]
    if job.progress is not None or job.start_time is not None:
        parts.append(progress_info(job, now or timeutil.now()))
    parts.append(queue_info(job))
    if job.held:
        parts.append(held_info(job.held))
    if job.callback is not None:
        parts.append(callback_info(job.callback))
    parts.append("</uws:jobInfo>")
    return "".join(parts)


_JOB_START = _DECLARATION + _start_tag("job")


def job_document(job: Job, links: Links, now=None) -> bytes:
    run_id = "" if job.run_id is None else _element("uws:runId", xml_text(job.run_id))
    owner = _element("uws:ownerId", xml_text(job.owner)) if job.owner else _nil("uws:ownerId")
    error = "" if job.error is None else _error(job)
    return "".join((
        _JOB_START, _element("uws:jobId", job.id), run_id, owner,
        f"<uws:phase>{job.phase.value}</uws:phase>",
        _time("uws:quote", job.quote), _time("uws:creationTime", job.creation_time),
        _time("uws:startTime", job.start_time), _time("uws:endTime", job.end_time),
        f"<uws:executionDuration>{job.execution_duration}</uws:executionDuration>",
        _time("uws:destruction", job.destruction),
        _parameters(job, links), _results(job, links), error, _job_info(job, now),
        "</uws:job>")).encode()


def parameters_document(job: Job, links: Links) -> bytes:
    return (_DECLARATION + _parameters(job, links, _start_tag("parameters", False))).encode()


def results_document(job: Job, links: Links) -> bytes:
    return (_DECLARATION + _results(job, links, _start_tag("results", False))).encode()


_LIST_START = _DECLARATION + _start_tag("jobs")
_LIST_END = "</uws:jobs>"


def job_list(refs: Iterable[JobRef], list_url: str, flush_every: int = 200) -> Iterator[bytes]:
    """Stream a ``<uws:jobs>`` document, yielding bytes every few hundred jobrefs; each
    jobref links to ``list_url/{id}``.

    The jobrefs, the hot path of every list, are written as escaped text (10 times
    faster than lxml's incremental writer): the tests check every list against the
    schema.
    """
    prefix = _escape(list_url) + "/"
    chunk = [_LIST_START]
    known = _written_jobrefs
    for n, ref in enumerate(refs, 1):
        text = known.get((ref, prefix))
        if text is None:
            text = _remember_jobref(ref, prefix)
        chunk.append(text)
        if n % flush_every == 0:
            yield "".join(chunk).encode()
            chunk = []
    chunk.append(_LIST_END)
    yield "".join(chunk).encode()


_NO_OWNER = '<uws:ownerId xsi:nil="true"/>'

#: jobrefs written lately, by (jobref, href prefix): clients poll the same lists
#: (LAST=N, the first page) again and again, and a jobref is a function of these
#: alone.  A hit costs a seventh of writing one.  At most JOBREFS_KEPT, each of at
#: most KEPT_JOBREF_CHARS (a client chooses its RUNID): under 20 MB at worst,
#: about 2 MB for the jobrefs of hex ids and short names.
_written_jobrefs: dict[tuple[JobRef, str], str] = {}
JOBREFS_KEPT = 2048
KEPT_JOBREF_CHARS = 512


def _remember_jobref(ref: JobRef, prefix: str) -> str:
    text = _jobref(ref, prefix)
    # equal aware times may be written apart; a long RUNID or owner is not kept
    if ref.creation_time.tzinfo is None and len(text) <= KEPT_JOBREF_CHARS:
        if len(_written_jobrefs) >= JOBREFS_KEPT:
            _written_jobrefs.clear()    # simpler than LRU, and as good for lists re-read
        _written_jobrefs[(ref, prefix)] = text
    return text


def _jobref(ref: JobRef, prefix: str) -> str:
    """One jobref; ``prefix`` is the escaped start of its href."""
    job_id = ref.id if ref.id.isalnum() else _escape(ref.id)    # cheaper than the regex
    run_id = "" if ref.run_id is None else f"<uws:runId>{_escape(xml_text(ref.run_id))}</uws:runId>"
    owner = f"<uws:ownerId>{_escape(xml_text(ref.owner))}</uws:ownerId>" if ref.owner else _NO_OWNER
    # _value_: the Enum's value property costs a call
    return (f'<uws:jobref id="{job_id}" xlink:type="simple" xlink:href="{prefix}{job_id}">'
            f"<uws:phase>{ref.phase._value_}</uws:phase>{run_id}{owner}<uws:creationTime>"
            f"{_instant(ref.creation_time)}</uws:creationTime></uws:jobref>")


_TWO = tuple(f"{n:02d}" for n in range(100))
_THREE = tuple(f"{n:03d}" for n in range(1000))


def _instant(t: dt.datetime) -> str:
    """``format_time(t)``, twice as fast for the naive UTC times the store holds:
    ``isoformat`` goes through sprintf, and a list shows a time for every job."""
    if t.tzinfo is not None or t.year < 1000:
        return format_time(t)
    return (f"{t.year}-{_TWO[t.month]}-{_TWO[t.day]}T{_TWO[t.hour]}:{_TWO[t.minute]}:"
            f"{_TWO[t.second]}.{_THREE[t.microsecond // 1000]}Z")


def _escape(text: str) -> str:
    """Text escaped for element content and double-quoted attributes."""
    if _SPECIAL.search(text) is None:
        return text
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("\r", "&#13;").replace("\n", "&#10;")
            .replace("\t", "&#9;"))


_SPECIAL = re.compile(r'[&<>"\r\n\t]')

