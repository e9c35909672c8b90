#!/usr/bin/env python
"""The server's own CPU per request for the read routes clients poll, in process.

    python bench/routes.py [--rounds 5] [--requests 1000]

The WSGI app of ``uws serve`` (SQLite, no executor) called directly, without HTTP:
21 jobs created, then for each route ``--rounds`` rounds of ``--requests`` calls
one after the other; the CPU time per call of the fastest round (the least disturbed
by whatever else the machine runs).  To compare two versions, run each in its own
environment, alternately, a few times.
"""
from __future__ import annotations

import argparse
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()
    from werkzeug.test import EnvironBuilder

    from uws import config
    from uws.web.app import create_app, shutdown
    app = create_app(config.load(None, env={"UWS_EXECUTOR": "none"},
                                 data_dir=tempfile.mkdtemp(prefix="uws-routes-")))
    client = app.test_client()
    try:
        job = client.post("/sleep", data={"DURATION": "0", "MESSAGE": "x"}).headers["Location"]
        path = job.replace("http://localhost", "")
        for _ in range(20):
            client.post("/sleep", data={"DURATION": "0"})
        routes = {"GET {job}": ("GET", path, ""), "GET {job}/phase": ("GET", f"{path}/phase", ""),
                  "GET ?LAST=10": ("GET", "/sleep", "LAST=10"), "HEAD {jobs}": ("HEAD", "/sleep", "")}
        for label, (method, route, query) in routes.items():
            environ = EnvironBuilder(path=route, query_string=query, method=method,
                                     base_url="http://127.0.0.1:8080/").get_environ()
            best = min(_round(app, environ, args.requests) for _ in range(args.rounds + 1))
            print(f"{label:<18} {best * 1e6:6.0f} us CPU per request", flush=True)
    finally:
        shutdown(app)


def _round(app, environ: dict, n: int) -> float:
    def start_response(status, headers, exc_info=None):
        pass
    started = time.process_time()
    for _ in range(n):
        body = app(dict(environ), start_response)
        b"".join(body)
        body.close()
    return (time.process_time() - started) / n


if __name__ == "__main__":
    main()
