#!/usr/bin/env python
"""The server's own CPU per request, in process, beside bench/ceiling.py's app.

    python bench/routes.py [--rounds 5] [--requests 1000]

The WSGI app of ``uws serve`` (SQLite, no executor) called directly, without HTTP:
jobs created, then for each route ``--rounds`` rounds of ``--requests`` calls one
after the other; the CPU time per call of the fastest round (the least disturbed by
whatever else the machine runs).  The routes bench.py compares with its ceiling are
also sent to the ceiling's bare Flask app, in the same process and the same way
(the reads answered with the bytes the UWS app answered), so the last column is
what the UWS server spends on a request beyond Flask itself: its storage, documents
and hooks, the part a ratio against the ceiling can shrink.  To compare two versions,
run each in its own environment, alternately, a few times.
"""
from __future__ import annotations

import argparse
import functools
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

FORM = "application/x-www-form-urlencoded"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()
    from uws.config import settings as config
    from uws.web.app import create_app, shutdown
    sys.path.insert(0, str(Path(__file__).parent))
    import ceiling
    data_dir = tempfile.mkdtemp(prefix="uws-routes-")
    app = create_app(config.load(None, env={"UWS_EXECUTOR": "none"}, data_dir=data_dir))
    bare = ceiling.make_app()
    client = app.test_client()
    try:
        job = client.post("/sleep", data={"DURATION": "0", "MESSAGE": "x"}).headers["Location"]
        path = job.replace("http://localhost", "")
        for _ in range(120):
            client.post("/sleep", data={"DURATION": "0"})
        print(f"{'':<20} {'UWS app':>9} {'ceiling':>9} {'beyond it':>10}   (us CPU per request)")
        for label, method, route, query, key in _reads(path):
            environ = _environ(method, route, query)
            ours = _best(app, functools.partial(_copies, environ), args)
            if key is None:
                print(f"{label:<20} {ours * 1e6:9.0f}", flush=True)
                continue
            _give_body(app, bare, environ, key)
            _report(label, ours, _best(bare, functools.partial(_copies, environ), args))
        create = _environ("POST", "/sleep", "", b"DURATION=0")
        creations = functools.partial(_copies, create)
        _report("POST {jobs}", _best(app, creations, args), _best(bare, creations, args))
        deletion = _environ("DELETE", path, "")
        _report("DELETE {job}", _deletions(app, client, args),
                _best(bare, functools.partial(_copies, deletion), args))
    finally:
        shutdown(app)
        shutil.rmtree(data_dir, ignore_errors=True)


def _reads(path: str) -> list[tuple[str, str, str, str, str | None]]:
    """(label, method, path, query, the ceiling's key for it or None)."""
    return [("GET {job}", "GET", path, "", "job"),
            ("GET {job}/phase", "GET", f"{path}/phase", "", None),
            ("GET ?LAST=10", "GET", "/sleep", "LAST=10", "LAST=10"),
            ("GET ?LAST=100", "GET", "/sleep", "LAST=100", "LAST=100"),
            ("GET ?extend=100", "GET", "/sleep", "extend=100", "extend=100"),
            ("HEAD {jobs}", "HEAD", "/sleep", "", None)]


def _environ(method: str, path: str, query: str, body: bytes = b"") -> dict:
    from werkzeug.test import EnvironBuilder
    builder = EnvironBuilder(path=path, query_string=query, method=method, data=body or None,
                             content_type=FORM if body else None,
                             base_url="http://127.0.0.1:8080/")
    environ = builder.get_environ()
    environ["bench.body"] = body
    return environ


def _copies(environ: dict, n: int) -> list[dict]:
    """n copies of ``environ``, each with its body to read."""
    copies = [dict(environ) for _ in range(n)]
    for copy in copies:
        copy["wsgi.input"] = io.BytesIO(environ["bench.body"])
    return copies


def _give_body(app, bare, environ: dict, key: str) -> None:
    """The ceiling answers with the bytes the UWS app answered."""
    body = b"".join(app(dict(environ), lambda *a: None))
    bare.test_client().put(f"/_ceiling/body?key={key}", data=body, content_type="text/xml")


def _best(app, environs, args) -> float:
    """The fastest of the rounds; ``environs(n)``: a round's requests (made untimed)."""
    return min(_round(app, environs(args.requests)) for _ in range(args.rounds + 1))


def _round(app, environs: list[dict]) -> float:
    statuses: list[str] = []

    def start_response(status, headers, exc_info=None):
        statuses.append(status)
    started = time.process_time()
    for environ in environs:
        body = app(environ, start_response)
        b"".join(body)
        body.close()
    spent = (time.process_time() - started) / len(environs)
    _expect_success(statuses)
    return spent


def _deletions(app, client, args) -> float:
    """Each round deletes ``--requests`` jobs made for it (untimed)."""
    best = float("inf")
    for _ in range(args.rounds + 1):
        paths = [client.post("/sleep", data={"DURATION": "0"}).headers["Location"]
                 .replace("http://localhost", "") for _ in range(args.requests)]
        best = min(best, _round(app, [_environ("DELETE", p, "") for p in paths]))
    return best


def _expect_success(statuses: list[str]) -> None:
    bad = [s for s in statuses if not s.startswith(("200", "303"))]
    if bad:
        raise SystemExit(f"unexpected answers: {sorted(set(bad))}")


def _report(label: str, ours: float, bare: float) -> None:
    print(f"{label:<20} {ours * 1e6:9.0f} {bare * 1e6:9.0f} {(ours - bare) * 1e6:10.0f}",
          flush=True)


if __name__ == "__main__":
    main()
