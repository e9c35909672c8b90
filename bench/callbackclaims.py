#!/usr/bin/env python
"""What a fair claim of a callback delivery costs with many deliveries due, on SQLite
and PostgreSQL.

    python bench/callbackclaims.py [--due 1000,10000,100000] [--claims 200] [--pg URL]

For each size a fresh database (a SQLite file; a PostgreSQL schema of its own, dropped
afterwards) holds ``due`` deliveries of one owner to one receiver, due first, and one
of another owner, due last.  Two of the first owner's are leased first, as two delivery
threads attempting them would hold them (its share of four threads).  The script then
times ``--claims`` claims by uws.usecases.callbackturns, each put back after: with one
of the first owner's rows leased (under its share: its next row is taken, among the
oldest 2,000 due), with two (at its share: the other owner's row must be found past
all of the first's), and as many of the store's ``claim_callback`` (the oldest due row
first, as the threads claimed before), and prints the mean and the worst of each.
``--pg ''`` skips PostgreSQL.
"""
from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

from batches import _pg_schema  # bench/batches.py: a schema of its own on PostgreSQL

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _store(root: Path, url: str):
    from uws.config import settings as config_mod
    from uws.web.app import create_app
    cfg = config_mod.from_dict({}, env={}, data_dir=root / "data", database_url=url,
                               executor="none", scheduler=False)
    app = create_app(cfg)     # migrates the database; no delivery threads (no callback_hosts)
    return app, app.extensions["uws"].store


def _fill(store, due: int) -> None:
    from uws.store.tables import callback as C
    start = dt.datetime(2020, 1, 1)
    rows = [dict(subject_kind="job", subject_id=f"j{i}", service="sleep", owner="bob",
                 url="http://tarpit.example/hook", state="pending", attempts=0,
                 due_time=start, next_attempt=start + dt.timedelta(milliseconds=i))
            for i in range(due)]
    # alice's: not due yet (bob's two are leased first), see _alice_due
    rows.append(dict(rows[0], subject_id="alice", owner="alice", url="http://good.example/",
                     next_attempt=dt.datetime(2999, 1, 1)))
    with store.engine.begin() as conn:
        for part in range(0, len(rows), 10_000):
            conn.execute(C.insert(), rows[part:part + 10_000])


def _alice_due(store) -> None:
    from uws.store.tables import callback as C
    with store.engine.begin() as conn:
        conn.execute(C.update().where(C.c.owner == "alice")
                     .values(next_attempt=dt.datetime(2020, 1, 2)))


def _timed(claim, release, claims: int) -> list[float]:
    times = []
    for _ in range(claims):
        started = time.perf_counter()
        row = claim()
        times.append(time.perf_counter() - started)
        assert row is not None
        release(row)
    return times


def measure(name: str, url: str, due: int, claims: int) -> None:
    from uws.usecases.callbackturns import Turns
    from uws.web.app import shutdown
    with tempfile.TemporaryDirectory(prefix="uws-claims-") as scratch:
        app, store = _store(Path(scratch), url)
        try:
            _fill(store, due)
            turns = Turns(store, threads=4)

            def claim(owner: str):
                row = turns.claim("me", 60)
                assert row.owner == owner
                return row

            def put_back(row):
                store.release_callback(row.id, "me")
                turns.done(row, None)
            figures = {}
            assert turns.claim("thread-1", 600).owner == "bob", "only bob's rows are due"
            figures["bob under his share"] = _timed(lambda: claim("bob"), put_back, claims)
            assert turns.claim("thread-2", 600).owner == "bob"
            _alice_due(store)
            figures["bob at his share"] = _timed(lambda: claim("alice"), put_back, claims)
            figures["oldest first (before)"] = _timed(
                lambda: store.claim_callback("me", 60),
                lambda row: store.release_callback(row.id, "me"), claims)
        finally:
            shutdown(app)
    for label, times in figures.items():
        print(f"{name:10} {due:7} due  {label:22}: mean {statistics.mean(times) * 1000:7.2f} ms,"
              f" worst {max(times) * 1000:7.2f} ms ({len(times)} claims)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--due", default="1000,10000,100000")
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--pg", default=PG, help="PostgreSQL URL ('' to skip)")
    args = parser.parse_args()
    for due in (int(n) for n in args.due.split(",")):
        with tempfile.TemporaryDirectory(prefix="uws-claims-db-") as scratch:
            measure("sqlite", f"sqlite:///{scratch}/uws.sqlite3", due, args.claims)
        if args.pg:
            schema, engine, url = _pg_schema(args.pg)
            try:
                measure("postgresql", url, due, args.claims)
            finally:
                with engine.begin() as conn:
                    conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
                engine.dispose()


if __name__ == "__main__":
    main()
