"""Fields of this package's JSON documents (batches, events), read strictly: a field of
the wrong type is a ProtocolError naming it, never a TypeError further on. ``True`` is
no integer here, though Python counts it as one."""
from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from .documents import parse_time
from .errors import ProtocolError


def document(body: bytes, what: str) -> dict[str, Any]:
    """A JSON object, or ProtocolError naming ``what`` it should have been."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:   # UnicodeDecodeError is a ValueError
        raise ProtocolError(f"{what}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"{what}: not a JSON object")
    return data


def _wrong(where: str, name: str, value: Any, kind: str) -> ProtocolError:
    shown = json.dumps(value)[:60] if _jsonable(value) else repr(value)[:60]
    return ProtocolError(f"{where}: {name!r} is not {kind}: {shown}")


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def integer(data: dict, name: str, where: str, optional: bool = False) -> int | None:
    value = data.get(name)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong(where, name, value, "an integer")
    return value


def number(data: dict, name: str, where: str, optional: bool = False) -> float | None:
    value = data.get(name)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _wrong(where, name, value, "a number")
    return float(value)


def text(data: dict, name: str, where: str, optional: bool = False) -> str | None:
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _wrong(where, name, value, "a string")
    return value


def flag(data: dict, name: str, where: str) -> bool:
    value = data.get(name, False)
    if not isinstance(value, bool):
        raise _wrong(where, name, value, "true or false")
    return value


def mapping(data: dict, name: str, where: str, optional: bool = False) -> dict | None:
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, dict):
        raise _wrong(where, name, value, "an object")
    return value


def items(data: dict, name: str, where: str) -> list[dict]:
    value = data.get(name)
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise _wrong(where, name, value, "a list of objects")
    return value


def time(data: dict, name: str) -> dt.datetime | None:
    """An optional time: one that cannot be read is missing, as in job documents."""
    value = data.get(name)
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ProtocolError:
        return None
