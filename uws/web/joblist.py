"""The root (list of services) and the job lists: GET, HEAD and POST /{jobs}."""
from __future__ import annotations

from flask import Blueprint, Response, request

from ..domain.errors import BadRequest
from ..render import json as jsonr
from ..render import xml as xmlr
from ..usecases.jobs import Control
from . import forms, pages, paging
from .access import service_view
from .http import (
    JSON_TYPE,
    XML_TYPE,
    base_url,
    form_pairs,
    job_url,
    jobs_api,
    json_response,
    json_stream,
    query_values,
    see_other,
    single,
    split_control,
    text,
    uploads,
    xml,
)
from .job import caller
from .negotiation import NEGOTIATED, choose, wants_html, wants_json

bp = Blueprint("joblist", __name__)

CREATE_CONTROL = frozenset({"PHASE", "RUNID", "EXECUTIONDURATION", "DESTRUCTION", "PRIORITY",
                            "STARTAFTER", "CALLBACK"})
COUNT_HEADER = "X-Job-Count"


@bp.route("/", methods=["GET"])
def root():
    services = [(name, f"{base_url()}{name}", s.description)
                for name, s in jobs_api().config.services.items()]
    return choose(lambda: text("".join(f"{href}\t{d}\n" for _, href, d in services)),
                  lambda: json_response(jsonr.services_document(services)), pages.index_page)


@bp.route("/<service>", methods=["GET", "HEAD"], strict_slashes=False)
@service_view
def job_list(service: str):
    api = jobs_api()
    if request.method == "GET" and wants_html() and not wants_json():
        return pages.service_page(service, caller())
    q, paged = paging.list_query()
    if request.method == "HEAD":
        count = api.count(service, q, caller())
        return Response(status=200, content_type=JSON_TYPE if wants_json() else XML_TYPE,
                        headers={COUNT_HEADER: str(count), **NEGOTIATED})
    return _list_document(service, q, paged, api.list(service, q, caller()))


def _list_document(service: str, q, paged: bool, refs):
    """The list as XML or JSON: streamed as it is read when unbounded; a bounded page
    whole with its length (so the connection stays open) and its next page's link."""
    list_url = f"{base_url()}{service}"
    prefix = list_url + "/"     # a streamed body outlives the request context

    def href(job_id: str) -> str:
        return prefix + job_id

    if not isinstance(refs, list):
        return choose(lambda: xml(xmlr.job_list(refs, list_url)),
                      lambda: json_stream(jsonr.job_list(refs, href)))
    headers, tail = dict(NEGOTIATED), {}
    if paged and len(refs) == q.limit:
        tail["next"] = paging.next_url(list_url, q, refs[-1])
        headers["Link"] = paging.link_to_next(tail["next"])

    # No total: a count with AFTER scans every match, on each page; HEAD gives it.
    def as_json():
        if "next" in tail and query_values("FORMAT"):
            tail["next"] += "&FORMAT=json"      # a browser following it gets JSON again
        return json_stream(b"".join(jsonr.job_list(refs, href, tail)), headers=headers)
    return choose(lambda: xml(b"".join(xmlr.job_list(refs, list_url)), headers=headers), as_json)


@bp.route("/<service>", methods=["POST"], strict_slashes=False)
@service_view
def create_job(service: str):
    api = jobs_api()
    api.service(service)    # 404 before reading any upload
    control, pairs = split_control(form_pairs(), CREATE_CONTROL)
    if wants_html():
        return _create_from_browser(service, control, pairs)
    ctl = _control(control)
    job_id = api.create(service, pairs, uploads(), ctl, caller())
    return see_other(job_url(service, job_id))


def _control(control: dict) -> Control:
    phase = single(control, "PHASE")
    if phase is not None and phase.upper() != "RUN":
        raise BadRequest(f"PHASE: only RUN may be given at creation, not {phase!r}")
    return Control(run=phase is not None, run_id=single(control, "RUNID"),
                   execution_duration=single(control, "EXECUTIONDURATION"),
                   destruction=single(control, "DESTRUCTION"),
                   priority=single(control, "PRIORITY"),
                   start_after=single(control, "STARTAFTER"),
                   callback=single(control, "CALLBACK"))


def _create_from_browser(service: str, control: dict, pairs):
    """A creation form's post: the same job, or the form again (400) showing every
    problem next to its field with the values kept."""
    svc = jobs_api().service(service)
    control, pairs = forms.browser_control(control), forms.browser_pairs(svc, pairs)
    files = uploads()
    errors = forms.creation_errors(svc, pairs, files, control)
    if not errors:
        try:
            job_id = jobs_api().create(service, pairs, files, _control(control), caller())
            return see_other(job_url(service, job_id))
        except BadRequest as exc:
            errors = {"": str(exc)}
    for name in files:      # a browser cannot keep a chosen file in a form sent back
        errors.setdefault(name.upper(), "the file was not kept when the form came back")
    return pages.service_page(service, caller(), forms.submitted(pairs, control), errors, 400)
