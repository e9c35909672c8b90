"""GET /metrics: Prometheus text exposition (``prometheus_client``).

* ``uws_jobs{service,phase}``, ``uws_queued_jobs{service}``, ``uws_held_jobs{service}``:
  read from the job counters at scrape time (everyone's jobs, no owner labels), so
  every front end reports the same figures.
* ``uws_blocked_waits``: this process's blocking GETs (``WAIT``) parked now.
* ``uws_http_requests_total{route,method,status}`` and
  ``uws_http_request_duration_seconds{route,method}``: this process's requests, by
  Flask route pattern (``/<service>/<job_id>``, never the raw path: the label values
  stay few whatever clients send).  Under gunicorn each worker process counts its own;
  a scrape sees the one that answers it (sum them, or scrape each worker's port).

Who may scrape: administrators, or anyone with ``[server] metrics_public = true``.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from flask import Blueprint, Flask, Response, current_app
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from werkzeug.exceptions import MethodNotAllowed

from ..domain.errors import Forbidden
from ..domain.phases import Phase
from . import identity
from .http import jobs_api
from .incoming import current

bp = Blueprint("metrics", __name__)
_UNMATCHED = "(unmatched)"
# Seconds: from a millisecond GET to a minute-long WAIT.
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class JobCollector:
    """The job gauges, from the maintained counters at each scrape."""

    def __init__(self, job_counts):
        self.job_counts = job_counts

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("uws_jobs", "Jobs by service and phase", labels=["service", "phase"])
        queued = GaugeMetricFamily("uws_queued_jobs", "QUEUED jobs (the queue's length)",
                                   labels=["service"])
        held = GaugeMetricFamily("uws_held_jobs", "HELD jobs", labels=["service"])
        summed: dict[tuple[str, Phase], int] = {}
        for (service, _, phase), n in self.job_counts().items():
            summed[(service, phase)] = summed.get((service, phase), 0) + n
        for (service, phase), n in sorted(summed.items()):
            jobs.add_metric([service, phase.value], n)
        for service in sorted({s for s, _ in summed}):
            queued.add_metric([service], summed.get((service, Phase.QUEUED), 0))
            held.add_metric([service], summed.get((service, Phase.HELD), 0))
        yield from (jobs, queued, held)


class WaitCollector:
    """The blocking GETs this process holds, at each scrape."""

    def __init__(self, waiting):
        self.waiting = waiting

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("uws_blocked_waits", "Blocking GETs (WAIT) parked in this process",
                                value=self.waiting())


#: Methods that are counted by name; any other (a client's invention, answered 405 or
#: 501) counts as "other", so that no client can add label sets without end.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"})
_OTHER_METHOD = "other"


class Metrics:
    """One app's registry: its request metrics and the job collector."""

    def __init__(self, job_counts, waiting=lambda: 0):
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("uws_http_requests", "HTTP requests answered",
                                ["route", "method", "status"], registry=self.registry)
        self.latency = Histogram("uws_http_request_duration_seconds",
                                 "Time to build each response (a streamed body's sending excluded)",
                                 ["route", "method"], buckets=_BUCKETS, registry=self.registry)
        self.registry.register(JobCollector(job_counts))
        self.registry.register(WaitCollector(waiting))
        # Each label set's children, looked up once (labels() validates and locks).
        self._counted: dict[tuple[str, str, int], Any] = {}
        self._timed: dict[tuple[str, str], Any] = {}

    def observe(self, response):
        """Count the response, and time it from the request's arrival."""
        req = current()
        rule = req.url_rule
        route = rule.rule if rule is not None else _UNMATCHED
        method = req.method
        key = (route, method if method in _METHODS else _OTHER_METHOD)
        status = response.status_code
        counted = self._counted.get((*key, status))
        if counted is None:
            counted = self._counted[(*key, status)] = self.requests.labels(*key, str(status))
        timed = self._timed.get(key)
        if timed is None:
            timed = self._timed[key] = self.latency.labels(*key)
        counted.inc()
        timed.observe(time.perf_counter() - req.started)
        return response


@bp.route("/metrics", methods=["GET"])
def metrics():
    api = jobs_api()
    if not api.config.metrics_public:
        caller = identity.current_caller()
        if not caller.admin:
            if not caller.owner and api.config.auth.modes:
                raise identity.Unauthorized("the metrics are for administrators")
            if not api.config.auth.modes:
                # no sign-in at all: nobody can be an administrator here
                raise Forbidden("the metrics are for administrators, and this server has no "
                                "[auth] to sign one in: set [server] metrics_public = true to "
                                "let anyone scrape them, or configure [auth] with an "
                                "administrator")
            raise Forbidden("the metrics are for administrators (or set [server] "
                            "metrics_public = true to let anyone scrape them)")
    body = generate_latest(current_app.extensions["uws_metrics"].registry)
    return Response(body, content_type=CONTENT_TYPE_LATEST)


@bp.route("/metrics", methods=["POST", "PUT", "DELETE", "PATCH"])
def metrics_read_only():
    """405, rather than the service route's 404 for a service named "metrics"."""
    raise MethodNotAllowed(valid_methods=["GET", "HEAD"])


def install(app: Flask) -> None:
    """The route, and the count of every response (last out: the after-request hook
    registered first runs last)."""
    api = app.extensions["uws"]
    collected = app.extensions["uws_metrics"] = Metrics(lambda: api.store.job_counts(),
                                                        lambda: api.watch.waiting)
    app.after_request(collected.observe)
    app.register_blueprint(bp)
