"""Strict reading of configuration tables into dataclasses.

A dataclass declares a table's shape once: its fields are the keys, their
annotations the types, and ``field(metadata=...)`` the rest:

``key``      the key's name in the table when it differs from the field's
``min``, ``max``, ``choices``   bounds and allowed values
``read``     a function turning the raw value into the field's value
             (ValueError or TypeError with a message when it cannot)
``table``    the sub-table a field of a flat dataclass is read from
``skip``     not read from the table (filled in by the caller)

Unknown keys and values of the wrong type are refused with a
:class:`ShapeError` naming the key's full path, so a mistake in a file stops
the server at start instead of misbehaving later.
"""
from __future__ import annotations

import dataclasses
import functools
import types
import typing
from pathlib import Path


class ShapeError(ValueError):
    """A value that does not fit its declared shape; ``where`` is its key path."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}" if where else problem)
        self.where = where
        self.problem = problem


def read(cls, table, where: str, **given):
    """An instance of dataclass ``cls`` from TOML ``table``; ``given`` fills skipped fields."""
    if not isinstance(table, dict):
        raise ShapeError(where, f"must be a table, not {_kind(table)}")
    fields = {_key(f): f for f in readable_fields(cls)}
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise ShapeError(_join(where, unknown[0]),
                         f"unknown key; expected one of {', '.join(sorted(fields))}")
    values = {f.name: value_of(f, table[key], _join(where, key), cls)
              for key, f in fields.items() if key in table}
    try:
        return cls(**values, **given)
    except (ValueError, TypeError) as exc:
        raise ShapeError(where, str(exc)) from None


def readable_fields(cls, table: str | None = None) -> list[dataclasses.Field]:
    """The fields of ``cls`` read from a file (those of sub-table ``table`` if given)."""
    return [f for f in dataclasses.fields(cls)
            if not f.metadata.get("skip") and f.metadata.get("table") == table]


def value_of(field: dataclasses.Field, raw, where: str, owner):
    """The checked value of ``raw`` for ``field`` of dataclass ``owner``."""
    meta = field.metadata
    try:
        value = meta["read"](raw) if "read" in meta else _typed(_hints(owner)[field.name], raw, where)
    except ShapeError:
        raise
    except (ValueError, TypeError) as exc:
        raise ShapeError(where, str(exc)) from None
    _check_bounds(meta, value, where)
    return value


def parse_text(field: dataclasses.Field, text: str, where: str, owner, true_words, false_words):
    """The value of ``field`` from text (an environment variable)."""
    kind = _hints(owner)[field.name]
    raw: object
    try:
        if kind is int:
            raw = int(text.strip())
        elif kind is bool:
            word = text.strip().lower()
            if word not in true_words | false_words:
                raise ValueError(f"not a boolean (true/false): {text!r}")
            raw = word in true_words
        else:
            raw = text
    except ValueError as exc:
        message = str(exc) if kind is bool else f"not a whole number: {text!r}"
        raise ShapeError(where, message) from None
    return value_of(field, raw, where, owner)


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _typed(kind, raw, where: str):
    """``raw`` checked against annotation ``kind`` (TOML's types only)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if raw is None and type(None) in args:
            return None
        (kind,) = [a for a in args if a is not type(None)]
        return _typed(kind, raw, where)
    if dataclasses.is_dataclass(kind):
        return read(kind, raw, where)
    if origin in (tuple, frozenset):
        if not isinstance(raw, list):
            what = "an array of tables ([[...]])" if dataclasses.is_dataclass(args[0]) else "an array"
            raise ShapeError(where, f"must be {what}, not {_kind(raw)}{_shown(raw)}")
        items = [_typed(args[0], item, f"{where}[{i}]") for i, item in enumerate(raw)]
        return origin(items)
    if origin is dict:
        if not isinstance(raw, dict):
            raise ShapeError(where, f"must be a table, not {_kind(raw)}")
        return {key: _typed(args[1], value, _join(where, key)) for key, value in raw.items()}
    return _scalar(kind, raw, where)


def _scalar(kind, raw, where: str):
    if kind is float and isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return raw      # a whole number stays one (shown as 1, not 1.0)
    if kind is Path and isinstance(raw, (str, Path)):
        return Path(raw)
    # bool is an int in Python but never in a configuration file
    if type(raw) is not kind:
        raise ShapeError(where, f"must be {_NAMES.get(kind, kind.__name__)}, "
                                f"not {_kind(raw)}{_shown(raw)}")
    return raw


def _check_bounds(meta, value, where: str) -> None:
    if "choices" in meta:
        for item in value if isinstance(value, (tuple, frozenset)) else (value,):
            if item not in meta["choices"]:
                raise ShapeError(where, f"{item!r} is not one of {', '.join(meta['choices'])}")
    if "min" in meta and value < meta["min"]:
        raise ShapeError(where, f"must be at least {meta['min']}, not {value}")
    if "max" in meta and value > meta["max"]:
        raise ShapeError(where, f"must be at most {meta['max']}, not {value}")


_NAMES = {str: "a string", int: "a whole number", float: "a number", bool: "true or false",
          Path: "a path (a string)"}


def _kind(raw) -> str:
    names = {str: "a string", int: "a whole number", float: "a number", bool: "a boolean",
             list: "an array", dict: "a table"}
    return names.get(type(raw), type(raw).__name__)


def _shown(raw) -> str:
    return "" if isinstance(raw, (dict, list)) else f" ({raw!r})"


def _key(field: dataclasses.Field) -> str:
    return field.metadata.get("key", field.name)


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key
