"""Command line: ``uws serve`` (the embedded server, or a front end), ``uws worker``
(a Celery worker running jobs), ``uws db`` (the database's schema) and ``uws jobs``
(the client, a click group of its own: uws/client/cli.py)."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable

from . import __version__
from .domain import timing


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["jobs"]:
        return jobs_command(argv[1:])
    parser = argparse.ArgumentParser(prog="uws", description="IVOA UWS 1.1 job server")
    parser.add_argument("--version", action="version", version=f"uws {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP server (by default: SQLite, jobs run here)")
    serve.add_argument("--config", help="TOML configuration file")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8700)")
    serve.add_argument("--data-dir", help="directory for the database, uploads and results")
    worker = sub.add_parser("worker", help="run a Celery worker ([executor] kind = \"celery\")")
    worker.add_argument("--config", help="TOML configuration file (the front ends' one)")
    worker.add_argument("--data-dir", help="the shared data directory (uploads, results)")
    worker.add_argument("--slots", type=int, help="jobs run at once (default: [executor] slots)")
    sub.add_parser("jobs", help="the client: list, create, run, wait, ... jobs of any UWS server "
                   "(uws jobs --help)", add_help=False)
    db = sub.add_parser("db", help="the database's schema revision").add_subparsers(
        dest="db_command", required=True)
    for name, text in (("upgrade", "bring the database to the newest schema (create it if empty)"),
                       ("current", "print the database's schema revision"),
                       ("recount", "rebuild the job counters and byte totals from the jobs")):
        action = db.add_parser(name, help=text)
        action.add_argument("--config", help="TOML configuration file (the database URL)")
        action.add_argument("--data-dir", help="directory of the default SQLite database")
    args = parser.parse_args(argv)
    try:
        timing.shorten_for_tests(os.environ.get(timing.TEST_TIMINGS_VARIABLE, ""))
    except ValueError as exc:
        return _refuse(str(exc))
    commands = {"serve": serve_command, "worker": worker_command, "db": db_command}
    return commands[args.command](args)


def jobs_command(argv: list[str]) -> int:
    from .client.cli import jobs

    try:
        jobs.main(args=argv, prog_name="uws jobs", standalone_mode=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def worker_command(args) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from .config import settings as config_mod

    try:
        cfg = config_mod.load(args.config, data_dir=args.data_dir, slots=args.slots)
        if cfg.executor != "celery":
            raise config_mod.ConfigError(f"{args.config or 'the configuration'}: "
                                         "executor.kind: a worker needs \"celery\"")
    except config_mod.ConfigError as exc:
        return _refuse(f"cannot use the configuration: {exc}")
    _log_setup(cfg)
    logging.getLogger("uws.cli").info(
        "uws %s worker: database %s, queue %s, %d slots, data in %s", __version__,
        _shown(cfg.db_url), cfg.queue, cfg.slots,
        cfg.data_dir.resolve())
    from .execution.distributed import run_worker
    from .store.schema import SchemaError
    try:
        run_worker(cfg)
    except (OSError, ImportError, SQLAlchemyError, SchemaError) as exc:
        return _refuse(f"cannot start: {' '.join(str(exc).split())}")
    return 0


def _log_setup(cfg) -> None:
    from .http import logs
    logs.configure(cfg.log_format)      # the app factory's call then changes nothing


def serve_command(args) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from .config import settings as config_mod
    from .store.schema import SchemaError

    try:
        cfg = config_mod.load(args.config, host=args.host, port=args.port, data_dir=args.data_dir)
    except config_mod.ConfigError as exc:
        return _refuse(f"cannot use the configuration: {exc}")
    _log_setup(cfg)
    app = DeferredApp()
    try:
        # Take the port before the app starts its executor and sweeps, so a second
        # server started by mistake changes nothing of the first one's jobs.
        server = _listen(app, cfg)
    except OSError as exc:
        return _refuse(f"cannot listen on {cfg.host}:{cfg.port}: {exc.strerror or exc}")
    try:
        app.build(cfg)
    except (config_mod.ConfigError, OSError, ImportError, SQLAlchemyError, SchemaError) as exc:
        server.close()      # a database or data directory that cannot be used
        return _refuse(f"cannot start: {' '.join(str(exc).split())}")
    print(f"UWS server on http://{cfg.host}:{server.effective_port}/ "
          f"(data in {cfg.data_dir.resolve()})", flush=True)
    logging.getLogger("uws.cli").info("listening on http://%s:%s/", cfg.host,
                                      server.effective_port)
    logging.getLogger("uws.cli").info("%s", server.limits_text)
    return _run(server, app)


def db_command(args) -> int:
    """``uws db upgrade`` / ``uws db current`` on the configuration's database."""
    from sqlalchemy.exc import SQLAlchemyError

    from .config import settings as config_mod
    from .store.engine import make_engine
    from .store.schema import SchemaError

    try:
        cfg = config_mod.load(args.config, data_dir=args.data_dir)
    except config_mod.ConfigError as exc:
        return _refuse(f"cannot use the configuration: {exc}")
    try:
        engine = make_engine(cfg.db_url, pool_size=1)
    except (ImportError, SQLAlchemyError) as exc:
        return _refuse(f"cannot use the database: {' '.join(str(exc).split())}")
    try:
        print(f"{_shown(cfg.db_url)}: {_db_action(args.db_command, engine)}")
        return 0
    except (OSError, SQLAlchemyError, SchemaError) as exc:
        return _refuse(f"{args.db_command}: {' '.join(str(exc).split())}")
    finally:
        engine.dispose()


def _db_action(action: str, engine) -> str:
    from .store import schema

    if action == "recount":
        return _recount(engine)
    if action == "upgrade":
        before, after = schema.upgrade(engine)
        if before == after:
            return f"at revision {after}, the newest: nothing to do"
        return f"upgraded from {before or 'no revision'} to {after}, the newest"
    status = schema.read_status(engine)
    if status.revision is None:
        state = "made before migrations" if status.tables else "empty"
        return f"no revision ({state}; uws db upgrade or uws serve brings it to {status.head})"
    if status.current:
        return f"revision {status.revision}, the newest"
    if status.known:
        return (f"revision {status.revision} "
                f"(uws db upgrade or uws serve brings it to {status.head})")
    return (f"revision {status.revision}, unknown to this uws (its newest is {status.head}): "
            "a newer uws made it")


def _recount(engine) -> str:
    """The repair after changes the counters did not see: servers of an older revision
    still running after an upgrade, or a change made by hand."""
    from .store import counts, schema, usage

    status = schema.read_status(engine)
    if status.revision is not None and not status.known:
        raise schema.SchemaError(f"revision {status.revision} is unknown to this uws (its "
                                 f"newest is {status.head}): recount with the newer uws "
                                 "that made it")
    if not status.current:
        raise schema.SchemaError("not at the newest revision: run uws db upgrade first")
    with engine.begin() as conn:
        counts.recount(conn)
        usage.recount(conn)
    return "job counters and byte totals rebuilt from the jobs"


def _shown(url: str) -> str:
    from sqlalchemy.engine import make_url
    return make_url(url).render_as_string(hide_password=True)


def _refuse(message: str) -> int:
    print(f"uws: {message}", file=sys.stderr)
    return 2


class DeferredApp:
    """The WSGI app, built once the server holds its port."""

    def __init__(self):
        self.app: Callable | None = None

    def build(self, cfg) -> None:
        from .web.app import create_app
        self.app = create_app(cfg)

    def __call__(self, environ, start_response):
        assert self.app is not None, "served before it was built"
        return self.app(environ, start_response)


def _listen(app, cfg):
    from .http import server as httpserver
    open_files = httpserver.raise_open_file_limit()
    return httpserver.create(app, cfg, open_files, _server_name(cfg.host))


def _run(server, app: DeferredApp) -> int:
    from flask import Flask

    from .web.app import shutdown

    def _stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    try:
        _serve_until_stopped(server)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        if isinstance(app.app, Flask):
            shutdown(app.app)
    return 0


def _serve_until_stopped(server) -> None:
    """Run the event loop until SIGTERM or Ctrl-C (waitress's run() then returns);
    whatever else escapes it is logged and the loop goes on, jobs and all."""
    while True:
        try:
            server.run()
            return
        except Exception:
            logging.getLogger("uws.cli").exception("the server loop failed; serving on")
            time.sleep(0.1)     # no busy loop if the failure repeats


def _server_name(host: str) -> str:
    if host in ("", "0.0.0.0", "::"):
        return socket.getfqdn()
    return host


if __name__ == "__main__":
    sys.exit(main())
