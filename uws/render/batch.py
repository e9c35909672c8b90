"""Batches as XML (our namespace, schemas/uws-batch.xsd) and as JSON, key for element.

A batch document carries its aggregate status, its counts by phase, its percent
complete and one page of its report (each job with its link, phase, runId and error
message), and what became of its callback if it named one; the batch list carries one
``batchref`` per batch.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from lxml import etree

from ..domain.batchmodel import Batch, BatchJob, Progress
from ..domain.model import Delivery, xml_text
from ..domain.phases import Phase
from ..domain.timeutil import format_time
from .json import callback as callback_json
from .xml import XLINK_NS

BATCH_NS = "urn:ivoa-uws-server:batch"
NSMAP = {"batch": BATCH_NS, "xlink": XLINK_NS}
_B = "{%s}" % BATCH_NS
_HREF = "{%s}href" % XLINK_NS
#: Phases in the order a report counts them (UNKNOWN only when some job is in it).
PHASES = tuple(p for p in Phase)


@dataclasses.dataclass(frozen=True)
class BatchReport:
    """What one batch document shows: the batch, where its jobs stand, one page of them."""
    batch: Batch
    progress: Progress
    jobs: list[BatchJob]
    start: int
    url: str
    job_url: Callable[[str], str]
    callback: Delivery | None = None

    def phase_counts(self) -> list[tuple[Phase, int]]:
        counts = self.progress.counts
        return [(p, counts.get(p, 0)) for p in PHASES if p is not Phase.UNKNOWN or counts.get(p)]


def _sub(parent, tag: str, text: str | None = None, **attributes):
    el = etree.SubElement(parent, _B + tag, {k: v for k, v in attributes.items() if v is not None})
    if text is not None:
        el.text = text
    return el


def batch_document(report: BatchReport) -> bytes:
    batch, progress = report.batch, report.progress
    root = etree.Element(_B + "batch", nsmap=NSMAP)
    root.set(_HREF, report.url)
    _sub(root, "batchId", batch.id)
    if batch.run_id is not None:
        _sub(root, "runId", xml_text(batch.run_id))
    if batch.owner:
        _sub(root, "ownerId", batch.owner)
    _sub(root, "creationTime", format_time(batch.creation_time))
    _sub(root, "status", progress.status.value)
    _sub(root, "percentComplete", f"{progress.percent:g}")
    _sub(root, "jobCount", str(progress.total))
    phases = _sub(root, "phases")
    for phase, n in report.phase_counts():
        _sub(phases, "phase", name=phase.value, count=str(n))
    if report.callback is not None:
        _callback(root, report.callback)
    jobs = _sub(root, "jobs", start=str(report.start), total=str(progress.total))
    for job in report.jobs:
        el = _sub(jobs, "job", id=job.id, phase=job.phase.value,
                  runId=None if job.run_id is None else xml_text(job.run_id))
        el.set(_HREF, report.job_url(job.id))
        if job.error_message:
            _sub(el, "error", xml_text(job.error_message))
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")


def _callback(parent, delivery: Delivery) -> None:
    """``<callback url= state= attempts= [status=] [delivered=]>last error</callback>``,
    as a job's ``cb:callback`` in its jobInfo."""
    _sub(parent, "callback", xml_text(delivery.error) if delivery.error else None,
         url=xml_text(delivery.url), state=delivery.state, attempts=str(delivery.attempts),
         status=None if delivery.status is None else str(delivery.status),
         delivered=None if delivery.delivered is None else format_time(delivery.delivered))


def batch_list(batches: list[Batch], total: int, start: int,
               batch_url: Callable[[str], str]) -> bytes:
    root = etree.Element(_B + "batches", nsmap=NSMAP)
    root.set("start", str(start))
    root.set("total", str(total))
    for batch in batches:
        el = _sub(root, "batchref", id=batch.id, creationTime=format_time(batch.creation_time),
                  jobCount=str(batch.job_count), ownerId=batch.owner or None,
                  runId=None if batch.run_id is None else xml_text(batch.run_id))
        el.set(_HREF, batch_url(batch.id))
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")


def batch_json(report: BatchReport) -> dict[str, Any]:
    batch, progress = report.batch, report.progress
    return {
        "batchId": batch.id,
        "href": report.url,
        "runId": batch.run_id,
        "ownerId": batch.owner or None,
        "creationTime": format_time(batch.creation_time),
        "status": progress.status.value,
        "percentComplete": progress.percent,
        "jobCount": progress.total,
        "phases": {phase.value: n for phase, n in report.phase_counts()},
        "callback": None if report.callback is None else callback_json(report.callback),
        "jobs": {"start": report.start, "total": progress.total,
                 "items": [{"jobId": j.id, "href": report.job_url(j.id), "phase": j.phase.value,
                            "runId": j.run_id, "error": j.error_message} for j in report.jobs]},
    }


def batch_list_json(batches: list[Batch], total: int, start: int,
                    batch_url: Callable[[str], str]) -> dict[str, Any]:
    return {"start": start, "total": total,
            "batches": [{"batchId": b.id, "href": batch_url(b.id), "runId": b.run_id,
                         "ownerId": b.owner or None, "creationTime": format_time(b.creation_time),
                         "jobCount": b.job_count} for b in batches]}
