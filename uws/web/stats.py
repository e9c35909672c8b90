"""The statistics resources: GET /stats (the whole server) and GET /{service}/stats,
as XML (the default), JSON (:func:`~.negotiation.wants_json`) or an HTML page.

An owner sees the figures of their own jobs; an administrator everyone's, each
owner's, and (on the page) the chart of jobs per phase over the window.
"""
from __future__ import annotations

from flask import Blueprint, Flask, current_app
from werkzeug.exceptions import MethodNotAllowed

from ..domain import timeutil
from ..domain.errors import UWSError
from ..render import chart
from ..render import stats as render
from ..usecases.stats import Report, Statistics, parse_window
from . import identity, pages
from .access import service_view
from .http import base_url, jobs_api, json_response, query_value, xml
from .negotiation import NEGOTIATED, wants_html, wants_json

bp = Blueprint("stats", __name__)
OTHER_METHODS = ["POST", "PUT", "DELETE", "PATCH"]


@bp.route("/stats", methods=["GET"])
def server_stats():
    return _answer(None)


@bp.route("/<service>/stats", methods=["GET"])
@service_view
def service_stats(service: str):
    jobs_api().service(service)     # 404 for an unknown one
    return _answer(service)


@bp.route("/stats", methods=OTHER_METHODS)
def server_stats_read_only():
    """405, rather than the service route's 404 for a service named "stats"."""
    raise MethodNotAllowed(valid_methods=["GET", "HEAD"])


@bp.route("/<service>/stats", methods=OTHER_METHODS)
@service_view
def service_stats_read_only(service: str):
    """405, rather than the job route's 404 for a job named "stats"."""
    raise MethodNotAllowed(valid_methods=["GET", "HEAD"])


def _answer(service: str | None):
    caller = identity.current_caller()
    window = parse_window(query_value("window"))
    statistics: Statistics = current_app.extensions["uws_stats"]
    now = timeutil.now()
    report = statistics.report(service, caller.scope, window, now)
    if wants_json():
        return json_response(render.json_document(report), headers=NEGOTIATED)
    if wants_html():
        history = statistics.history(service, window, now) if caller.admin else None
        return _page(report, history)
    return xml(render.xml_document(report), headers=NEGOTIATED)


def _page(report: Report, history):
    here = f"{base_url()}{report.service}/stats" if report.service else f"{base_url()}stats"
    drawn = chart.phase_chart(history, report.since, report.until, report.total.jobs) \
        if history is not None else None
    return pages.render("stats.html", report=report, here=here, chart=drawn)


def install(app: Flask, statistics: Statistics) -> None:
    """The routes, their use case, and the page header's link for administrators."""
    app.extensions["uws_stats"] = statistics
    app.register_blueprint(bp)
    app.context_processor(_header_link)


def _header_link() -> dict:
    # Only pages that identify their caller without error (an error page may not).
    try:
        admin = identity.current_caller().admin
    except UWSError:
        admin = False
    return {"stats_url": f"{base_url()}stats" if admin else None}
