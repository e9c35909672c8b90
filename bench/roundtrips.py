#!/usr/bin/env python
"""What a request costs in round trips to PostgreSQL, the figure that sets a front
end's latency once the database is on another machine.

    python bench/roundtrips.py [--pg postgresql+psycopg://...] [--requests 200]

A PostgreSQL schema of its own (dropped afterwards), the app in process (the WSGI
app through Flask's test client: no HTTP, no jobs run), 30 jobs created, then for
each kind of request, sent ``--requests`` times one after the other: the p50 time
and the round trips per request, counted in libpq's trace of every connection
(each exchange ends with the server's ReadyForQuery; statements sent in a pipeline
are one exchange).
"""
from __future__ import annotations

import argparse
import tempfile
import time
import uuid

import sqlalchemy as sa

from bench import percentile

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


class Trace:
    """libpq's protocol trace of every connection opened from now on, in one file."""

    def __init__(self):
        self.file = tempfile.TemporaryFile("w+")
        self.read_to = 0
        sa.event.listen(sa.engine.Engine, "connect", self._trace)

    def _trace(self, dbapi_conn, _record) -> None:
        from psycopg import pq
        dbapi_conn.pgconn.trace(self.file.fileno())
        dbapi_conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)

    def round_trips(self) -> int:
        """ReadyForQuery messages received since the last call."""
        self.file.seek(self.read_to)
        text = self.file.read()
        self.read_to = self.file.tell()
        return sum(1 for line in text.splitlines() if "\tReadyForQuery" in line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", default=PG)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    schema = f"uws_bench_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(args.pg)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    try:
        measure(f"{args.pg}?options=-csearch_path%3D{schema}", args.requests)
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def measure(url: str, n: int) -> None:
    from uws import config
    from uws.web.app import create_app, shutdown
    trace = Trace()
    env = {"UWS_DATABASE_URL": url, "UWS_EXECUTOR": "none"}
    app = create_app(config.load(None, env=env, data_dir=tempfile.mkdtemp(prefix="uws-rt-")))
    client = app.test_client()
    try:
        ids = [new_job(client) for _ in range(30)]
        fresh = iter(range(n * 2))
        to_run, to_delete = (iter([new_job(client) for _ in range(n + 10)]) for _ in range(2))
        requests = {
            "GET {job}": lambda: client.get(f"/sleep/{ids[0]}"),
            "GET {job}/phase": lambda: client.get(f"/sleep/{ids[0]}/phase"),
            "GET ?LAST=10": lambda: client.get("/sleep?LAST=10"),
            "HEAD {jobs}": lambda: client.head("/sleep"),
            "POST {jobs} (create)": lambda: client.post("/sleep", data={"DURATION": "0"}),
            "POST {job} RUNID": lambda: client.post(f"/sleep/{ids[1]}",
                                                    data={"RUNID": f"r{next(fresh)}"}),
            "POST {job}/phase RUN": lambda: client.post(f"/sleep/{next(to_run)}/phase",
                                                        data={"PHASE": "RUN"}),
            "DELETE {job}": lambda: client.delete(f"/sleep/{next(to_delete)}"),
        }
        print(f"{'request':<24} {'p50':>9} {'round trips':>12}   (in process, {n} each)")
        for label, send in requests.items():
            for _ in range(10):
                send()
            times = []
            trace.round_trips()
            for _ in range(n):
                t0 = time.perf_counter()
                status = send().status_code
                times.append((time.perf_counter() - t0) * 1000)
                if status >= 400:
                    raise RuntimeError(f"{label}: HTTP {status}")
            per = trace.round_trips() / n
            print(f"{label:<24} {percentile(times, 50):6.2f} ms {per:12.1f}", flush=True)
    finally:
        shutdown(app)


def new_job(client) -> str:
    return client.post("/sleep", data={"DURATION": "0"}).headers["Location"].rsplit("/", 1)[1]


if __name__ == "__main__":
    main()
