"""Administrative holds of a service: /{service}/holds (administrators only).

GET lists the holds (XML in the holds namespace, JSON on request, a page with
forms for browsers); POST with ``ACTION=HOLD|RELEASE``, ``OWNER`` (none: the
whole service) and ``REASON`` places or lifts one, then 303 back to the list.
"""
from __future__ import annotations

from flask import Blueprint, Flask, request
from werkzeug.exceptions import MethodNotAllowed

from ..domain.errors import BadRequest, UWSError
from ..render import holds as render
from ..usecases.holds import Holds
from . import identity, pages
from .access import service_view
from .http import base_url, form_pairs, jobs_api, json_response, see_other, single, split_control, xml
from .negotiation import NEGOTIATED, wants_html, wants_json

bp = Blueprint("holds", __name__)
HOLDS = "/<service>/holds"
FIELDS = frozenset({"ACTION", "OWNER", "REASON"})


def _holds() -> Holds:
    return Holds(jobs_api())


@bp.route(HOLDS, methods=["GET"])
@service_view
def get_holds(service: str):
    holds = _holds().of_service(service, identity.current_caller())
    if wants_html():
        return pages.render("holds.html", service=jobs_api().service(service), holds=holds)
    if wants_json():
        return json_response(render.holds_json(service, holds), headers=NEGOTIATED)
    return xml(render.holds_document(service, holds), headers=NEGOTIATED)


@bp.route(HOLDS, methods=["POST"])
@service_view
def post_holds(service: str):
    caller = identity.current_caller()
    _holds().check(service, caller)     # 403 before any complaint about the form
    control, rest = split_control(form_pairs(), FIELDS)
    if rest:
        raise BadRequest(f"unexpected parameter {rest[0][0]!r}; only ACTION, OWNER and "
                         "REASON are accepted here")
    action = (single(control, "ACTION") or "").strip().upper()
    owner = single(control, "OWNER")
    if action == "HOLD":
        _holds().hold(service, owner, single(control, "REASON") or "", caller)
    elif action == "RELEASE":
        _holds().release(service, owner, caller)
    else:
        raise BadRequest("ACTION: must be HOLD or RELEASE")
    return see_other(f"{base_url()}{service}/holds")


@bp.route(HOLDS, methods=["PUT", "DELETE", "PATCH"])
@service_view
def holds_other_methods(service: str):
    """405, rather than the job route's 404 for a job named "holds"."""
    raise MethodNotAllowed(valid_methods=["GET", "HEAD", "POST"])


def install(app: Flask) -> None:
    """Register the routes, and give pages the holds link of an administrator."""
    app.register_blueprint(bp)
    app.context_processor(_holds_link)


def _holds_link() -> dict:
    service = (request.view_args or {}).get("service")
    if not service or service not in jobs_api().config.services:
        return {"holds_url": None}
    try:
        admin = identity.current_caller().admin
    except UWSError:    # an error page for bad credentials: no administrator here
        admin = False
    return {"holds_url": f"{base_url()}{service}/holds" if admin else None}
