"""The hottest statements run on the database driver's cursor directly.

A :class:`DirectRead` is a SELECT compiled once for the engine's dialect: the same
SQL and the same conversions of values as SQLAlchemy's own execution, without its
per-statement bookkeeping, which costs more than SQLite's work on a read by primary
key (a job read: 80 µs through SQLAlchemy, 30 µs directly).

A :class:`DirectWrite` is an INSERT, UPDATE or DELETE run the same way inside a transaction
SQLAlchemy began (on its connection, so it commits or rolls back with the rest): the
rows every creation and phase change writes (the job, its counters, its event).

Inside a SQLAlchemy transaction, both are shown to its ``before_cursor_execute``
listeners, as its own statements are.

On PostgreSQL, what a front end's request costs is mostly its round trips to the
database: :class:`Readers` makes a read one, and :func:`writing` sends a
transaction's writes without waiting for their answers (:func:`pipelined`).
"""
from __future__ import annotations

import contextlib
import functools
import operator
import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa

from .engine import PIPELINE, still_open


class _Binds:
    """The driver's parameters of a compiled statement, from values by name."""

    def __init__(self, compiled: sa.sql.compiler.Compiled, dialect: sa.Dialect):
        binds = compiled.binds      # type: ignore[attr-defined]
        self.sql = compiled.string
        # values the statement carries (a literal, ``.values(x=None)``): a parameter
        # made with bindparam(name) and no value must be given
        self._defaults = {name: bind.value for name, bind in binds.items()
                          if not bind.required}
        self._convert: dict[str, Any] = {}
        for name, bind in binds.items():
            if bind.expanding or bind.literal_execute:
                raise ValueError(f"{name}: only plain parameters are run directly")
            to_driver = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if to_driver is not None:
                self._convert[name] = to_driver
        order = compiled.positiontup    # type: ignore[attr-defined]
        self._pick = _picker(list(order) if dialect.positional and order is not None
                             else None)

    def of(self, params: dict[str, Any]):
        """The parameters for ``params`` (every parameter without a default given;
        unused names are ignored), each value converted as SQLAlchemy would."""
        values = {**self._defaults, **params} if self._defaults else params
        if self._convert:
            values = dict(values)
            for name, to_driver in self._convert.items():
                value = values.get(name)
                if value is not None:
                    values[name] = to_driver(value)
        return values if self._pick is None else self._pick(values)


class DirectRead:
    def __init__(self, engine: sa.Engine, stmt: sa.Select | sa.CompoundSelect):
        dialect = engine.dialect
        self._binds = _Binds(stmt.compile(dialect=dialect), dialect)
        self.sql = self._binds.sql
        self.names = [str(c.key) for c in stmt.selected_columns]
        self._dialect = dialect
        self._impls = [c.type.dialect_impl(dialect) for c in stmt.selected_columns]
        # (column index, conversion) of the columns that need one, known at the first
        # execution (type codes)
        self._convert: list[tuple[int, Any]] | None = None

    def rows(self, cursor, params: dict[str, Any],
             conn: sa.Connection | None = None) -> list[Sequence[Any]]:
        """The rows for ``params`` (values by parameter name, every parameter without
        a default given; unused names are ignored), each value converted as
        SQLAlchemy would; ``conn``: the SQLAlchemy connection ``cursor`` is of."""
        with driver_errors(self._dialect, self.sql, params):
            values = self._binds.of(params)
            if conn is not None:
                tell_listeners(conn, cursor, self.sql, values, False)
            cursor.execute(self.sql, values)
            rows = cursor.fetchall()
        convert = self._convert
        if convert is None:     # PostgreSQL's numeric conversions depend on the type code
            convert = self._convert = [
                (i, f) for i, f in enumerate(
                    impl.result_processor(self._dialect, column[1])
                    for impl, column in zip(self._impls, cursor.description)) if f is not None]
        return _converted(rows, convert)

    def mappings(self, cursor, params: dict[str, Any]) -> list[dict[str, Any]]:
        return [dict(zip(self.names, row)) for row in self.rows(cursor, params)]


class DirectWrite:
    """A write, compiled once per dialect and set of columns given, run by :meth:`run`
    in the transaction of a SQLAlchemy connection; or, with ``returns=False``, any
    statement run for its effect alone (its rows are never read)."""

    def __init__(self, stmt: sa.Insert | sa.Update | sa.Delete | sa.Select,
                 returns: bool | None = None):
        self._stmt = stmt
        # whether its rows are read: by default, those of a RETURNING clause
        self._returns = bool(list(stmt.exported_columns)) if returns is None else returns
        self._binds: dict[tuple[tuple[str, str], tuple[str, ...]], _Binds] = {}
        self._returned: dict[tuple[str, str], list[tuple[int, Any]]] = {}  # by dialect_key

    def run(self, conn: sa.Connection,
            params: dict[str, Any] | Sequence[dict[str, Any]]) -> list[Sequence[Any]]:
        """Write with ``params``, or once per item of a list of them (all with the same
        names) in one call; the rows a RETURNING clause gives, converted as
        SQLAlchemy would (text, integers and times: what the store returns)."""
        rows = [params] if isinstance(params, dict) else list(params)
        key = (dialect_key(conn.dialect), tuple(rows[0]))
        binds = self._binds.get(key)
        if binds is None:
            binds = self._binds[key] = self._compile(conn.dialect, list(rows[0]))
        cursor = conn.connection.cursor()
        try:
            with driver_errors(conn.dialect, binds.sql, rows[0]):
                if len(rows) == 1:
                    values = binds.of(rows[0])
                    tell_listeners(conn, cursor, binds.sql, values, False)
                    cursor.execute(binds.sql, values)
                else:
                    many = [binds.of(row) for row in rows]
                    tell_listeners(conn, cursor, binds.sql, many, True)
                    cursor.executemany(binds.sql, many)
                if not self._returns:
                    return []
                returned = cursor.fetchall()    # in a pipeline: once its answers are in
        finally:
            cursor.close()
        return _converted(list(returned), self._returned[key[0]])

    def _compile(self, dialect: sa.Dialect, names: list[str]) -> _Binds:
        compiled = self._stmt.compile(dialect=dialect, column_keys=names)
        defaulted = [*compiled.insert_prefetch, *compiled.update_prefetch]
        if defaulted:   # SQLAlchemy computes these at execution: give them instead
            raise ValueError(f"no value given for {', '.join(c.name for c in defaulted)}")
        # No type code: right for text, integers and times, not for PostgreSQL's NUMERIC.
        processors = (c.type.dialect_impl(dialect).result_processor(dialect, None)
                      for c in self._stmt.exported_columns)
        self._returned[dialect_key(dialect)] = [(i, f) for i, f in enumerate(processors) if f]
        return _Binds(compiled, dialect)


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


def read_in(conn: sa.Connection, read: DirectRead, params: dict[str, Any]) -> list[Sequence[Any]]:
    """``read``'s rows inside ``conn``'s transaction (what it wrote so far included)."""
    cursor = conn.connection.cursor()
    try:
        return read.rows(cursor, params, conn)
    finally:
        cursor.close()


def tell_listeners(conn: sa.Connection, cursor, sql: str, params, many: bool) -> None:
    """SQLAlchemy's ``before_cursor_execute`` listeners of ``conn`` (logging, tracing,
    the tests' statement counts) see a statement run directly as they see their own."""
    listeners = conn.dispatch.before_cursor_execute
    if listeners:
        listeners(conn, cursor, sql, params, None, many)


class ReadIn:
    """A SELECT run directly inside the transactions of SQLAlchemy connections: compiled
    (a :class:`DirectRead`) for each engine's dialect when first run on it."""

    def __init__(self, stmt: sa.Select):
        self._stmt = stmt
        self._reads: dict[tuple[str, str], DirectRead] = {}

    def rows(self, conn: sa.Connection, params: dict[str, Any]) -> list[Sequence[Any]]:
        key = dialect_key(conn.dialect)
        read = self._reads.get(key)
        if read is None:
            read = self._reads[key] = DirectRead(conn.engine, self._stmt)
        return read_in(conn, read, params)


def dialect_key(dialect: sa.Dialect) -> tuple[str, str]:
    """What the SQL compiled for a dialect depends on (drivers differ in paramstyle)."""
    return dialect.name, dialect.driver


@contextlib.contextmanager
def driver_errors(dialect: sa.Dialect, sql: str, params) -> Iterator[None]:
    """The driver's errors raised as SQLAlchemy's (sa.exc.OperationalError, ...), as
    its own execution raises them: the store's callers catch those."""
    try:
        yield
    except dialect.loaded_dbapi.Error as exc:
        raise sa.exc.DBAPIError.instance(sql, params, exc, dialect.loaded_dbapi.Error,
                                         dialect=dialect) from exc


def _converted(rows: list[Sequence[Any]], convert: list[tuple[int, Any]]) -> list[Sequence[Any]]:
    """``rows`` with each (column index, conversion) of ``convert`` applied."""
    if not convert:
        return rows
    out: list[Sequence[Any]] = []
    for row in rows:
        values = list(row)
        for i, f in convert:
            if values[i] is not None:
                values[i] = f(values[i])
        out.append(values)
    return out


def _picker(order: list[str] | None):
    """A function from a dict of values to the driver's positional tuple (None: the
    driver takes the dict); itemgetter is one C call, but gives one value bare."""
    if order is None:
        return None
    if len(order) == 1:
        name = order[0]
        return lambda values: (values[name],)
    return operator.itemgetter(*order)


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
