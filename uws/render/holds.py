"""The holds of a service (``/{service}/holds``) as XML and as JSON.

XML in a namespace of its own (not UWS: pyvo never sees it), valid against
schemas/uws-holds.xsd; JSON with the same names.  A hold on the whole service
has no ``owner``.
"""
from __future__ import annotations

from typing import Any

from lxml import etree

from ..domain.model import Hold, xml_text
from ..domain.timeutil import format_time

HOLDS_NS = "urn:ivoa-uws-server:holds"
_H = "{%s}" % HOLDS_NS


def holds_document(service: str, holds: list[Hold]) -> bytes:
    root = etree.Element(_H + "holds", nsmap={"holds": HOLDS_NS}, service=service)
    for h in holds:
        el = etree.SubElement(root, _H + "hold", who=xml_text(h.who),
                              since=format_time(h.created))
        if not h.whole_service:
            el.set("owner", xml_text(h.owner))
        etree.SubElement(el, _H + "reason").text = xml_text(h.reason)
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")


def holds_json(service: str, holds: list[Hold]) -> dict[str, Any]:
    return {"service": service,
            "holds": [{"owner": None if h.whole_service else h.owner, "who": h.who,
                       "since": format_time(h.created), "reason": h.reason} for h in holds]}
