#!/usr/bin/env python
"""Focused measurements of the job counts (issue 12): what HEAD costs, and what
keeping the counters costs creations.

    python bench/counts.py head [--jobs 1000000] [--requests 50]
        seeds jobs (Store.seed_jobs) into a fresh SQLite database, starts ``uws serve``
        on it and times HEAD /sleep (with and without PHASE) over one keep-alive
        connection, sequentially: p50, p99, and the server's CPU per request.

    python bench/counts.py create [--url postgresql+psycopg://...] [--threads 8]
                                  [--seconds 10]
        creates jobs through Store.insert_job from N threads for a while, once with
        every thread creating for one owner (one counter row per slot) and once with an
        owner per thread; jobs per second.  On PostgreSQL each run gets a schema of its
        own, dropped afterwards.

Run it against another checkout (e.g. the code before the counters) from that
checkout's directory with PYTHONPATH=that/checkout (the server subprocess imports
uws from its working directory first): both commands use only APIs that predate
the counters.
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

from bench import HttpClient, Server, percentile

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
HEADS = ("sleep", "sleep?PHASE=COMPLETED", "sleep?PHASE=EXECUTING")


def head(jobs: int, requests: int) -> None:
    from uws.store import Store
    with tempfile.TemporaryDirectory(prefix="uws-counts-") as scratch:
        root = Path(scratch)
        server = Server(root / "data", root / "server.log")
        store = Store(server.db_url)
        started = time.perf_counter()
        store.seed_jobs("sleep", jobs)
        store.close()
        print(f"seeded {jobs} jobs in {time.perf_counter() - started:.1f} s", flush=True)
        server.start()
        client = HttpClient(server.url)
        try:
            for path in HEADS:
                for _ in range(3):          # warm up: connection, statement caches
                    client.request("HEAD", path)
                times, cpu = [], server.cpu_seconds()
                for _ in range(requests):
                    t0 = time.perf_counter()
                    answer = client.request("HEAD", path)
                    times.append((time.perf_counter() - t0) * 1000)
                    assert answer.status_code == 200, answer.status_code
                cpu_ms = (server.cpu_seconds() - cpu) * 1000 / requests
                count = answer.headers["X-Job-Count"]
                print(f"HEAD /{path:<24} X-Job-Count {count:>8}  p50 {percentile(times, 50):7.2f} ms"
                      f"  p99 {percentile(times, 99):7.2f} ms  server CPU {cpu_ms:6.2f} ms/req"
                      f"  n={requests}", flush=True)
        finally:
            client.close()
            server.stop()


def create(url: str, threads: int, seconds: float) -> None:
    for shared in (True, False):
        schema = f"uws_bench_{uuid.uuid4().hex[:12]}" if url.startswith("postgresql") else ""
        with tempfile.TemporaryDirectory(prefix="uws-counts-") as scratch:
            target = url or f"sqlite:///{scratch}/uws.sqlite3"
            if schema:
                _admin(url, f"CREATE SCHEMA {schema}")
                target = f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"
            try:
                made = _create_for(target, threads, seconds, shared)
            finally:
                if schema:
                    _admin(url, f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        owners = "one owner" if shared else f"{threads} owners"
        print(f"create, {threads} threads, {owners:<10}: {made / seconds:8.0f} jobs/s "
              f"({made} in {seconds:.0f} s)", flush=True)


def _create_for(url: str, threads: int, seconds: float, shared: bool) -> int:
    from uws.domain import timeutil
    from uws.domain.model import Job, new_job_id
    from uws.domain.phases import Phase
    from uws.store import Store
    store = Store(url, pool_size=threads)
    made = [0] * threads
    start = threading.Barrier(threads + 1)
    end = time.monotonic() + seconds + 1

    def run(i: int) -> None:
        owner = "alice" if shared else f"owner{i}"
        start.wait()
        while time.monotonic() < end:
            now = timeutil.now()
            store.insert_job(Job(id=new_job_id(), service="sleep", owner=owner,
                                 phase=Phase.PENDING, creation_time=now,
                                 execution_duration=60, destruction=None))
            made[i] += 1

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    time.sleep(1)                   # let every connection open before counting
    before = sum(made)
    for worker in workers:
        worker.join()
    store.close()
    return sum(made) - before


def _admin(url: str, sql: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(sql))
    engine.dispose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    h = sub.add_parser("head")
    h.add_argument("--jobs", type=int, default=1_000_000)
    h.add_argument("--requests", type=int, default=50)
    c = sub.add_parser("create")
    c.add_argument("--url", default=PG, help="a database URL; '' for a scratch SQLite file")
    c.add_argument("--threads", type=int, default=8)
    c.add_argument("--seconds", type=float, default=10)
    args = ap.parse_args()
    if args.command == "head":
        head(args.jobs, args.requests)
    else:
        create(args.url, args.threads, args.seconds)


if __name__ == "__main__":
    main()
