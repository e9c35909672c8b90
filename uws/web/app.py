"""The Flask application factory: wires store, files, executor and routes."""
from __future__ import annotations

import errno
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from flask import Flask, current_app, request
from sqlalchemy.exc import OperationalError
from werkzeug.exceptions import HTTPException

from ..config import settings as config_mod
from ..domain.errors import BadRequest, Forbidden, NotFound, UWSError
from ..execution import NullExecutor
from ..execution.delivery import Deliverer
from ..execution.files import JobFiles, make_private_dir
from ..execution.process import ProcessExecutor
from ..execution.scheduler import start_scheduler
from ..http import logs
from ..http.hosts import HostPolicy
from ..http.proxies import TrustedProxies
from ..resources import templates_dir
from ..store import Store
from ..store.stats import StatsStore
from ..usecases.events import Bell, EventFeed, Sinks
from ..usecases.jobs import Jobs
from ..usecases.ports import Executor
from ..usecases.stats import Statistics
from ..usecases.sweeps import Sweeps
from ..usecases.waiting import PhaseWatch
from . import (
    batches,
    events,
    holds,
    identity,
    job,
    joblist,
    metrics,
    pages,
    proxied,
    signin,
    static,
    stats,
    vosi,
)
from .headers import add_missing
from .http import MAX_FORM_BYTES, base_url, json_response, text
from .incoming import UWSRequest
from .negotiation import NEGOTIATED, host_problem, wants_html, wants_json
from .passwords import RetryLater
from .texts import check_request, shown

log = logging.getLogger(__name__)
#: seconds a client is told to wait after the database failed a request (503)
DATABASE_RETRY_AFTER = 2


class App(Flask):
    """Flask, remembering which views and hooks are coroutines: it asks ``inspect``
    about each of them every time it calls one (a few times a request)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._as_sync: dict = {}

    def ensure_sync(self, func):
        made = self._as_sync.get(func)
        if made is None:
            made = self._as_sync[func] = super().ensure_sync(func)
        return made


def create_app(config=None) -> Flask:
    """Build the app from a Config, a dict shaped like the TOML file, a path to
    one, or nothing (then ``UWS_CONFIG`` and the ``UWS_*`` variables decide).

    Raises :class:`uws.config.settings.ConfigError` for a configuration that cannot be
    used, before anything starts."""
    cfg = _as_config(config)
    logs.configure(cfg.log_format)      # here too: gunicorn runs no uws CLI
    app = App(__name__, template_folder=str(templates_dir()), static_folder=None)
    # Form bodies are small; uploads are bounded by max_upload_bytes (413 past it).
    app.config["MAX_CONTENT_LENGTH"] = cfg.max_body_bytes
    app.config["MAX_FORM_MEMORY_SIZE"] = MAX_FORM_BYTES
    app.request_class = UWSRequest
    # "/sleep//" is no resource: a 404, not werkzeug's 308 to "/sleep/", which a
    # client repeats with its method and body (a DELETE or POST sent somewhere else).
    app.url_map.merge_slashes = False
    app.extensions["uws"], app.extensions["uws_events"] = _build(cfg)
    app.extensions["uws_hosts"] = HostPolicy.of(cfg)
    app.register_blueprint(joblist.bp)
    batches.install(app, app.extensions["uws"], cfg.batch_parses)
    app.register_blueprint(events.bp)
    app.register_blueprint(job.bp)
    app.register_blueprint(vosi.bp)
    app.register_blueprint(static.bp)
    holds.install(app)
    stats.install(app, Statistics(StatsStore(app.extensions["uws"].store.engine)))
    metrics.install(app)
    pages.install(app)
    identity.install(app)
    signin.install(app)
    _error_handlers(app)
    app.before_request(_admit)
    app.after_request(_security_headers)
    # the client behind a trusted proxy, request ids and request lines (outermost)
    app.wsgi_app = proxied.Proxied(app.wsgi_app,    # type: ignore[method-assign]
                                   TrustedProxies(cfg.trusted_proxies))
    _start_background(app, cfg)
    _log_start(cfg)
    return app


def _log_start(cfg: config_mod.Config) -> None:
    from importlib.metadata import version

    from sqlalchemy.engine import make_url

    # the installed distribution's (uws.__version__ via pyproject): importing the uws
    # package from here would make an import cycle
    __version__ = version("ivoa-uws-server")
    database = make_url(cfg.db_url).render_as_string(hide_password=True)
    log.info("uws %s: database %s, executor %s, data in %s", __version__, database,
             cfg.executor, Path(cfg.data_dir).resolve())
    if cfg.trusted_proxies:
        log.info("trusted proxies: %s", ", ".join(str(n) for n in cfg.trusted_proxies))


def _start_background(app: Flask, cfg: config_mod.Config) -> None:
    api = app.extensions["uws"]
    sweeps = Sweeps(config=cfg, store=api.store, files=api.files, executor=api.executor,
                    stats=app.extensions["uws_stats"].store)
    sweeps.recover_dead_local_workers()     # before taking new work
    api.executor.start()
    if cfg.scheduler:
        app.extensions["uws_scheduler"] = start_scheduler(sweeps)
    if cfg.scheduler and any(s.callback_hosts for s in cfg.services.values()):
        deliverer = Deliverer(api)     # with the sweeps: in front ends, never in workers
        api.store.listeners.append(deliverer.wake)
        deliverer.start()
        app.extensions["uws_callbacks"] = deliverer


def _as_config(config) -> config_mod.Config:
    if isinstance(config, config_mod.Config):
        return config
    if isinstance(config, dict):
        return config_mod.from_dict(config, env=os.environ)
    return config_mod.load(config or os.environ.get("UWS_CONFIG") or None)


def _make_data_dir(cfg: config_mod.Config) -> None:
    """The data directory, made (0700) when missing; one that cannot be made or
    written names the setting to change, not only the system's error."""
    path = Path(cfg.data_dir)
    try:
        make_private_dir(path)
        if not path.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if isinstance(exc, FileExistsError | NotADirectoryError):
            reason = "a file is in the way: not a directory"
        raise config_mod.ConfigError(
            f"data_dir: cannot use {str(path)!r} as the data directory ({reason}): set "
            "--data-dir, UWS_DATA_DIR or [server] data_dir to a directory this user may "
            "create or write") from None


def _build(cfg: config_mod.Config) -> tuple[Jobs, EventFeed]:
    if cfg.executor not in config_mod.EXECUTORS:     # a Config made in code, not loaded
        raise config_mod.ConfigError(f"executor.kind: {cfg.executor!r} is not one of "
                                     f"{', '.join(config_mod.EXECUTORS)}")
    _make_data_dir(cfg)
    store = Store(cfg.db_url, pool_size=min(cfg.threads, 32))
    files = JobFiles(cfg.data_dir, cfg.max_upload_bytes)
    watch = PhaseWatch(store.phases_of, limit=cfg.waiter_limit)
    bell = Bell()       # wakes event streams as watch wakes WAITs
    store.listeners.extend((watch.notify, bell.notify))
    # on PostgreSQL: other processes' changes too, without polling
    store.listen(Sinks(watch, bell))
    executor: Executor
    if cfg.executor == "local":
        executor = ProcessExecutor(config=cfg, store=store, files=files, slots=cfg.slots)
    elif cfg.executor == "celery":
        from ..execution.distributed import CeleryExecutor
        executor = CeleryExecutor(config=cfg, store=store)
    else:
        executor = NullExecutor()
    return (Jobs(config=cfg, store=store, files=files, executor=executor, watch=watch),
            EventFeed(config=cfg, store=store, bell=bell))


def shutdown(app: Flask) -> None:
    """Stop the executor, the callback deliveries, the WAIT poller and the change
    listener and close database connections."""
    api = app.extensions["uws"]
    scheduler = app.extensions.get("uws_scheduler")
    if scheduler is not None:
        scheduler.shutdown(wait=True)
    app.extensions["uws_events"].stop()
    deliverer = app.extensions.get("uws_callbacks")
    if deliverer is not None:
        deliverer.stop()
    api.executor.stop()
    api.watch.stop()
    api.store.close()


# Pages load only this server's own script and stylesheet (no inline script),
# cannot be framed, and post forms only back to this server.
PAGE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


EVERY_ANSWER_HEADERS = (("X-Content-Type-Options", "nosniff"),)
PAGE_HEADERS = (*EVERY_ANSWER_HEADERS, ("Content-Security-Policy", PAGE_POLICY),
                ("X-Frame-Options", "DENY"), ("Referrer-Policy", "same-origin"))

UNSAFE_METHODS = frozenset({"POST", "PUT", "DELETE", "PATCH"})


def _admit() -> None:
    """Every request's checks, in one hook (each hook costs Flask a dispatch): a usable
    Host, a path and a query that are text, no cross-site post, and credentials that
    are right or absent."""
    _usable_host()
    check_request(request.environ, request.query_string)
    _same_origin_only()
    identity.current_caller()   # authenticated once; what it may reach is each view's guard
    if request.method == "OPTIONS" and _unserved_service() is not None:    # Flask answers it
        raise NotFound(f"no service {_unserved_service()!r}")


def _usable_host() -> None:
    """400 for a Host header that is not this server's or that no absolute URL can be
    built from (every document carries absolute links)."""
    problem = host_problem()
    if problem:
        raise BadRequest(problem)


def _same_origin_only() -> None:
    """Refuse cross-site posts (CSRF): a browser names the page a form came from in
    Origin (or Referer); another site's page is refused.  Ours are the Host the
    request names (one this server answers to) and that of ``public_url`` (a proxy
    may pass on another Host).  Clients such as pyvo and uws-client send neither
    header and are not affected."""
    if request.method not in UNSAFE_METHODS:
        return
    source = request.headers.get("Origin") or request.headers.get("Referer")
    if not source:
        return
    try:
        netloc = urlsplit(source).netloc.lower()
    except ValueError:      # "http://[::1": no site at all, so not ours
        netloc = None
    if netloc not in {request.host.lower(), urlsplit(base_url()).netloc.lower()}:
        raise Forbidden(f"cross-site request from {source!r} refused")


def _security_headers(response):
    add_missing(response.headers, PAGE_HEADERS if response.mimetype == "text/html" else
                EVERY_ANSWER_HEADERS)
    return response


def _error_handlers(app: Flask) -> None:
    @app.errorhandler(UWSError)
    def _uws_error(exc: UWSError):
        response = _error_response(exc.status, str(exc))
        if exc.status == 401:
            response.headers["WWW-Authenticate"] = app.extensions["uws"].config.auth.challenge()
        if isinstance(exc, RetryLater):
            response.headers["Retry-After"] = str(exc.retry_after)
        return response

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        if exc.code == 405 and _unserved_service() is not None:
            return _uws_error(NotFound(f"no service {_unserved_service()!r}"))
        response = _error_response(exc.code or 500, exc.description or "")
        for name, value in exc.get_headers():
            if name.lower() in ("allow", "www-authenticate", "content-range"):
                response.headers[name] = value
        return response

    @app.errorhandler(OperationalError)
    def _database_unavailable(exc: OperationalError):
        # down, restarting, or busy past its lock timeout: the request's transaction
        # was rolled back and the client may try again, so not a server fault (500)
        log.warning("database unavailable: %s", exc.orig or exc)
        response = _error_response(503, "the database is unavailable or busy: retry shortly")
        response.headers["Retry-After"] = str(DATABASE_RETRY_AFTER)
        return response

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        log.exception("unexpected error")
        if wants_json():
            return _error_response(500, "internal server error")
        return text("internal server error\n", status=500)


def _unserved_service() -> str | None:
    """The service named by a URL that has no such method, when this server does not
    serve it: that URL is no resource at all, so 404 as for its other methods."""
    args: Mapping[str, Any] | None = request.view_args
    if args is None:    # refused while routing: match again for the arguments alone
        adapter = current_app.create_url_adapter(request)
        try:
            args = adapter.match(method="GET")[1] if adapter is not None else {}
        except HTTPException:
            return None
    service = args.get("service")
    served = current_app.extensions["uws"].config.services
    return service if service is not None and service not in served else None


def _error_response(status: int, message: str):
    """An error as asked for: ``{"error": {"status", "message"}}`` for JSON, a page for
    browsers, plain text for everyone else.  Whatever text of the request the message
    quotes, it can be encoded (a lone surrogate made a 500 of a 400)."""
    message = shown(message)
    if wants_json():
        return json_response({"error": {"status": status, "message": message}}, status,
                             headers=NEGOTIATED)
    if wants_html():
        return pages.error_page(status, message)
    return text(f"{message}\n", status=status, headers=NEGOTIATED)
