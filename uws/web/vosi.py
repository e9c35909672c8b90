"""VOSI 1.1 (IVOA Support Interfaces) of each service: /{service}/availability and
/{service}/capabilities, readable by anyone (registries and monitors call without
credentials) and describing the service, never any job."""
from __future__ import annotations

from flask import Blueprint, request
from werkzeug.exceptions import MethodNotAllowed

from ..render import vosi as vosir
from .access import public_view
from .http import base_url, jobs_api, xml

bp = Blueprint("vosi", __name__)
#: Every method is routed here, so that the job route below /{service}/ does not take
#: them (VOSI: 405 for what is not a GET).
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH"]


def _get_only() -> None:
    if request.method not in ("GET", "HEAD"):
        raise MethodNotAllowed(valid_methods=["GET", "HEAD"])


@bp.route("/<service>/availability", methods=METHODS)
@public_view
def availability(service: str):
    """Available when this front end's database answers and its executor runs."""
    _get_only()
    api = jobs_api()
    problems = [p for p in (api.store.problem(), api.executor.problem()) if p]
    notes = problems or ["the database answers and the executor runs"]
    return xml(vosir.availability_document(not problems, notes))


@bp.route("/<service>/capabilities", methods=METHODS)
@public_view
def capabilities(service: str):
    _get_only()
    description = jobs_api().service(service).description
    return xml(vosir.capabilities_document(f"{base_url()}{service}", description))
