"""The job, parameters and results documents as lxml writes them: the reference the
text writer of uws.render.xml must match byte for byte (test_xml_documents)."""
from __future__ import annotations

from lxml import etree

from uws.domain.estimates import elapsed_seconds, remaining_seconds
from uws.domain.model import Job, xml_text
from uws.domain.timeutil import format_time
from uws.render.xml import NSMAP, UWS_NS, VERSION, XLINK_NS, XSI_NS, Links, parameter_value

_U = "{%s}" % UWS_NS
_HREF = "{%s}href" % XLINK_NS
_TYPE = "{%s}type" % XLINK_NS
_NIL = "{%s}nil" % XSI_NS
INFO_NS = "urn:ivoa-uws-server:jobinfo"
QUEUE_NS = "urn:ivoa-uws-server:queue"
CALLBACK_NS = "urn:ivoa-uws-server:callback"


def _sub(parent, tag, text=None, nil=False):
    el = etree.SubElement(parent, _U + tag)
    if nil:
        el.set(_NIL, "true")
    elif text is not None:
        el.text = text
    return el


def _time(parent, tag, value):
    _sub(parent, tag, format_time(value), nil=value is None)


def _tostring(el) -> bytes:
    return etree.tostring(el, xml_declaration=True, encoding="UTF-8")


def _parameters(parent, job: Job, links: Links):
    el = etree.SubElement(parent, _U + "parameters") if parent is not None \
        else etree.Element(_U + "parameters", nsmap=NSMAP)
    for p in job.parameters:
        child = etree.SubElement(el, _U + "parameter", id=p.name)
        if p.by_reference:
            child.set("byReference", "true")
        child.text = xml_text(parameter_value(p, links))
    return el


def _results(parent, job: Job, links: Links):
    el = etree.SubElement(parent, _U + "results") if parent is not None \
        else etree.Element(_U + "results", nsmap=NSMAP)
    for r in job.results:
        child = etree.SubElement(el, _U + "result", id=r.id)
        child.set(_TYPE, "simple")
        child.set(_HREF, links.result(r.id))
        if r.size is not None:
            child.set("size", str(r.size))
        child.set("mime-type", r.mime_type)
    return el


def _job_info(root, job: Job, now) -> None:
    info = etree.SubElement(root, _U + "jobInfo")
    if job.progress is not None or job.start_time is not None:
        el = etree.SubElement(info, "{%s}progress" % INFO_NS, nsmap={"info": INFO_NS})
        if job.progress is not None:
            el.set("percent", f"{job.progress:.1f}")
        elapsed = elapsed_seconds(job, now)
        if elapsed is not None:
            el.set("elapsedSeconds", f"{elapsed:.1f}")
        remaining = remaining_seconds(job, now)
        if remaining is not None:
            el.set("remainingSeconds", f"{remaining:.1f}")
        if job.progress_message:
            el.text = xml_text(job.progress_message)
    el = etree.SubElement(info, "{%s}queue" % QUEUE_NS, nsmap={"q": QUEUE_NS})
    el.set("priority", str(job.priority))
    if job.start_after is not None:
        el.set("startAfter", format_time(job.start_after))
    el.set("attempt", str(job.attempt))
    for error in job.past_errors:
        etree.SubElement(el, "{%s}failedAttempt" % QUEUE_NS, type=error.type).text = \
            xml_text(error.message)
    if job.held:
        etree.SubElement(info, "{%s}held" % INFO_NS, nsmap={"info": INFO_NS}).text = \
            xml_text(job.held)
    if job.callback is not None:
        delivery = job.callback
        el = etree.SubElement(info, "{%s}callback" % CALLBACK_NS, nsmap={"cb": CALLBACK_NS})
        el.set("url", xml_text(delivery.url))
        el.set("state", delivery.state)
        el.set("attempts", str(delivery.attempts))
        if delivery.status is not None:
            el.set("status", str(delivery.status))
        if delivery.delivered is not None:
            el.set("delivered", format_time(delivery.delivered))
        if delivery.error:
            el.text = xml_text(delivery.error)


def job_document(job: Job, links: Links, now) -> bytes:
    root = etree.Element(_U + "job", nsmap=NSMAP)
    root.set("version", VERSION)
    _sub(root, "jobId", job.id)
    if job.run_id is not None:
        _sub(root, "runId", xml_text(job.run_id))
    _sub(root, "ownerId", job.owner or None, nil=not job.owner)
    _sub(root, "phase", job.phase.value)
    _time(root, "quote", job.quote)
    _time(root, "creationTime", job.creation_time)
    _time(root, "startTime", job.start_time)
    _time(root, "endTime", job.end_time)
    _sub(root, "executionDuration", str(job.execution_duration))
    _time(root, "destruction", job.destruction)
    _parameters(root, job, links)
    _results(root, job, links)
    if job.error is not None:
        err = job.error
        el = etree.SubElement(root, _U + "errorSummary", type=err.type,
                              hasDetail="true" if err.has_detail else "false")
        _sub(el, "message", xml_text(err.message))
    _job_info(root, job, now)
    return _tostring(root)


def parameters_document(job: Job, links: Links) -> bytes:
    return _tostring(_parameters(None, job, links))


def results_document(job: Job, links: Links) -> bytes:
    return _tostring(_results(None, job, links))
