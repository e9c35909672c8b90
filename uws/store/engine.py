"""Engines for SQLite (the embedded default) and PostgreSQL (shared deployments)."""
from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa

from .schema import create_schema

__all__ = ["create_schema", "make_engine"]


def make_engine(url: str, pool_size: int = 16) -> sa.Engine:
    if url.startswith("sqlite"):
        return _sqlite_engine(url, pool_size)
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    return sa.create_engine(url, pool_size=pool_size, max_overflow=pool_size * 4,
                            pool_pre_ping=True, future=True)


def _sqlite_engine(url: str, pool_size: int) -> sa.Engine:
    path = sa.engine.make_url(url).database
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # Private to the server's user; SQLite gives its -wal and -shm files the same mode.
        # Only a new file: closing a descriptor of a database this process has open
        # would drop its connections' POSIX locks, and another process closing its
        # last connection would then take itself for the last one and remove the WAL.
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError:
            pass    # there already, or SQLite says why when it opens it
    engine = sa.create_engine(url, pool_size=pool_size, max_overflow=pool_size * 4,
                              connect_args={"check_same_thread": False, "timeout": 30})

    @sa.event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):
        cur = dbapi_conn.cursor()
        # WAL: readers never block the writer; NORMAL: durable at checkpoints,
        # a crash loses at most the last transactions, never corrupts.
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    return engine
