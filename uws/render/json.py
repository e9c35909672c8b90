"""UWS resources as JSON: the UWS 1.1 XML documents, element for element.

Names are the schema's element and attribute names (``jobId``, ``ownerId``,
``errorSummary``, ``mime-type`` becomes ``mimeType``); an element the schema
allows to be nil is ``null``; times are ISO 8601 UTC strings as in the XML.
Repeatable elements (parameters, results, jobrefs) are arrays, in document order.
The shape is documented in README.rst ("JSON"); change it only by adding keys.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from json.encoder import encode_basestring as _string
from typing import Any

from ..domain import timeutil
from ..domain.model import Job, JobRef
from ..domain.timeutil import format_time
from .xml import VERSION, Links, parameter_value


def _time(value) -> str | None:
    return None if value is None else format_time(value)


def parameters(job: Job, links: Links) -> list[dict[str, Any]]:
    return [{"id": p.name, "byReference": p.by_reference, "value": parameter_value(p, links)}
            for p in job.parameters]


def results(job: Job, links: Links) -> list[dict[str, Any]]:
    return [{"id": r.id, "href": links.result(r.id), "mimeType": r.mime_type, "size": r.size}
            for r in job.results]


def error_summary(job: Job) -> dict[str, Any] | None:
    err = job.error
    if err is None:
        return None
    return {"type": err.type, "hasDetail": err.has_detail, "message": err.message}


def progress(job: Job, now) -> dict[str, Any]:
    """What ``<info:progress>`` in ``jobInfo`` says, as numbers (null when unknown)."""
    from ..domain.estimates import elapsed_seconds, remaining_seconds
    return {"percent": job.progress, "elapsedSeconds": elapsed_seconds(job, now),
            "remainingSeconds": remaining_seconds(job, now), "message": job.progress_message}


def queue(job: Job) -> dict[str, Any]:
    """What ``<q:queue>`` in ``jobInfo`` says."""
    return {"priority": job.priority, "startAfter": _time(job.start_after),
            "attempt": job.attempt,
            "failedAttempts": [{"type": e.type, "message": e.message} for e in job.past_errors]}


def job(job: Job, links: Links, now=None) -> dict[str, Any]:
    """The ``<uws:job>`` document as a dict ready for ``json.dumps``."""
    doc: dict[str, Any] = {
        "version": VERSION,
        "jobId": job.id,
        "runId": job.run_id,
        "ownerId": job.owner or None,
        "phase": job.phase.value,
        "quote": _time(job.quote),
        "creationTime": _time(job.creation_time),
        "startTime": _time(job.start_time),
        "endTime": _time(job.end_time),
        "executionDuration": job.execution_duration,
        "destruction": _time(job.destruction),
        "parameters": parameters(job, links),
        "results": results(job, links),
        "errorSummary": error_summary(job),
        "jobInfo": {"progress": progress(job, now or timeutil.now()), "queue": queue(job)},
    }
    if job.held:
        doc["jobInfo"]["held"] = job.held
    if job.callback is not None:
        doc["jobInfo"]["callback"] = callback(job.callback)
    return doc


def callback(delivery) -> dict[str, Any]:
    """What ``<cb:callback>`` in ``jobInfo`` says."""
    return {"url": delivery.url, "state": delivery.state, "attempts": delivery.attempts,
            "status": delivery.status, "error": delivery.error,
            "delivered": _time(delivery.delivered)}


def parameters_document(job: Job, links: Links) -> dict[str, Any]:
    """``<uws:parameters>``: ``{"parameters": [...]}``."""
    return {"parameters": parameters(job, links)}


def results_document(job: Job, links: Links) -> dict[str, Any]:
    """``<uws:results>``: ``{"results": [...]}``."""
    return {"results": results(job, links)}


def error_document(job: Job) -> dict[str, Any]:
    """The ``/error`` resource: the summary and the detail text (both null without an error)."""
    err = job.error
    return {"errorSummary": error_summary(job),
            "detail": None if err is None else (err.detail or err.message)}


def phase_document(job: Job) -> dict[str, Any]:
    return {"phase": job.phase.value}


def quote_document(job: Job) -> dict[str, Any]:
    return {"quote": _time(job.quote)}


def execution_duration_document(job: Job) -> dict[str, Any]:
    return {"executionDuration": job.execution_duration}


def destruction_document(job: Job) -> dict[str, Any]:
    return {"destruction": _time(job.destruction)}


def owner_document(job: Job) -> dict[str, Any]:
    return {"ownerId": job.owner or None}


def services_document(services: Iterable[tuple[str, str, str]]) -> dict[str, Any]:
    """The root: ``(name, href, description)`` of each service."""
    return {"services": [{"name": name, "href": href, "description": description}
                         for name, href, description in services]}


_LIST_START = '{"version":%s,"jobs":[' % _string(VERSION)


def job_list(refs: Iterable[JobRef], job_url: Callable[[str], str],
             tail: dict[str, Any] | None = None, flush_every: int = 200) -> Iterator[bytes]:
    """Stream ``{"version": "1.1", "jobs": [jobref...], **tail}`` as the XML list is
    streamed: a chunk every few hundred jobrefs, never the whole list in memory.
    Each jobref is written with the C string encoder, as cheap as the XML one."""
    chunk = [_LIST_START]
    for n, ref in enumerate(refs, 1):
        chunk.append(("," if n > 1 else "") + _jobref(ref, job_url(ref.id)))
        if n % flush_every == 0:
            yield "".join(chunk).encode()
            chunk = []
    chunk.append("]")
    for key, value in (tail or {}).items():
        chunk.append(f",{_string(key)}:{json.dumps(value, ensure_ascii=False)}")
    chunk.append("}\n")
    yield "".join(chunk).encode()


def _jobref(ref: JobRef, href: str) -> str:
    run_id = "null" if ref.run_id is None else _string(ref.run_id)
    owner = _string(ref.owner) if ref.owner else "null"
    return (f'{{"id":{_string(ref.id)},"href":{_string(href)},"phase":"{ref.phase.value}",'
            f'"runId":{run_id},"ownerId":{owner},'
            f'"creationTime":"{format_time(ref.creation_time)}"}}')
