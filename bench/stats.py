#!/usr/bin/env python
"""What the statistics cost with a million jobs stored, and what the request metrics
cost every request.

    python bench/stats.py [--jobs 1000000] [--owners 10] [--requests 50]
                          [--backends sqlite,postgresql] [--pg postgresql+psycopg://...]

For each backend: a fresh database (a SQLite file; a PostgreSQL schema of its own,
dropped afterwards), ``--jobs`` COMPLETED jobs seeded over ``--owners`` owners
(Store.seed_jobs), and a day of duration histograms for each owner (every bucket of
both widths, both kinds, 16 bins each: what jobs ending around the clock leave), then
on PostgreSQL an ANALYZE (what autovacuum does while such a day accumulates).  Then,
in process through the WSGI app (no network: the server's own cost), the p50 and
p99 of sequential GETs of the statistics routes as an owner and as an administrator,
for both windows; and the p50 of GET {job} with and without the request metrics'
hooks, and the hooks' own cost per request (their overhead, measured apart: the
difference of two p50s drowns in noise on a busy machine).  Identities come from a
trusted proxy header (no password hashing in the figures).
"""
from __future__ import annotations

import argparse
import datetime as dt
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

from bench import percentile

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ROUTES = ("/sleep/stats", "/sleep/stats?window=day", "/stats", "/stats?window=day",
          "/metrics")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--owners", type=int, default=10)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--pg", default=PG)
    args = parser.parse_args()
    for backend in args.backends.split(","):
        with tempfile.TemporaryDirectory(prefix="uws-stats-") as scratch:
            schema = f"uws_bench_{uuid.uuid4().hex[:12]}" if backend == "postgresql" else ""
            url = f"sqlite:///{scratch}/uws.sqlite3"
            if schema:
                _admin(args.pg, f"CREATE SCHEMA {schema}")
                url = f"{args.pg}{'&' if '?' in args.pg else '?'}options=-csearch_path%3D{schema}"
            try:
                run(backend, url, Path(scratch), args.jobs, args.owners, args.requests)
            finally:
                if schema:
                    _admin(args.pg, f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def run(backend: str, url: str, scratch: Path, jobs: int, owners: int, requests: int) -> None:
    from uws.store import Store
    started = time.perf_counter()
    store = Store(url)
    names = [f"owner{i}" for i in range(owners)]
    for name in names:
        store.seed_jobs("sleep", jobs // owners, owner=name)
    seed_histograms(store, names)
    analyze(store.engine)
    store.close()
    print(f"[{backend}] seeded {jobs} jobs of {owners} owners and a day of histograms "
          f"in {time.perf_counter() - started:.0f} s", flush=True)
    app = make_app(url, scratch)
    try:
        client = app.test_client()
        for route in ROUTES:
            for who in ("owner0", "root"):
                if route == "/metrics" and who != "root":
                    continue
                times = timed(client, route, who, requests)
                print(f"[{backend}] GET {route:<26} as {who:<6}  p50 {percentile(times, 50):6.2f} ms"
                      f"  p99 {percentile(times, 99):6.2f} ms  n={requests}", flush=True)
        job = one_job(app, "owner0")
        with_hooks = timed(client, f"/sleep/{job}", "owner0", requests * 10)
        print(f"[{backend}] the request metrics' hooks alone: {hook_cost(app):.1f} µs per request",
              flush=True)
        without_metrics(app)
        without_hooks = timed(client, f"/sleep/{job}", "owner0", requests * 10)
        print(f"[{backend}] GET {{job}} p50 {percentile(with_hooks, 50):.3f} ms with the request "
              f"metrics, {percentile(without_hooks, 50):.3f} ms without", flush=True)
    finally:
        from uws.web.app import shutdown
        shutdown(app)


def seed_histograms(store, owners: list[str]) -> None:
    from uws.domain import timeutil
    from uws.store.stats import StatsStore
    from uws.usecases import stats
    now = timeutil.now()
    rows = []
    for owner in owners:
        for width in sorted(set(stats.WIDTHS.values())):
            for step in range(86400 // width + 1):
                bucket = stats.bucket_of(now - dt.timedelta(seconds=step * width), width)
                for kind, first in ((stats.WAIT, 30), (stats.RUN, 50)):
                    rows += [dict(service="sleep", owner=owner, width=width, bucket=bucket,
                                  kind=kind, bin=b, n=3 * width // stats.BUCKET_SECONDS)
                             for b in range(first, first + 16)]
    StatsStore(store.engine).seed_bins(rows)


def analyze(engine) -> None:
    """Gather the planner's statistics, as autovacuum (PostgreSQL) does by itself after
    the first few thousand rows of a day's histograms; without them the planner takes
    the freshly seeded table for a few rows and sorts thousands to group them."""
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE uws_duration_bins, uws_job_count, uws_phase_samples")


def make_app(url: str, scratch: Path):
    from uws.auth import AuthConfig
    from uws.config import settings as config_mod
    from uws.web.app import create_app
    cfg = config_mod.from_dict({"services": {}}, env={}, data_dir=scratch / "data",
                               database_url=url, executor="none", scheduler=False)
    cfg.auth = AuthConfig(modes=("header",), admins=frozenset({"root"}),
                          trusted_proxies=frozenset({"127.0.0.1"}))
    return create_app(cfg)


def timed(client, route: str, who: str, requests: int) -> list[float]:
    headers = {"X-Remote-User": who}
    for _ in range(3):      # warm up: connections, statement caches
        client.get(route, headers=headers)
    times = []
    for _ in range(requests):
        t0 = time.perf_counter()
        answer = client.get(route, headers=headers)
        times.append((time.perf_counter() - t0) * 1000)
        assert answer.status_code == 200, (route, answer.status_code, answer.data[:200])
    return times


def one_job(app, owner: str) -> str:
    from uws.domain.model import ListQuery
    refs = app.extensions["uws"].store.list_jobs("sleep", owner, ListQuery(limit=1))
    return refs[0].id


def hook_cost(app, rounds: int = 20000) -> float:
    """Microseconds the request metrics' hook adds to a GET {job} (the best of five
    runs: the least disturbed by other work on the machine).  Their clock starts when
    the request object is made: one attribute, left out here."""
    from flask import Response, request

    observe = app.extensions["uws_metrics"].observe
    rule = next(r for r in app.url_map.iter_rules() if r.rule == "/<service>/<job_id>")
    best = []
    with app.test_request_context(f"/sleep/{'0' * 32}", method="GET"):
        request.url_rule = rule
        response = Response("")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(rounds):
                observe(response)
            best.append((time.perf_counter() - t0) / rounds * 1e6)
    return min(best)


def without_metrics(app) -> None:
    """Take the request metrics' hook out (what GET {job} cost before them)."""
    observe = app.extensions["uws_metrics"].observe
    app.after_request_funcs[None] = [f for f in app.after_request_funcs[None]
                                     if f != observe]


def _admin(url: str, sql: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(sql))
    engine.dispose()


if __name__ == "__main__":
    main()
