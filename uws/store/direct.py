"""Reads run on the database driver's cursor directly, for the hottest queries.

A :class:`DirectRead` is a SELECT compiled once for the engine's dialect: the same
SQL and the same conversions of values as SQLAlchemy's own execution, without its
per-statement bookkeeping, which costs more than SQLite's work on a read by primary
key (a job read: 80 µs through SQLAlchemy, 30 µs directly).  Writes stay with
SQLAlchemy, whose transactions the rest of the store relies on.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa


class DirectRead:
    def __init__(self, engine: sa.Engine, stmt: sa.Select | sa.CompoundSelect):
        dialect = engine.dialect
        compiled = stmt.compile(dialect=dialect)
        self.sql = compiled.string
        self.names = [str(c.key) for c in stmt.selected_columns]
        self._dialect = dialect
        self._impls = [c.type.dialect_impl(dialect) for c in stmt.selected_columns]
        # (column index, conversion) of the columns that need one, known at the first
        # execution (type codes)
        self._convert: list[tuple[int, Any]] | None = None
        self._defaults = {name: bind.value for name, bind in compiled.binds.items()}
        self._bind_convert: dict[str, Any] = {}
        for name, bind in compiled.binds.items():
            if bind.expanding or bind.literal_execute:
                raise ValueError(f"{name}: only plain parameters are read directly")
            to_driver = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if to_driver is not None:
                self._bind_convert[name] = to_driver
        order = compiled.positiontup
        self._order = list(order) if dialect.positional and order is not None else None

    def rows(self, cursor, params: dict[str, Any]) -> list[Sequence[Any]]:
        """The rows for ``params`` (values by parameter name; unused names are
        ignored), each value converted as SQLAlchemy would."""
        values = {**self._defaults, **params}
        for name, to_driver in self._bind_convert.items():
            if values[name] is not None:
                values[name] = to_driver(values[name])
        cursor.execute(self.sql, values if self._order is None
                       else tuple(values[name] for name in self._order))
        rows = cursor.fetchall()
        convert = self._convert
        if convert is None:     # PostgreSQL's numeric conversions depend on the type code
            convert = self._convert = [
                (i, f) for i, f in enumerate(
                    impl.result_processor(self._dialect, column[1])
                    for impl, column in zip(self._impls, cursor.description)) if f is not None]
        if not convert:
            return rows
        out: list[Sequence[Any]] = []
        for row in rows:
            converted = list(row)
            for i, f in convert:
                if converted[i] is not None:
                    converted[i] = f(converted[i])
            out.append(converted)
        return out

    def mappings(self, cursor, params: dict[str, Any]) -> list[dict[str, Any]]:
        return [dict(zip(self.names, row)) for row in self.rows(cursor, params)]


@contextlib.contextmanager
def cursor(engine: sa.Engine) -> Iterator[Any]:
    """A driver cursor on a pooled connection, given back (rolled back) afterwards."""
    conn = engine.raw_connection()
    try:
        cur = conn.cursor()
        try:
            yield cur
        finally:
            cur.close()
    finally:
        conn.close()
