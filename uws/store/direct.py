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

The connections they run on, and the transactions around them, are
:mod:`.connections`'.
"""
from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa


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
        self.send(cursor, params, conn)
        return self.answer(cursor, params)

    def send(self, cursor, params: dict[str, Any], conn: sa.Connection | None = None) -> None:
        """Run the read on ``cursor`` (in a pipeline: send it), its rows to be read by
        :meth:`answer`."""
        with driver_errors(self._dialect, self.sql, params):
            values = self._binds.of(params)
            if conn is not None:
                tell_listeners(conn, cursor, self.sql, values, False)
            cursor.execute(self.sql, values)

    def answer(self, cursor, params: dict[str, Any]) -> list[Sequence[Any]]:
        """The rows of the read :meth:`send` ran on ``cursor`` with ``params``."""
        with driver_errors(self._dialect, self.sql, params):
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


class _Sent(NamedTuple):
    """A statement run (in a pipeline: sent) whose answer is still to be read."""
    cursor: Any
    dialect: sa.Dialect
    sql: str
    params: Any


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
        return self.answer(self.send(conn, params))

    def send(self, conn: sa.Connection,
             params: dict[str, Any] | Sequence[dict[str, Any]]) -> _Sent:
        """Run the write (in a pipeline: send it), its rows to be read by :meth:`answer`."""
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
        except BaseException:
            cursor.close()
            raise
        return _Sent(cursor, conn.dialect, binds.sql, rows[0])

    def answer(self, sent: _Sent) -> list[Sequence[Any]]:
        """The rows the write :meth:`send` ran returns (none without RETURNING)."""
        try:
            if not self._returns:
                return []
            with driver_errors(sent.dialect, sent.sql, sent.params):
                returned = sent.cursor.fetchall()   # in a pipeline: once its answers are in
        finally:
            sent.cursor.close()
        return _converted(list(returned), self._returned[dialect_key(sent.dialect)])

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
        return read_in(conn, self._read(conn), params)

    def send(self, conn: sa.Connection, params: dict[str, Any]) -> _Sent:
        """Run the read in ``conn``'s transaction (in a pipeline: send it), its rows
        to be read by :meth:`answer`."""
        read, cursor = self._read(conn), conn.connection.cursor()
        try:
            read.send(cursor, params, conn)
        except BaseException:
            cursor.close()
            raise
        return _Sent(cursor, conn.dialect, read.sql, params)

    def answer(self, sent: _Sent) -> list[Sequence[Any]]:
        try:
            return self._reads[dialect_key(sent.dialect)].answer(sent.cursor, sent.params)
        finally:
            sent.cursor.close()

    def _read(self, conn: sa.Connection) -> DirectRead:
        key = dialect_key(conn.dialect)
        read = self._reads.get(key)
        if read is None:
            read = self._reads[key] = DirectRead(conn.engine, self._stmt)
        return read


def together(conn: sa.Connection,
             statements: Sequence[tuple[ReadIn | DirectWrite, dict[str, Any]]]
             ) -> list[list[Sequence[Any]]]:
    """Each statement's rows, run in ``conn``'s transaction and all sent before any
    answer is waited for: in a pipeline (PostgreSQL), one round trip for them all.
    The server runs them in this order, so their locks are taken in this order, and
    none after one that fails.  Its error is raised, but may be told with another of
    the statements' SQL (psycopg reads the answers that have come in at each send and
    each fetch)."""
    if conn.dialect.name != "postgresql":   # one by one: no statement left half-read
        return [statement.answer(statement.send(conn, params))
                for statement, params in statements]
    sent: list[tuple[ReadIn | DirectWrite, _Sent]] = []
    try:
        for statement, params in statements:
            sent.append((statement, statement.send(conn, params)))
        return [statement.answer(one) for statement, one in sent]
    finally:
        for _, one in sent:     # those not answered, after an error
            one.cursor.close()


_SHARED: dict[tuple, DirectRead] = {}


_Statement = sa.Select | sa.CompoundSelect


def shared_read(engine: sa.Engine, key: Hashable,
                statement: _Statement | Callable[[], _Statement]) -> DirectRead:
    """The read of ``statement`` (or of what it makes), compiled once per process and
    dialect: ``key`` names the statement (the same key, the same SQL), so that each
    store of a process (a test run makes thousands) does not compile it again; 30 of a
    store's 36 ms of CPU were its reads' compilation.  A read holds no engine."""
    full = (dialect_key(engine.dialect), key)
    read = _SHARED.get(full)
    if read is None:    # two threads may both compile it: either result serves
        made = statement() if callable(statement) else statement
        read = _SHARED.setdefault(full, DirectRead(engine, made))
    return read


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
