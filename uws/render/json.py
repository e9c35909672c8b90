"""UWS resources as JSON: the UWS 1.1 XML documents, element for element.

Names are the schema's element and attribute names (``jobId``, ``ownerId``,
``errorSummary``, ``mime-type`` becomes ``mimeType``); an element the schema
allows to be nil is ``null``; times are ISO 8601 UTC strings as in the XML.
Repeatable elements (parameters, results, jobrefs) are arrays, in document order.
The shape is documented in README.rst ("JSON"); change it only by adding keys.
"""
from __future__ import annotations

from typing import Any

from .. import timeutil
from ..model import Job
from ..timeutil import format_time
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
    from ..estimates import elapsed_seconds, remaining_seconds
    return {"percent": job.progress, "elapsedSeconds": elapsed_seconds(job, now),
            "remainingSeconds": remaining_seconds(job, now), "message": job.progress_message}


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
        "jobInfo": {"progress": progress(job, now or timeutil.now())},
    }
    if job.callback is not None:
        doc["jobInfo"]["callback"] = callback(job.callback)
    return doc


def callback(delivery) -> dict[str, Any]:
    """What ``<cb:callback>`` in ``jobInfo`` says."""
    return {"url": delivery.url, "state": delivery.state, "attempts": delivery.attempts,
            "status": delivery.status, "error": delivery.error,
            "delivered": _time(delivery.delivered)}
