"""Command line: ``uws serve`` (the embedded server)."""
from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="uws", description="IVOA UWS 1.1 job server")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the embedded server (SQLite, local executor)")
    serve.add_argument("--config", help="TOML configuration file")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8700)")
    serve.add_argument("--data-dir", help="directory for the database, uploads and results")
    args = parser.parse_args(argv)
    if args.command == "serve":
        return serve_command(args)
    return 2


def serve_command(args) -> int:
    import waitress

    from . import config as config_mod
    from .web.app import create_app, shutdown

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = config_mod.load(args.config, host=args.host, port=args.port, data_dir=args.data_dir)
    except (OSError, ValueError, TypeError, KeyError) as exc:   # TOML errors are ValueErrors
        print(f"uws: cannot use the configuration: {exc}", file=sys.stderr)
        return 2
    app = create_app(cfg)
    server = waitress.create_server(app, host=cfg.host, port=cfg.port, threads=cfg.threads,
                                    channel_timeout=max(cfg.wait_max + 30, 120),
                                    connection_limit=max(1000, cfg.threads * 2), ident="uws",
                                    # waitress buffers a whole body before the app sees
                                    # it: refuse larger ones as their headers arrive.
                                    max_request_body_size=cfg.max_body_bytes,
                                    # the host of absolute URLs for HTTP/1.0 requests
                                    # without Host (waitress's default is a dummy)
                                    server_name=_server_name(cfg.host))
    print(f"UWS server on http://{cfg.host}:{server.effective_port}/ "
          f"(data in {cfg.data_dir.resolve()})", flush=True)

    def _stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        shutdown(app)
    return 0


def _server_name(host: str) -> str:
    if host in ("", "0.0.0.0", "::"):
        return socket.getfqdn()
    return host


if __name__ == "__main__":
    sys.exit(main())
