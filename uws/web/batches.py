"""Batches: /{service}/batches (list, create) and /{service}/batches/{id} (report,
run, abort, repeat, delete), as XML, JSON or HTML.  The use cases are uws.usecases.batches."""
from __future__ import annotations

from flask import Blueprint, Flask, Response, current_app
from werkzeug.exceptions import MethodNotAllowed

from ..domain.errors import BadRequest
from ..render import batch as render
from ..store.batches import BatchStore
from ..usecases.batches import BatchControl, Batches
from . import pages
from .access import service_view
from .batchbodies import ParseSlots, read_batch
from .http import (
    base_url,
    form_pairs,
    job_url,
    json_response,
    see_other,
    single,
    split_control,
    xml,
)
from .job import caller
from .negotiation import NEGOTIATED, wants_html, wants_json
from .paging import MAX_START, int_value

bp = Blueprint("batches", __name__)
BATCHES = "/<service>/batches"
BATCH = "/<service>/batches/<batch_id>"
BATCH_CONTROL = frozenset({"PHASE", "ACTION", "METHOD"})
#: What a POST to a batch may ask, and the use case it calls.
CONTROLS = {("PHASE", "RUN"): "run", ("PHASE", "ABORT"): "abort", ("ACTION", "REPEAT"): "repeat",
            ("ACTION", "DELETE"): "delete", ("METHOD", "DELETE"): "delete"}
PAGE = 100          # jobs or batches per page unless ``limit`` asks otherwise
MAX_PAGE = 1000


def install(app: Flask, jobs, parses: int) -> None:
    """Serve batches with the app's use cases (``jobs``) and store, parsing at most
    ``parses`` batch bodies at once."""
    app.extensions["uws_batches"] = Batches(jobs, BatchStore(jobs.store))
    app.extensions["uws_batch_parses"] = ParseSlots(parses)
    app.register_blueprint(bp)


def batches_api() -> Batches:
    return current_app.extensions["uws_batches"]


def list_url(service: str) -> str:
    return f"{base_url()}{service}/batches"


def batch_url(service: str, batch_id: str) -> str:
    return f"{list_url(service)}/{batch_id}"


def _page() -> tuple[int, int]:
    """``start`` (an offset, at most MAX_START) and ``limit`` (at most MAX_PAGE) of this
    request."""
    start = int_value("start", minimum=0) or 0
    if start > MAX_START:       # also keeps it within the database's integers
        raise BadRequest(f"start: at most {MAX_START}")
    limit = int_value("limit", minimum=1) or PAGE
    if limit > MAX_PAGE:
        raise BadRequest(f"limit: at most {MAX_PAGE}")
    return start, limit


def _next_link(url: str, start: int, limit: int, total: int) -> dict[str, str]:
    headers = dict(NEGOTIATED)
    if start + limit < total:
        headers["Link"] = f'<{url}?start={start + limit}&limit={limit}>; rel="next"'
    return headers


# -- the list -----------------------------------------------------------------------------

@bp.route(BATCHES, methods=["GET"])
@service_view
def list_batches(service: str):
    start, limit = _page()
    batches, total = batches_api().list(service, start, limit, caller())
    url = list_url(service)
    if wants_html():
        return pages.render("batches.html", service=batches_api().jobs.service(service),
                            batches=batches, total=total, start=start, limit=limit, url=url,
                            deleted=pages.deleted_notice())
    headers = _next_link(url, start, limit, total)
    if wants_json():
        return json_response(render.batch_list_json(batches, total, start, _linker(url)),
                             headers=headers)
    return xml(render.batch_list(batches, total, start, _linker(url)), headers=headers)


def _linker(url: str):
    return lambda batch_id: f"{url}/{batch_id}"


@bp.route(BATCHES, methods=["POST"])
@service_view
def create_batch(service: str):
    api = batches_api()
    served = api.jobs.service(service)      # 404 before reading the body
    with current_app.extensions["uws_batch_parses"].held():
        rows, control = read_batch(served)
    phase = single(control, "PHASE")
    if phase is not None and phase.upper() != "RUN":
        raise BadRequest(f"PHASE: only RUN may be given at creation, not {phase!r}")
    batch_id = api.create(service, rows, BatchControl(run=phase is not None,
                                                      run_id=single(control, "RUNID"),
                                                      callback=single(control, "CALLBACK")),
                          caller())
    return see_other(batch_url(service, batch_id))


@bp.route(BATCHES, methods=["PUT", "DELETE", "PATCH"])
@service_view
def batches_other_methods(service: str):
    """405, rather than the job route's 404 for a job named "batches"."""
    raise MethodNotAllowed(valid_methods=["GET", "HEAD", "POST"])


# -- one batch ------------------------------------------------------------------------------

@bp.route(BATCH, methods=["GET"])
@service_view
def get_batch(service: str, batch_id: str):
    api = batches_api()
    batch = api.get(service, batch_id, caller())
    start, limit = _page()
    progress = api.progress(batch)
    url = batch_url(service, batch.id)
    report = render.BatchReport(batch, progress, api.report(batch, start, limit), start, url,
                                lambda job_id: job_url(service, job_id), api.callback(batch))
    if wants_html():
        return pages.render("batch.html", report=report, limit=limit,
                            list_url=list_url(service))
    headers = _next_link(url, start, limit, progress.total)
    if wants_json():
        return json_response(render.batch_json(report), headers=headers)
    return xml(render.batch_document(report), headers=headers)


@bp.route(BATCH, methods=["POST"])
@service_view
def post_batch(service: str, batch_id: str):
    api = batches_api()
    api.get(service, batch_id, caller())     # 404/403 before the body is read
    control, rest = split_control(form_pairs(), BATCH_CONTROL)
    if rest:
        raise BadRequest(f"{rest[0][0]}: a batch takes PHASE, ACTION or METHOD only")
    given = [(name, value) for name in ("PHASE", "ACTION", "METHOD")
             if (value := single(control, name)) is not None]
    if len(given) != 1:
        raise BadRequest("give one of PHASE=RUN, PHASE=ABORT, ACTION=REPEAT, ACTION=DELETE")
    name, value = given[0]
    what = CONTROLS.get((name, value.upper()))
    if what is None:
        raise BadRequest(f"{name}: not one a batch takes: {value!r}")
    if what == "delete":
        return _delete(service, batch_id)
    if what == "repeat":
        return see_other(batch_url(service, api.repeat(service, batch_id, caller())))
    (api.run if what == "run" else api.abort)(service, batch_id, caller())
    return see_other(batch_url(service, batch_id))


@bp.route(BATCH, methods=["DELETE"])
@service_view
def delete_batch(service: str, batch_id: str) -> Response:
    return _delete(service, batch_id)


def _delete(service: str, batch_id: str) -> Response:
    batches_api().delete(service, batch_id, caller())
    # A browser's list says what was deleted; API clients get the list as before.
    return see_other(list_url(service) + (f"?deleted={batch_id}" if wants_html() else ""))


@bp.route(BATCH + "/delete", methods=["GET"])
@service_view
def confirm_delete(service: str, batch_id: str):
    """The page asking a person whether to delete the batch (an HTML page whatever the
    Accept header); its form posts METHOD=DELETE to the batch."""
    api = batches_api()
    batch = api.get(service, batch_id, caller())
    url = batch_url(service, batch.id)
    return pages.render("confirm.html", what="batch", name=batch.run_id or batch.id[:12],
                        service=service, target=url, here=f"{url}/delete",
                        consequence=f"Its {batch.job_count} jobs are deleted with it, "
                                    "their results too.")
