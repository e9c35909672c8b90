"""The statistics document (:class:`uws.usecases.stats.Report`) as XML in our own namespace
(schemas/uws-stats-v1.xsd) and as JSON of the same shape.

Durations are seconds, to the millisecond; a percentile of a window without
samples is left out of the XML and ``null`` in the JSON.  Phases are listed in
the order of :class:`uws.domain.phases.Phase`, those without jobs left out.
"""
from __future__ import annotations

from typing import Any

from lxml import etree

from ..domain.model import xml_text
from ..domain.phases import Phase
from ..domain.timeutil import format_time
from ..usecases.stats import Durations, Figures, Report

STATS_NS = "urn:ivoa-uws-server:stats:v1"
SCHEMA = "uws-stats-v1.xsd"
_S = "{%s}" % STATS_NS


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _attributes(report: Report) -> dict[str, str]:
    attrs = {"window": report.window, "since": format_time(report.since),
             "until": format_time(report.until)}
    if report.service is not None:
        attrs = {"service": report.service, **attrs}
    return attrs


def xml_document(report: Report) -> bytes:
    root = etree.Element(_S + "statistics", _attributes(report), nsmap={"stats": STATS_NS})
    _figures(etree.SubElement(root, _S + "all"), report.total)
    for owner, figures in (report.owners or {}).items():
        _figures(etree.SubElement(root, _S + "owner", {"id": xml_text(owner)}), figures)
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")


def _figures(el, figures: Figures) -> None:
    el.set("queued", str(figures.queued))
    el.set("held", str(figures.held))
    for phase, n in _phases(figures):
        etree.SubElement(el, _S + "phase", {"name": phase.value, "jobs": str(n)})
    _durations(etree.SubElement(el, _S + "waitTime"), figures.wait)
    _durations(etree.SubElement(el, _S + "runTime"), figures.run)


def _durations(el, durations: Durations) -> None:
    el.set("samples", str(durations.samples))
    for name in ("p50", "p90", "p99"):
        value = _seconds(getattr(durations, name))
        if value is not None:
            el.set(name, repr(value))


def _phases(figures: Figures) -> list[tuple[Phase, int]]:
    return [(p, figures.jobs[p]) for p in Phase if figures.jobs.get(p)]


def json_document(report: Report) -> dict[str, Any]:
    doc: dict[str, Any] = {"service": report.service, "window": report.window,
                           "since": format_time(report.since),
                           "until": format_time(report.until),
                           "all": _json_figures(report.total)}
    if report.owners is not None:
        doc["owners"] = [{"ownerId": owner, **_json_figures(figures)}
                         for owner, figures in report.owners.items()]
    return doc


def _json_figures(figures: Figures) -> dict[str, Any]:
    return {"jobs": {p.value: n for p, n in _phases(figures)},
            "queued": figures.queued, "held": figures.held,
            "waitTime": _json_durations(figures.wait), "runTime": _json_durations(figures.run)}


def _json_durations(durations: Durations) -> dict[str, Any]:
    return {"samples": durations.samples, "p50": _seconds(durations.p50),
            "p90": _seconds(durations.p90), "p99": _seconds(durations.p99)}
