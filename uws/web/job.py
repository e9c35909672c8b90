"""One job and its children: /{jobs}/{id}[/phase|/executionduration|...]."""
from __future__ import annotations

import dataclasses

from flask import Blueprint, request
from werkzeug.datastructures import FileStorage

from ..domain import numbers
from ..domain.errors import BadRequest, NotFound, TooLarge
from ..domain.model import Caller
from ..domain.phases import Phase
from ..domain.timeutil import format_time
from ..http import parking
from ..render import json as jsonr
from ..render import xml as xmlr
from . import forms, identity, pages
from .access import job_use_case_view, job_view
from .downloads import download
from .http import (
    FORM_TYPES,
    MAX_FORM_BYTES,
    UnsupportedMediaType,
    base_url,
    check_unencoded,
    form_pairs,
    job_url,
    jobs_api,
    json_response,
    query_value,
    see_other,
    single,
    split_control,
    text,
    uploads,
    xml,
)
from .negotiation import choose, wants_html
from .paging import phase_value

bp = Blueprint("job", __name__)
JOB = "/<service>/<job_id>"
JOB_CONTROL = frozenset({"PHASE", "ACTION", "METHOD", "RUNID", "PRIORITY", "STARTAFTER",
                         "CALLBACK"})


def caller() -> Caller:
    return identity.current_caller()


def _job(service: str, job_id: str):
    return jobs_api().get(service, job_id, caller())


def _links(service: str, job_id: str) -> xmlr.Links:
    return xmlr.Links(job_url(service, job_id))


def _back_to_job(service: str, job_id: str):
    return see_other(job_url(service, job_id))


def _back_to_list(service: str, deleted: str | None = None):
    """To the job list; a browser's says which job was ``deleted``."""
    if wants_html():        # paged, with the real total
        return see_other(f"{base_url()}{service}" + (f"?deleted={deleted}" if deleted else ""))
    return see_other(f"{base_url()}{service}?LAST={jobs_api().config.redirect_last}")


# -- the job ------------------------------------------------------------------------

@bp.route(JOB, methods=["GET"])
@job_use_case_view
def get_job(service: str, job_id: str):
    api = jobs_api()
    wait = query_value("WAIT")
    if wait is None:
        job = api.get(service, job_id, caller())
    else:
        job = _waited(service, job_id, _wait_seconds(wait), _wait_phase())
    links = _links(service, job_id)
    return choose(lambda: xml(xmlr.job_document(job, links)),
                  lambda: json_response(jsonr.job(job, links)), lambda: pages.job_page(job, caller()))


def _waited(service: str, job_id: str, seconds: int, phase):
    """The job to answer a WAIT with.  Under ``uws serve`` the request is parked
    without a thread while it waits (:mod:`uws.http.parking`: this raises Parked,
    and the view runs again once woken); under another server the thread waits."""
    api = jobs_api()
    ticket = parking.ticket_of(request.environ)
    if ticket is None:
        return api.wait(service, job_id, seconds, phase, caller())
    if ticket.answer_now:       # its time is up: the job as it is
        return api.get(service, job_id, caller())
    # once woken, the phase first waited on decides: a notice need not be a change
    job, subscription = api.watch_job(service, job_id, ticket.waited or phase, ticket.wake,
                                      caller())
    if subscription is not None:
        ticket.waited = job.phase
        ticket.park(subscription, api.wait_seconds(seconds))    # returns: answer now
    return job


def _wait_seconds(text_value: str) -> int:
    try:
        seconds = numbers.integer(text_value)
    except ValueError:
        raise BadRequest(f"WAIT: not an integer number of seconds: {text_value!r}") from None
    if seconds < -1:    # UWS 1.1 §2.2.1.1 defines -1 (the longest wait) and nothing below
        raise BadRequest(f"WAIT: must be -1 or a number of seconds, not {seconds}")
    return seconds


def _wait_phase():
    value = query_value("PHASE")
    return None if value is None else phase_value(value)


@bp.route(JOB, methods=["POST"])
@job_view
def post_job(service: str, job_id: str):
    api = jobs_api()
    control, pairs = split_control(form_pairs(), JOB_CONTROL)
    action = _action(control)
    if action == "DELETE":
        others = sorted(set(control) - {"ACTION", "METHOD"}) or [n for n, _ in pairs]
        if others or uploads():     # deleting is for good: never guess what else was meant
            raise BadRequest(f"{(others or ['an upload'])[0]}: ACTION=DELETE deletes the job, "
                             "with nothing else")
        api.delete(service, job_id, caller())
        return _back_to_list(service, job_id)
    if action == "REPEAT":
        return _repeat(service, job_id, control, pairs)
    # Every control value is checked before anything changes: a 400 changes nothing.
    phase = _phase_word(single(control, "PHASE"))
    run_id = single(control, "RUNID")
    schedule = api.schedule(service, single(control, "PRIORITY"),
                            single(control, "STARTAFTER"), caller())
    callback = single(control, "CALLBACK")
    if callback is not None:
        api.check_access(service, job_id, caller())
        api.check_callback(service, callback)
    files = uploads()
    if pairs or files or run_id is not None:
        api.update_parameters(service, job_id, pairs, files, caller(), run_id)
    elif callback is None:
        _job(service, job_id)   # 404/403 even for an empty POST
    if not schedule.empty:
        api.reschedule(service, job_id, schedule, caller())
    if callback is not None:
        api.set_callback(service, job_id, callback, caller())
    if phase is not None:
        _change_phase(service, job_id, phase)
    return _back_to_job(service, job_id)


def _action(control: dict) -> str | None:
    """DELETE (ACTION or METHOD, or both), REPEAT (ACTION), or None; 400 for anything
    else, and for two that disagree."""
    words = set()
    for name, allowed in (("ACTION", ("DELETE", "REPEAT")), ("METHOD", ("DELETE",))):
        value = single(control, name)
        if value is None:
            continue
        word = value.strip().upper()
        if word not in allowed:
            raise BadRequest(f"{name}: must be {' or '.join(allowed)}, not {value!r}")
        words.add(word)
    if len(words) > 1:
        raise BadRequest("ACTION and METHOD ask for different things")
    return words.pop() if words else None


def _repeat(service: str, job_id: str, control: dict, pairs):
    """ACTION=REPEAT: 303 to a new job like this one, run at once with PHASE=RUN."""
    phase = _phase_word(single(control, "PHASE"))
    if phase == "ABORT":
        raise BadRequest("PHASE: only RUN may go with ACTION=REPEAT")
    others = sorted(set(control) - {"ACTION", "PHASE"})
    if others:      # PRIORITY, CALLBACK, ...: the copy keeps the job's, never another
        raise BadRequest(f"{others[0]}: ACTION=REPEAT copies the job as it is, "
                         "with nothing but PHASE=RUN")
    if pairs or uploads():
        raise BadRequest("ACTION=REPEAT copies the job as it is: send no parameters with it")
    new_id = jobs_api().repeat(service, job_id, caller(), run=phase == "RUN")
    return see_other(job_url(service, new_id))


@bp.route(JOB, methods=["DELETE"])
@job_use_case_view
def delete_job(service: str, job_id: str):
    jobs_api().delete(service, job_id, caller())
    return _back_to_list(service, job_id)


@bp.route(JOB + "/delete", methods=["GET"])
@job_use_case_view
def confirm_delete(service: str, job_id: str):
    """The page asking a person whether to delete the job: its form posts METHOD=DELETE
    to the job (an HTML page whatever the Accept header: nothing else asks this)."""
    return pages.confirm_delete_job(_job(service, job_id))


# -- phase, executionduration, destruction --------------------------------------------

@bp.route(JOB + "/phase", methods=["GET"])
@job_use_case_view
def get_phase(service: str, job_id: str):
    job = _job(service, job_id)
    return choose(lambda: text(job.phase.value), lambda: json_response(jsonr.phase_document(job)))


@bp.route(JOB + "/phase", methods=["POST"])
@job_view
def post_phase(service: str, job_id: str):
    word = _phase_word(_required_form_value("PHASE"))
    assert word is not None         # a required value is never absent
    _change_phase(service, job_id, word)
    return _back_to_job(service, job_id)


def _phase_word(phase: str | None) -> str | None:
    """RUN or ABORT from a PHASE value (None when absent); 400 for anything else."""
    if phase is None:
        return None
    word = phase.strip().upper()
    if word not in ("RUN", "ABORT"):
        raise BadRequest(f"PHASE: must be RUN or ABORT, not {phase!r}")
    return word


def _change_phase(service: str, job_id: str, word: str) -> None:
    if word == "RUN":
        jobs_api().run(service, job_id, caller())
    else:
        jobs_api().abort(service, job_id, caller())


def _required_form_value(name: str) -> str:
    control, rest = split_control(form_pairs(), {name})
    if rest:
        raise BadRequest(f"unexpected parameter {rest[0][0]!r}; only {name} is accepted here")
    value = single(control, name)
    if value is None:
        raise BadRequest(f"{name} is required")
    return value


@bp.route(JOB + "/executionduration", methods=["GET"])
@job_use_case_view
def get_duration(service: str, job_id: str):
    job = _job(service, job_id)
    return choose(lambda: text(str(job.execution_duration)),
                  lambda: json_response(jsonr.execution_duration_document(job)))


@bp.route(JOB + "/executionduration", methods=["POST"])
@job_view
def post_duration(service: str, job_id: str):
    value = _required_form_value("EXECUTIONDURATION")
    jobs_api().set_execution_duration(service, job_id, value, caller())
    return _back_to_job(service, job_id)


@bp.route(JOB + "/destruction", methods=["GET"])
@job_use_case_view
def get_destruction(service: str, job_id: str):
    job = _job(service, job_id)
    return choose(lambda: text(format_time(job.destruction)),
                  lambda: json_response(jsonr.destruction_document(job)))


@bp.route(JOB + "/destruction", methods=["POST"])
@job_view
def post_destruction(service: str, job_id: str):
    value = _required_form_value("DESTRUCTION")
    jobs_api().set_destruction(service, job_id, value, caller())
    return _back_to_job(service, job_id)


# -- read-only children ----------------------------------------------------------------

@bp.route(JOB + "/quote", methods=["GET"])
@job_use_case_view
def get_quote(service: str, job_id: str):
    job = _job(service, job_id)
    return choose(lambda: text(format_time(job.quote)),
                  lambda: json_response(jsonr.quote_document(job)))


@bp.route(JOB + "/owner", methods=["GET"])
@job_use_case_view
def get_owner(service: str, job_id: str):
    job = _job(service, job_id)
    return choose(lambda: text(job.owner), lambda: json_response(jsonr.owner_document(job)))


@bp.route(JOB + "/error", methods=["GET"])
@job_use_case_view
def get_error(service: str, job_id: str):
    job = _job(service, job_id)
    error = job.error
    return choose(lambda: text("" if error is None else error.detail or error.message),
                  lambda: json_response(jsonr.error_document(job)))


@bp.route(JOB + "/results", methods=["GET"])
@job_use_case_view
def get_results(service: str, job_id: str):
    job, links = _job(service, job_id), _links(service, job_id)
    return choose(lambda: xml(xmlr.results_document(job, links)),
                  lambda: json_response(jsonr.results_document(job, links)))


@bp.route(JOB + "/results/<result_id>", methods=["GET"])
@job_use_case_view
def get_result(service: str, job_id: str, result_id: str):
    job = _job(service, job_id)
    for r in job.results:
        if r.id == result_id:
            try:
                opened = jobs_api().files.open_result(job_id, r.path)
            except NotFound:
                raise NotFound(f"result {result_id!r} is no longer available") from None
            return download(opened, r.mime_type, r.path.rsplit("/", 1)[-1])
    raise NotFound(f"no result {result_id!r}")


# -- parameters ------------------------------------------------------------------------

@bp.route(JOB + "/parameters", methods=["GET"])
@job_use_case_view
def get_parameters(service: str, job_id: str):
    job, links = _job(service, job_id), _links(service, job_id)
    return choose(lambda: xml(xmlr.parameters_document(job, links)),
                  lambda: json_response(jsonr.parameters_document(job, links)))


@bp.route(JOB + "/parameters", methods=["POST"])
@job_view
def post_parameters(service: str, job_id: str):
    control, pairs = split_control(form_pairs(), {"RUNID"})
    if wants_html():
        return _parameters_from_browser(service, job_id, control, pairs)
    jobs_api().update_parameters(service, job_id, pairs, uploads(), caller(),
                                 single(control, "RUNID"))
    return _back_to_job(service, job_id)


def _parameters_from_browser(service: str, job_id: str, control: dict, sent):
    """The job page's form of parameters: the change, or the job's page again (400)
    with every problem next to its field and the values as sent (as creation does)."""
    job = _job(service, job_id)         # 404/403 before anything is said of the values
    svc = jobs_api().service(service)
    pairs, files = forms.browser_pairs(svc, sent), uploads()
    errors = forms.parameter_errors(svc, pairs, files, creating=False)
    # A job past PENDING shows no form: the use case's 403 says why.
    if not errors or job.phase is not Phase.PENDING:
        try:
            jobs_api().update_parameters(service, job_id, pairs, files, caller(),
                                         single(control, "RUNID"))
            return _back_to_job(service, job_id)
        except BadRequest as exc:
            errors = {"": str(exc)}
    for name in files:      # a browser cannot keep a chosen file in a form sent back
        errors.setdefault(name.upper(), "the file was not kept when the form came back")
    return pages.job_page(job, caller(), forms.submitted(sent, {}), errors, 400)


@bp.route(JOB + "/parameters/<name>", methods=["GET"])
@job_use_case_view
def get_parameter(service: str, job_id: str, name: str):
    job = _job(service, job_id)
    params = [p for p in job.parameters if p.name.upper() == name.upper()]
    if not params:
        raise NotFound(f"job has no parameter {name!r}")
    p = params[0]
    if p.is_upload:
        return download(jobs_api().files.open_upload(job_id, p.name),
                        "application/octet-stream", p.name)
    return choose(lambda: text("\n".join(q.value for q in params)),
                  lambda: json_response(jsonr.parameters_document(
                      dataclasses.replace(job, parameters=params), _links(service, job_id))))


@bp.route(JOB + "/parameters/<name>", methods=["PUT"])
@job_view
def put_parameter(service: str, job_id: str, name: str):
    api = jobs_api()
    if request.mimetype in FORM_TYPES:
        pairs, files = form_pairs(include_query=False), uploads()
    elif request.mimetype in ("", "text/plain", "application/octet-stream"):
        pairs, files = _raw_body_value(api, service, name)
    else:
        raise UnsupportedMediaType(f"unsupported body type {request.mimetype!r}")
    api.update_parameters(service, job_id, pairs, files, caller())
    return _back_to_job(service, job_id)


def _raw_body_value(api, service: str, name: str):
    """A PUT's whole body as the value: a file's bytes streamed from the server's
    spooled body to the staged upload (never held in memory), or text read up to a
    bound (413 past it)."""
    check_unencoded()
    spec = api.service(service).spec(name) if _known(api, service, name) else None
    if spec is not None and spec.is_file and request.mimetype == "application/octet-stream":
        return [], {spec.name: FileStorage(request.stream, filename=spec.name)}
    limit = max(MAX_FORM_BYTES, 4 * spec.max_length) if spec is not None else MAX_FORM_BYTES
    body = request.stream.read(limit + 1)
    if len(body) > limit:
        raise TooLarge(f"{name}: a text value of more than {limit} bytes")
    try:
        return [(name, body.decode("utf-8"))], {}
    except UnicodeDecodeError:
        raise BadRequest(f"{name}: the value is not UTF-8 text") from None


def _known(api, service: str, name: str) -> bool:
    try:
        api.service(service).spec(name)
        return True
    except ValueError:
        return False
