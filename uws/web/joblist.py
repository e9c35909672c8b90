"""The root (list of services) and the job lists: GET, HEAD and POST /{jobs}."""
from __future__ import annotations

from flask import Blueprint, Response, request

from ..errors import BadRequest
from ..jobs import Control
from ..render import xml as xmlr
from . import forms, pages, paging
from .access import service_view
from .http import (
    base_url,
    form_pairs,
    job_url,
    jobs_api,
    see_other,
    single,
    split_control,
    text,
    uploads,
    xml,
)
from .job import caller
from .negotiation import NEGOTIATED, wants_html

bp = Blueprint("joblist", __name__)

CREATE_CONTROL = frozenset({"PHASE", "RUNID", "EXECUTIONDURATION", "DESTRUCTION", "CALLBACK"})
COUNT_HEADER = "X-Job-Count"


@bp.route("/", methods=["GET"])
def root():
    if wants_html():
        return pages.index_page()
    lines = [f"{base_url()}{name}\t{s.description}" for name, s in jobs_api().config.services.items()]
    return text("\n".join(lines) + "\n", headers=NEGOTIATED)


@bp.route("/<service>", methods=["GET", "HEAD"], strict_slashes=False)
@service_view
def job_list(service: str):
    api = jobs_api()
    if request.method == "GET" and wants_html():
        return pages.service_page(service, caller())
    q, paged = paging.list_query()
    if request.method == "HEAD":
        count = api.count(service, q, caller())
        return Response(status=200, content_type="text/xml; charset=utf-8",
                        headers={COUNT_HEADER: str(count)})
    refs = api.list(service, q, caller())
    prefix = f"{base_url()}{service}/"     # a streamed body outlives the request context
    body = xmlr.job_list(refs, lambda job_id: prefix + job_id)
    if not isinstance(refs, list):
        return xml(body, headers=NEGOTIATED)   # unbounded: streamed as it is read
    headers = dict(NEGOTIATED)
    if paged and len(refs) == q.limit:
        headers["Link"] = paging.next_link(f"{base_url()}{service}", q, refs[-1])
    # A bounded page is sent whole with its length, so the connection stays open.
    return xml(b"".join(body), headers=headers)


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
