"""Engines for SQLite (the embedded default) and PostgreSQL (shared deployments)."""
from __future__ import annotations

import contextlib
import os
import select
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa

from .schema import create_schema

__all__ = ["checkpoint", "create_schema", "make_engine"]

#: how long a writer waits for SQLite's write lock (and for its engine's other writers)
BUSY_S = 30
#: WAL pages past which a committing writer copies them into the database itself:
#: only when :func:`checkpoint` has not run for a while (no scheduler in the process)
WAL_BACKSTOP_PAGES = 10_000


def make_engine(url: str, pool_size: int = 16) -> sa.Engine:
    if url.startswith("sqlite"):
        return _sqlite_engine(url, pool_size)
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    try:
        engine = sa.create_engine(url, pool_size=pool_size, max_overflow=pool_size * 4,
                                  future=True)
    except ModuleNotFoundError as exc:
        if exc.name != "psycopg":
            raise
        raise ModuleNotFoundError(f"{exc}: PostgreSQL needs the psycopg driver: "
                                  "pip install 'ivoa-uws-server[postgres]'", name=exc.name) from exc
    sa.event.listen(engine, "checkout", _refuse_closed)
    sa.event.listen(engine, "after_cursor_execute", _sync_pipeline)
    return engine


#: ``Connection.info`` key of the pipeline a transaction's statements are sent in
#: (see :func:`uws.store.connections.pipelined`)
PIPELINE = "uws.pipeline"


def _sync_pipeline(conn, _cursor, _statement, _params, _context, _many) -> None:
    """A statement SQLAlchemy runs in a pipeline has its answer read at once (with
    those of the statements sent before it): SQLAlchemy reads its rows, or its row
    count, right after this, and would find none yet."""
    pipeline = conn.info.get(PIPELINE)
    if pipeline is not None:
        pipeline.sync()


def _refuse_closed(dbapi_conn, _record, _proxy) -> None:
    """The pool's check of each connection it hands out, instead of its ping (a round
    trip before every transaction): one its server closed is replaced (the pool
    retries on DisconnectionError)."""
    if not still_open(dbapi_conn):
        raise sa.exc.DisconnectionError("the database server closed this connection")


def still_open(dbapi_conn) -> bool:
    """Whether an idle PostgreSQL connection can still be used, asked without a round
    trip.  Its server sends nothing unprompted but when it ends the session (a restart,
    a terminated backend, an idle timeout: its FATAL message, then the end of the
    stream), so a socket with something to read is one to discard; so is one the
    driver knows is closed.  (A rare message of another kind, a parameter changed by
    a reload, costs a reconnection, not an error.)  A peer gone without a word is
    found by neither this nor a ping until TCP gives up."""
    try:
        if dbapi_conn.closed:
            return False
        readable, _, _ = select.select([dbapi_conn.fileno()], [], [], 0)
    except Exception:   # noqa: BLE001 - OSError, or the driver's own: the connection is gone
        return False
    return not readable


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
    # LIFO: a connection keeps its page cache only while no other one writes, so
    # the one used last (often the last writer) is the one to use next.
    engine = sa.create_engine(url, pool_size=pool_size, max_overflow=pool_size * 4,
                              pool_use_lifo=True,
                              connect_args={"check_same_thread": False, "timeout": BUSY_S})

    @sa.event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):
        cur = dbapi_conn.cursor()
        # WAL: readers never block the writer; NORMAL: durable at checkpoints,
        # a crash loses at most the last transactions, never corrupts.
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={BUSY_S * 1000}")
        # SQLite's own checkpoint (every 1000 pages) runs inside a commit: 20 ms of
        # fsync about once per 100 creations, with this engine's write lock held
        cur.execute(f"PRAGMA wal_autocheckpoint={WAL_BACKSTOP_PAGES}")
        cur.close()

    _one_writer_at_a_time(engine)
    return engine


def checkpoint(engine: sa.Engine) -> None:
    """Copy the pages committed to SQLite's WAL into the database file, outside any
    writer's commit (PASSIVE: it waits for no reader or writer, and copies what it
    can).  Nothing to do on PostgreSQL."""
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")


def _one_writer_at_a_time(engine: sa.Engine) -> None:
    """Make the ``engine.begin()`` transactions of this engine (a store has one)
    queue on a lock.

    SQLite has a single writer; its busy handler makes the others poll, sleeping
    up to 100 ms between tries: 8 clients creating jobs got 570 jobs/s, 730 with
    the lock.  The lock is taken before the transaction's connection is checked
    out, and is re-entrant (a writer's nested ``begin()`` goes on to SQLite as
    before); other engines and processes still meet SQLite's own lock."""
    lock = threading.RLock()
    plain_begin = engine.begin

    @contextlib.contextmanager
    def begin() -> Iterator[sa.Connection]:
        if not lock.acquire(timeout=BUSY_S):
            raise sa.exc.OperationalError("BEGIN", None,
                                          sqlite3.OperationalError("database is locked"))
        try:
            with plain_begin() as conn:
                yield conn
        finally:
            lock.release()

    engine.begin = begin    # type: ignore[method-assign]
