"""UTC instants: the one place that formats and parses ISO 8601.

Inside the server every instant is a naive ``datetime`` in UTC (what both
SQLite and PostgreSQL store without surprises).  On the wire it is always
``YYYY-MM-DDThh:mm:ss.sssZ`` (UWS 1.1 §2.2.1), never ``+00:00``.
"""
from __future__ import annotations

import datetime as _dt
import re

UTC = _dt.UTC
# What datetime.fromisoformat does not read: reduced precision (a year, a
# month) and ordinal dates, extended or basic.  Each means its first instant.
_YEAR_MONTH = re.compile(r"(\d{4})(?:-(\d{2}))?")
_ORDINAL = re.compile(r"(\d{4})-?(\d{3})")


def now() -> _dt.datetime:
    """The current instant (microseconds kept: they order jobs created in one ms)."""
    return _dt.datetime.now(UTC).replace(tzinfo=None)


def next_millisecond(value: _dt.datetime) -> _dt.datetime:
    """The first whole millisecond after ``value``.

    Times are shown to the millisecond, so "shown time > t" is exactly
    "stored time >= next_millisecond(t)": AFTER=<a creationTime seen in a
    list> then excludes that very job.
    """
    floor = value.replace(microsecond=value.microsecond - value.microsecond % 1000)
    try:
        return floor + _dt.timedelta(milliseconds=1)
    except OverflowError:
        return _dt.datetime.max


def format_time(value: _dt.datetime | None) -> str:
    if value is None:
        return ""
    return value.isoformat(timespec="milliseconds") + "Z"


def parse_time(text: str) -> _dt.datetime:
    """Parse an ISO 8601 instant leniently; a missing zone means UTC.

    Accepts what clients send: ``...Z``, six-digit fractions (pyvo), no zone
    (uws-client), explicit offsets, a space instead of ``T``, a bare date, the
    basic format (``20151026T1010Z``), and reduced precision: ``2015`` and
    ``2015-10`` are the first instant of that year or month (UTC).
    Raises ValueError with a readable message.
    """
    s = text.strip()
    if not s:
        raise ValueError("empty time")
    if not s.isascii():     # "２０１５": other scripts' digits are not ISO 8601's
        raise ValueError(f"not an ISO 8601 time: {text!r}")
    if s[-1] in "zZ":
        s = s[:-1] + "+00:00"
    try:
        value = _reduced(s) or _dt.datetime.fromisoformat(s)
    except ValueError:
        raise ValueError(f"not an ISO 8601 time: {text!r}") from None
    if value.tzinfo is not None:
        try:
            value = value.astimezone(UTC).replace(tzinfo=None)
        except OverflowError:
            raise ValueError(f"time out of range: {text!r}") from None
    return value


def _reduced(s: str) -> _dt.datetime | None:
    """A year, a year and month, or an ordinal date; None for other forms."""
    if match := _YEAR_MONTH.fullmatch(s):
        return _dt.datetime(int(match[1]), int(match[2] or 1), 1)
    if match := _ORDINAL.fullmatch(s):
        day = int(match[2])
        if not 1 <= day <= 366:
            raise ValueError(s)
        start = _dt.datetime(int(match[1]), 1, 1)
        value = start + _dt.timedelta(days=day - 1)
        if value.year != start.year:
            raise ValueError(s)
        return value
    return None


def add_seconds(value: _dt.datetime, seconds: float) -> _dt.datetime:
    try:
        return value + _dt.timedelta(seconds=seconds)
    except OverflowError:
        return _dt.datetime.max.replace(microsecond=0)
