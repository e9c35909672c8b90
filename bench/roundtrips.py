#!/usr/bin/env python
"""What a request costs in round trips to PostgreSQL, the figure that sets a front
end's latency once the database is on another machine.

    python bench/roundtrips.py [--pg postgresql+psycopg://...] [--requests 200] [--runs 40]

A PostgreSQL schema of its own (dropped afterwards), the app in process (the WSGI
app through Flask's test client: no HTTP, no jobs run), 30 jobs created, then for
each kind of request, sent ``--requests`` times one after the other: the p50 time
and the round trips per request, counted in libpq's trace of every connection (see
:class:`_Traced`; statements sent in a pipeline are one round trip).  Then, in another
schema, with the local executor: ``--runs`` jobs created with PHASE=RUN and run one
at a time, and the round trips of each, from its POST to its COMPLETED (see
:func:`measure_runs`).
"""
from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
import uuid
from collections.abc import Iterator

import sqlalchemy as sa

from bench import percentile

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


class Trace:
    """libpq's protocol trace of every connection opened from now on, a file each."""

    def __init__(self):
        self._connections: list[_Traced] = []
        sa.event.listen(sa.engine.Engine, "connect", self._trace)

    def _trace(self, dbapi_conn, _record) -> None:
        from psycopg import pq
        traced = _Traced(tempfile.TemporaryFile("w+"))
        self._connections.append(traced)
        dbapi_conn.pgconn.trace(traced.file.fileno())
        dbapi_conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)

    def round_trips(self) -> int:
        """The round trips of every connection since the last call."""
        return sum(traced.round_trips() for traced in self._connections)


class _Traced:
    """One connection's trace.  The client waits for the server after each simple
    Query, each Sync (the end of a statement run alone, or of those a pipeline sent
    together; psycopg reads every Sync's answer, also the one that ends a pipeline)
    and each Flush (a pipeline reading the answers so far, for one it needs)."""

    def __init__(self, file):
        self.file = file
        self.read_to = 0
        self.last = ""    # the last message sent

    def round_trips(self) -> int:
        self.file.seek(self.read_to)
        text = self.file.read()
        text = text[:text.rfind("\n") + 1]     # whole lines: the rest is being written
        self.read_to += len(text.encode())
        count = 0
        for line in text.splitlines():
            fields = line.split("\t", 3)
            if len(fields) < 3 or fields[0] != "F":
                continue    # received, or a statement's text going on over several lines
            kind = fields[2]
            # a Flush right after a Sync is the same wait (psycopg ends a pipeline so)
            count += kind in ("Query", "Sync") or (kind == "Flush" and self.last != "Sync")
            self.last = kind
        return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", default=PG)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--runs", type=int, default=40, help="jobs run, of each kind (40; 0: none)")
    args = parser.parse_args()
    admin = sa.create_engine(args.pg)
    trace = Trace()
    try:
        with own_schema(admin, args.pg) as url:
            measure(url, args.requests, trace)
        if args.runs > 0:
            with own_schema(admin, args.pg) as url:     # no jobs left queued by the above
                measure_runs(url, args.runs, trace)
    finally:
        admin.dispose()


@contextlib.contextmanager
def own_schema(admin: sa.Engine, pg: str) -> Iterator[str]:
    """A database URL whose tables are made in a new schema, dropped afterwards."""
    schema = f"uws_bench_{uuid.uuid4().hex[:12]}"
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{pg}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))


def measure(url: str, n: int, trace: Trace) -> None:
    from uws.config import settings as config
    from uws.web.app import create_app, shutdown
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


def measure_runs(url: str, n: int, trace: Trace) -> None:
    """Jobs run by the local executor, one at a time: the round trips of every
    connection of the server from the POST that creates and runs a job until the job
    is COMPLETED (seen on a connection of our own, not traced), the server's
    background work in that time (its sweeps, the running jobs' monitor) included;
    and, for comparison, that background work alone, per second of idling."""
    import psycopg

    from uws.config import settings as config
    from uws.web.app import create_app, shutdown
    app = create_app(config.load(None, env={"UWS_DATABASE_URL": url},
                                 data_dir=tempfile.mkdtemp(prefix="uws-rt-")))
    client = app.test_client()
    watcher = psycopg.connect(url.replace("+psycopg", ""), autocommit=True)
    try:
        time.sleep(1.0)     # after its start-up work
        trace.round_trips()
        time.sleep(2.0)
        idle = trace.round_trips() / 2.0
        print(f"\n{'job run':<32} {'p50':>9} {'round trips':>12}   ({n} each, one at a time)")
        print(f"{'(the server idle, per second)':<32} {'':>9} {idle:12.1f}")
        kinds = {"no-op (DURATION=0)": "0",
                 "DURATION=0.5 (5 progress reports)": "0.5"}
        for label, duration in kinds.items():
            run_job(client, watcher, duration)
            times = []
            trace.round_trips()
            for _ in range(n):
                t0 = time.perf_counter()
                run_job(client, watcher, duration)
                times.append((time.perf_counter() - t0) * 1000)
            per = trace.round_trips() / n
            print(f"{label:<32} {percentile(times, 50):6.0f} ms {per:12.1f}", flush=True)
    finally:
        watcher.close()
        shutdown(app)


def run_job(client, watcher, duration: str) -> None:
    """Create a job with PHASE=RUN and wait until it is COMPLETED (polled every ms)."""
    response = client.post("/sleep", data={"DURATION": duration, "PHASE": "RUN"})
    job_id = response.headers["Location"].rsplit("/", 1)[1]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        row = watcher.execute("SELECT phase FROM uws_job WHERE id = %s", (job_id,)).fetchone()
        if row and row[0] == "COMPLETED":
            return
        if row and row[0] in ("ERROR", "ABORTED"):
            raise RuntimeError(f"job {job_id} ended in {row[0]}")
        time.sleep(0.001)
    raise RuntimeError(f"job {job_id} did not complete within 30 s")


def new_job(client) -> str:
    return client.post("/sleep", data={"DURATION": "0"}).headers["Location"].rsplit("/", 1)[1]


if __name__ == "__main__":
    main()
