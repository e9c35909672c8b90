"""VOSI 1.1 documents: a service's availability and its capabilities.

Capabilities name the UWS 1.1 standard (``ivo://ivoa.net/std/UWS#rest-1.1``) at
the service's job list and the two VOSI endpoints themselves, each interface a
``vs:ParamHTTP`` as registries expect.  Checked against the official schemas in
``schemas/`` by the tests.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from lxml import etree

from ..domain.timeutil import format_time

AVAILABILITY_NS = "http://www.ivoa.net/xml/VOSIAvailability/v1.0"
CAPABILITIES_NS = "http://www.ivoa.net/xml/VOSICapabilities/v1.0"
VODATASERVICE_NS = "http://www.ivoa.net/xml/VODataService/v1.1"
XSI_NS = "http://www.w3.org/2001/XMLSchema-instance"

UWS_STANDARD = "ivo://ivoa.net/std/UWS#rest-1.1"
CAPABILITIES_STANDARD = "ivo://ivoa.net/std/VOSI#capabilities"
AVAILABILITY_STANDARD = "ivo://ivoa.net/std/VOSI#availability"


def availability_document(available: bool, notes: Iterable[str],
                          up_since: dt.datetime | None = None) -> bytes:
    """``<vosi:availability>``: available, upSince (when known), then the notes."""
    root = etree.Element("{%s}availability" % AVAILABILITY_NS,
                         nsmap={"vosi": AVAILABILITY_NS})
    etree.SubElement(root, "{%s}available" % AVAILABILITY_NS).text = \
        "true" if available else "false"
    if up_since is not None:
        etree.SubElement(root, "{%s}upSince" % AVAILABILITY_NS).text = format_time(up_since)
    for note in notes:
        etree.SubElement(root, "{%s}note" % AVAILABILITY_NS).text = note
    return _tostring(root)


def capabilities_document(service_url: str, description: str) -> bytes:
    """``<vosi:capabilities>`` of the service whose job list is at ``service_url``."""
    root = etree.Element("{%s}capabilities" % CAPABILITIES_NS,
                         nsmap={"vosi": CAPABILITIES_NS, "vs": VODATASERVICE_NS, "xsi": XSI_NS})
    _capability(root, UWS_STANDARD, service_url, "base", description)
    _capability(root, CAPABILITIES_STANDARD, f"{service_url}/capabilities", "full")
    _capability(root, AVAILABILITY_STANDARD, f"{service_url}/availability", "full")
    return _tostring(root)


def _capability(root, standard_id: str, url: str, use: str, description: str = "") -> None:
    # vr:Capability's children are unqualified (VOResource's elementFormDefault)
    cap = etree.SubElement(root, "capability", standardID=standard_id)
    if description:
        etree.SubElement(cap, "description").text = description
    interface = etree.SubElement(cap, "interface", role="std")
    interface.set("{%s}type" % XSI_NS, "vs:ParamHTTP")
    etree.SubElement(interface, "accessURL", use=use).text = url


def _tostring(root) -> bytes:
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")
