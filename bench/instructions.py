#!/usr/bin/env python
"""Instructions per request, counted by valgrind: a figure that other load on the
machine does not move (timings do), for comparing two versions of the server.

    python bench/instructions.py [get | last10 | last100 | create | delete | run] [-n 200]

For each kind of request the server (the app of ``uws serve`` under the same
waitress, or with ``--ceiling`` bench/ceiling.py's) runs twice under
``valgrind --tool=callgrind``: once answering the warm-up requests only, once
answering ``n`` more; the difference over ``n`` is what one request costs the
server process, HTTP parsing and every thread included.  ``delete`` is a creation
and a deletion (subtract ``create``).  ``run`` is a no-op job created with PHASE=RUN
and run to COMPLETED by the executor (the warm-up's jobs, then ``n`` more, queued at
once; the client waits for them in the database): what a job start costs the server
process, the fork server and the jobs themselves not included.  Each run takes about a
minute (``run``: use a small ``n``, such as 40).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.client import HTTPConnection
from pathlib import Path

WARMUP = 20
SEEDED = 120        # jobs made before the lists are read
KINDS = ("get", "last10", "last100", "create", "delete", "run")
CREATE_BODY = "DURATION=0"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kinds", nargs="*", metavar="KIND", help=f"of {', '.join(KINDS)} (all)")
    ap.add_argument("-n", type=int, default=200, help="requests counted (200)")
    ap.add_argument("--ceiling", action="store_true", help="bench/ceiling.py instead")
    ap.add_argument("--serve", nargs=3, metavar=("KIND", "N", "WHICH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        kind, n, which = args.serve
        return serve_and_load(kind, int(n), which == "ceiling")
    unknown = set(args.kinds) - set(KINDS)
    if unknown:
        ap.error(f"no such kind of request: {', '.join(sorted(unknown))}")
    if shutil.which("valgrind") is None:
        print("needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    which = "ceiling" if args.ceiling else "uws"
    for kind in args.kinds or KINDS:
        if which == "ceiling" and kind not in ("get", "last10", "last100", "create"):
            continue
        base, loaded = (instructions(kind, n, which) for n in (0, args.n))
        print(f"{which} {kind}: {(loaded - base) / args.n / 1000:.0f}K instructions per request",
              flush=True)
    return 0


def instructions(kind: str, n: int, which: str) -> int:
    """What valgrind counts for the whole server process answering n requests of kind."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
           sys.executable, __file__, "--serve", kind, str(n), which]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    found = re.search(r"Collected : (\d+)", out)
    if found is None:
        raise RuntimeError(f"valgrind said:\n{out[-2000:]}")
    return int(found.group(1))


def serve_and_load(kind: str, n: int, ceiling: bool) -> int:
    """Under valgrind: serve, have a client process send the requests, leave."""
    from uws.config import settings as config
    from uws.http import server as httpserver
    data_dir = ""
    if ceiling:
        sys.path.insert(0, str(Path(__file__).parent))
        from ceiling import make_app
        app = make_app()
    else:
        from uws.web.app import create_app
        data_dir = tempfile.mkdtemp()
        app = create_app(config.load(None, env={}, data_dir=data_dir))
    port = free_port()
    cfg = config.load(None, env={"UWS_THREADS": "8"}, port=port, data_dir=tempfile.mkdtemp())
    server = httpserver.create(app, cfg, httpserver.raise_open_file_limit(), "127.0.0.1")
    threading.Thread(target=server.run, daemon=True).start()
    time.sleep(0.5)
    subprocess.run([sys.executable, "-c", CLIENT, str(port), kind, str(n),
                    "ceiling" if ceiling else "uws", data_dir], check=True)
    os._exit(0)     # no shutdown work counted


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The client: another process, so that valgrind counts the server alone.
CLIENT = f"""
import sys
from http.client import HTTPConnection
port, kind, n, which = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, {str(Path(__file__).parent)!r})
from instructions import Client
Client(port, which, sys.argv[5]).run(kind, n)
"""


class Client:
    def __init__(self, port: int, which: str, data_dir: str = ""):
        self.http = HTTPConnection("127.0.0.1", port, timeout=600)
        self.ceiling = which == "ceiling"
        self.data_dir = data_dir

    def send(self, method: str, path: str, body: str | None = None, headers=None):
        self.http.request(method, path, body=body, headers=headers or {})
        response = self.http.getresponse()
        return response, response.read()

    def create(self, body: str = CREATE_BODY) -> str:
        response, _ = self.send("POST", "/sleep", body, FORM)
        return urllib.parse.urlsplit(response.headers["Location"]).path

    def run_jobs(self, count: int) -> None:
        """Queue ``count`` no-op jobs at once, then wait until every job run is COMPLETED
        (read in the database, so that waiting costs the server nothing)."""
        for _ in range(count):
            self.create(CREATE_BODY + "&PHASE=RUN")
        self._ran += count
        db = sqlite3.connect(f"file:{self.data_dir}/uws.sqlite3?mode=ro", uri=True)
        try:
            deadline = time.monotonic() + 3600
            while time.monotonic() < deadline:
                done, = db.execute("SELECT count(*) FROM uws_job WHERE phase = 'COMPLETED'"
                                   ).fetchone()
                if done >= self._ran:
                    return
                time.sleep(0.05)
            raise RuntimeError(f"{self._ran - done} jobs not COMPLETED after an hour")
        finally:
            db.close()

    def run(self, kind: str, n: int) -> None:
        job = self.prepare()
        paths = {"get": job, "last10": "/sleep?LAST=10", "last100": "/sleep?LAST=100"}
        self._ran = 0
        for count in (WARMUP, n):
            if kind == "run":
                self.run_jobs(count)
                continue
            for _ in range(count):
                if kind == "create":
                    self.create()
                elif kind == "delete":
                    self.send("DELETE", self.create())
                else:
                    self.send("GET", paths[kind])

    def prepare(self) -> str:
        """The job read by ``get`` (and jobs for the lists); on the ceiling, the UWS
        server's documents to answer with are made up: only their size matters."""
        if not self.ceiling:
            for _ in range(SEEDED):
                path = self.create()
            return path
        for key, body in (("job", JOB), ("LAST=10", LIST * 10), ("LAST=100", LIST * 100)):
            self.send("PUT", "/_ceiling/body?key=" + urllib.parse.quote(key), body,
                      {"Content-Type": "text/xml"})
        return "/sleep/" + "0" * 32


JOB = "<uws:job>" + "x" * 860 + "</uws:job>"     # as long as a job document
LIST = "<uws:jobref>" + "x" * 250 + "</uws:jobref>"


if __name__ == "__main__":
    sys.exit(main())
