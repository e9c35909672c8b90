"""When and in which order queued jobs start: PRIORITY, STARTAFTER and retries.

Pure rules over a service's declarations and the caller; no HTTP and no SQL.
The store applies them in its conditional updates.
"""
from __future__ import annotations

import dataclasses
import datetime as dt

from . import numbers, timeutil
from .errors import BadRequest

#: What an administrator may give as PRIORITY, whatever the service declares.
ADMIN_PRIORITY_LIMIT = 1_000_000


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The PRIORITY and STARTAFTER a request asks for (None: unchanged)."""
    priority: int | None = None
    start_after: dt.datetime | None = None

    @property
    def empty(self) -> bool:
        return self.priority is None and self.start_after is None


def parse_priority(text: str) -> int:
    """An integer; BadRequest otherwise."""
    try:
        return numbers.integer(text)
    except ValueError as exc:
        raise BadRequest(f"PRIORITY: {exc}") from None


def check_priority(value: int, low: int, high: int, admin: bool) -> int:
    """``value`` if the caller may ask for it: an owner within the service's
    bounds, an administrator within :data:`ADMIN_PRIORITY_LIMIT`."""
    if admin:
        low, high = -ADMIN_PRIORITY_LIMIT, ADMIN_PRIORITY_LIMIT
    if not low <= value <= high:
        raise BadRequest(f"PRIORITY: must be between {low} and {high}, not {value}")
    return value


def parse_start_after(text: str) -> dt.datetime:
    """An ISO 8601 time (reduced precision accepted); BadRequest otherwise."""
    try:
        return timeutil.parse_time(text)
    except ValueError as exc:
        raise BadRequest(f"STARTAFTER: {exc}") from None


def backoff_seconds(attempt: int, base: float, limit: float) -> float:
    """The wait before attempt ``attempt + 1`` after ``attempt`` failed: ``base``
    doubled per attempt after the first, at most ``limit``."""
    return min(limit, base * 2 ** max(0, attempt - 1))
