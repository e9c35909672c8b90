"""How the store uses its connections: the reads and write transactions around the
direct statements (:mod:`.direct`).

On PostgreSQL, what a front end's request costs is mostly its round trips to the
database: :class:`Readers` makes a direct read one, :func:`reading` makes any other
read one, and :func:`writing` sends a transaction's writes, its BEGIN and its COMMIT
without waiting for their answers (:func:`pipelined`).  On SQLite they are the
engine's own connections and transactions (reads keep a few connections aside).
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from .direct import driver_errors
from .engine import PIPELINE, still_open


@contextlib.contextmanager
def pipelined(conn: sa.Connection) -> Iterator[Any]:
    """On PostgreSQL (psycopg's pipeline mode), the statements run inside are sent
    without waiting for each one's answer: a transaction's writes cost one round trip
    together instead of one each.

    What reads an answer waits for it, and for those of the statements sent before it:
    a :class:`DirectRead`, a :class:`DirectWrite` whose rows are read (RETURNING), and
    every statement SQLAlchemy runs (see :func:`.engine._sync_pipeline`).  So the code
    inside runs as it would outside, but for one thing: a write whose answer nothing
    reads raises its error at the next of those reads, or when the block ends (raised
    as SQLAlchemy's error, as inside), in the same transaction.  Elsewhere (SQLite) the
    block runs as it is.  Yields psycopg's pipeline, or None."""
    dbapi = conn.connection.dbapi_connection
    if conn.dialect.name != "postgresql" or not _pipelines(dbapi):
        yield None
        return
    with driver_errors(conn.dialect, "(a pipeline of statements)", None), \
            dbapi.pipeline() as pipeline:  # type: ignore[union-attr]
        # the dict itself: conn.info raises once the connection is lost (a restart),
        # which would hide the error that says so
        info = conn.info
        info[PIPELINE] = pipeline
        try:
            yield pipeline
        finally:
            info.pop(PIPELINE, None)


@contextlib.contextmanager
def writing(engine: sa.Engine) -> Iterator[sa.Connection]:
    """``engine.begin()``, on PostgreSQL with its statements :func:`pipelined` from its
    BEGIN to its COMMIT: a transaction whose writes read nothing is one round trip,
    whatever their number, and each read in it one more.

    The BEGIN and the COMMIT are sent here, on a connection in autocommit, as
    statements of the pipeline: psycopg, beginning a transaction itself, would wait
    for the answer to its BEGIN, and its COMMIT in a pipeline for its own Sync before
    the one that ends the pipeline.  What SQLAlchemy sees is an autocommit connection,
    whose statements the transaction begun here holds together."""
    if engine.dialect.name != "postgresql":
        with engine.begin() as conn:    # SQLite's, which queues its writers
            yield conn
        return
    with engine.connect() as conn:
        dbapi = conn.connection.dbapi_connection
        if not _pipelines(dbapi):
            with conn.begin():
                yield conn
            return
        conn.execution_options(isolation_level="AUTOCOMMIT")
        try:
            with pipelined(conn) as pipeline:
                _send(dbapi, _BEGIN)
                try:
                    yield conn
                except BaseException:
                    _roll_back(dbapi, pipeline)
                    raise
                # answered, with the writes still due, at the end of the pipeline: a
                # write's error is raised there (as SQLAlchemy's), the COMMIT skipped
                _send(dbapi, "COMMIT")
        except BaseException:
            _end_failed(dbapi)
            raise
        conn.dispatch.commit(conn)  # its listeners hear of it, as of its own commits


#: READ COMMITTED whatever the server's default: the store's locking relies on each
#: statement's snapshot being taken when it starts (see Store.insert_job)
_BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED"


def _send(dbapi, sql: str) -> None:
    """A transaction's BEGIN, COMMIT or ROLLBACK, into the pipeline (never prepared)."""
    cursor = dbapi.cursor()
    try:
        cursor.execute(sql, prepare=False)
    finally:
        cursor.close()


def _roll_back(dbapi, pipeline) -> None:
    """End a pipelined transaction whose block failed with its block's error, the one
    to raise: the answers still due are read and their errors dropped, then ROLLBACK.
    A connection lost meanwhile fails both quietly (the pool replaces it before its
    next use)."""
    for step in (pipeline.sync, functools.partial(_send, dbapi, "ROLLBACK"), pipeline.sync):
        try:
            step()
        except Exception:   # noqa: BLE001, S112 - the failed transaction's, or a lost connection
            continue


def _end_failed(dbapi) -> None:
    """After a pipelined transaction failed, at its COMMIT or before: one the server
    still holds open (a write failed, so the COMMIT after it was skipped) is rolled
    back; a connection lost, quietly."""
    try:
        if dbapi.info.transaction_status != _PQTRANS_IDLE:
            dbapi.rollback()
    except Exception:   # noqa: BLE001, S110 - the error on its way says what failed
        pass


@contextlib.contextmanager
def reading(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A connection for reads only.  On PostgreSQL in autocommit: each statement is
    one round trip, without the BEGIN before it and the ROLLBACK after it (which
    psycopg follows with DEALLOCATE ALL, dropping the statements it had prepared).
    Under READ COMMITTED, each statement of a transaction took its own snapshot
    anyway.  Elsewhere, ``engine.connect()``."""
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn.execution_options(isolation_level="AUTOCOMMIT")
        yield conn


def _pipelines(dbapi) -> bool:
    """Whether the driver has pipeline mode (psycopg 3, with libpq 14 or later)."""
    return getattr(type(dbapi), "pipeline", None) is not None and _libpq_pipelines()


@functools.cache
def _libpq_pipelines() -> bool:
    from psycopg import Pipeline
    return Pipeline.is_supported()


class Readers:
    """Driver cursors for the direct reads of one engine.

    A few connections are kept aside for them, checked out of SQLAlchemy's pool for
    good.  On SQLite, taking one from the pool and giving it back (with its reset)
    costs 14 µs, half a read by primary key; a kept connection holds no transaction
    between reads (the driver opens one only for a write), so it never pins an old
    snapshot.

    On PostgreSQL each read runs in autocommit: a direct read is one statement (one
    snapshot), and without a transaction around it the driver sends no BEGIN before
    it and no ROLLBACK after it, so a read is one round trip (it was four: the pool's
    ping, BEGIN, the statement, ROLLBACK).  A kept connection is checked as the pool
    checks those it hands out, without a round trip (:func:`.engine.still_open`).
    """

    #: connections kept aside, at most: the reads running at once beyond this take
    #: theirs from the pool and give it back.  Never more than a quarter of the pool's
    #: steady size, so that writers always find connections (a small pool keeps none).
    KEPT = 8

    def __init__(self, engine: sa.Engine):
        self.engine = engine
        size = getattr(engine.pool, "size", None)
        self._keep = min(self.KEPT, size() // 4) if callable(size) else 0
        self._kept: list[Any] = []      # idle pooled connections, checked out for good
        self._autocommit = engine.dialect.name == "postgresql"
        self._lock = threading.Lock()   # between giving back and close()
        self._closed = False
        _ALL_READERS.add(self)

    @contextlib.contextmanager
    def cursor(self) -> Iterator[Any]:
        """A driver cursor on a connection of this engine's, given back afterwards."""
        conn = self._take()
        try:
            if self._autocommit:
                conn.dbapi_connection.autocommit = True     # no round trip
            cur = conn.cursor()
            try:
                yield cur
            finally:
                cur.close()
        finally:
            self._give_back(conn)

    def _take(self):
        while True:
            try:
                conn = self._kept.pop()     # atomic: no lock needed
            except IndexError:
                return self.engine.raw_connection()     # checked by the pool
            if not self._autocommit or still_open(conn.dbapi_connection):
                return conn
            conn.invalidate()

    def _give_back(self, conn) -> None:
        if self._keep and self._idle(conn):
            with self._lock:    # reads ending at once never keep more than _keep
                if not self._closed and len(self._kept) < self._keep:
                    self._kept.append(conn)
                    return
        if self._autocommit:
            _end_autocommit(conn)
        conn.close()    # back to the pool, which resets it

    def _idle(self, conn) -> bool:
        """Whether ``conn`` is fit to keep: no transaction open (a SQLite one is rolled
        back), and a PostgreSQL one still connected with nothing under way."""
        dbapi = conn.dbapi_connection
        if not self._autocommit:
            if dbapi.in_transaction:
                conn.rollback()
            return True
        return not dbapi.closed and dbapi.info.transaction_status == _PQTRANS_IDLE

    def close(self) -> None:
        """Give the kept connections back (before the engine is disposed of)."""
        with self._lock:
            self._closed = True
        while self._kept:
            conn = self._kept.pop()
            if self._autocommit:
                _end_autocommit(conn)
            conn.close()


_ALL_READERS: weakref.WeakSet[Readers] = weakref.WeakSet()


def _forget_kept_connections() -> None:
    """In a process just forked (an app loaded before its server forks workers): the
    kept connections, as the pool's, are the parent's, whose sockets it goes on using.
    The pool is replaced without closing any (SQLAlchemy's advice after a fork), so
    that the kept ones, dropped, go back to the parent's pool when collected, never
    to this process's."""
    for readers in list(_ALL_READERS):
        readers._kept = []
        readers.engine.dispose(close=False)


os.register_at_fork(after_in_child=_forget_kept_connections)

#: libpq's PQTRANS_IDLE: connected, no transaction, no command under way
_PQTRANS_IDLE = 0


def _end_autocommit(conn) -> None:
    """Back to transactions, as the pool hands its connections out; a connection that
    cannot be (it broke during the read) is discarded rather than given back."""
    try:
        conn.dbapi_connection.autocommit = False
    except Exception:   # noqa: BLE001 - the read's own error, if any, is on its way
        conn.invalidate()
