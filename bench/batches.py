#!/usr/bin/env python
"""How long one batch of many jobs takes to create (issue 14), on SQLite and PostgreSQL.

    python bench/batches.py [--jobs 10000] [--repeat 3] [--pg postgresql+psycopg://...]

For each backend a fresh database (a SQLite file; a PostgreSQL schema of its own,
dropped afterwards) serves the app in process (Flask's test client, no executor);
the script POSTs one JSON batch of ``--jobs`` parameter sets to /sleep/batches, then
the same with PHASE=RUN (created, then queued), then reads the batch's report and
deletes the batch (its jobs one by one, as DELETE of a job does), and prints each time
(the best of ``--repeat``).  ``--pg ''`` skips PostgreSQL.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _app(root: Path, url: str):
    from uws.config import settings as config_mod
    from uws.web.app import create_app
    services = {"sleep": {"runner": "uws.demo:sleep", "anonymous_max_jobs": 0,
                          "parameters": [{"name": "DURATION", "type": "float", "default": "1"},
                                         {"name": "MESSAGE", "type": "string", "default": ""}]}}
    cfg = config_mod.from_dict({"services": services}, env={}, data_dir=root / "data",
                               database_url=url, executor="none", scheduler=False)
    return create_app(cfg)


def _timed(client, method: str, path: str, **kwargs) -> tuple[float, object]:
    started = time.perf_counter()
    answer = client.open(path, method=method, **kwargs)
    return time.perf_counter() - started, answer


def measure(name: str, url: str, jobs: int, repeat: int) -> None:
    from uws.web.app import shutdown
    rows = json.dumps([{"DURATION": i % 60, "MESSAGE": f"row {i}"} for i in range(jobs)])
    with tempfile.TemporaryDirectory(prefix="uws-batches-") as scratch:
        app = _app(Path(scratch), url)
        client = app.test_client()
        try:
            figures: dict[str, list[float]] = {"create": [], "create+run": [], "report": [],
                                               "delete": []}
            for _ in range(repeat):
                for label, path in (("create", "/sleep/batches"),
                                    ("create+run", "/sleep/batches?PHASE=RUN")):
                    seconds, answer = _timed(client, "POST", path, data=rows,
                                             content_type="application/json")
                    assert answer.status_code == 303, answer.data[:300]
                    figures[label].append(seconds)
                batch = answer.headers["Location"]
                seconds, answer = _timed(client, "GET", batch + "?limit=1000")
                assert answer.status_code == 200
                figures["report"].append(seconds)
                seconds, answer = _timed(client, "DELETE", batch)     # job by job
                assert answer.status_code == 303
                figures["delete"].append(seconds)
        finally:
            shutdown(app)
    for label, times in figures.items():
        print(f"{name:10} {label:11} {jobs} jobs: {min(times):6.2f} s "
              f"(best of {len(times)}; worst {max(times):.2f} s)", flush=True)


def _pg_schema(base: str):
    schema = f"uws_bench_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(base)
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    separator = "&" if "?" in base else "?"
    return schema, engine, f"{base}{separator}options=-csearch_path%3D{schema}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pg", default=PG, help="PostgreSQL URL ('' to skip)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="uws-batches-db-") as scratch:
        measure("sqlite", f"sqlite:///{scratch}/uws.sqlite3", args.jobs, args.repeat)
    if args.pg:
        schema, engine, url = _pg_schema(args.pg)
        try:
            measure("postgresql", url, args.jobs, args.repeat)
        finally:
            with engine.begin() as conn:
                conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
            engine.dispose()


if __name__ == "__main__":
    main()
