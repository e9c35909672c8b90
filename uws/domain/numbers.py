"""Numbers as clients send them: ASCII digits, as DALI and UWS write them.

Python's int() and float() also read other scripts' digits ("１"), underscores
("1_000") and surrounding whitespace.  A parameter is passed on to its job
exactly as sent, so what passes the check must be what any program reads.
"""
from __future__ import annotations

import re

_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def integer(text: str) -> int:
    """``text`` as an integer: an optional sign and ASCII digits; ValueError otherwise."""
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"not an integer: {text!r}")
    return int(text)


def decimal(text: str) -> float:
    """``text`` as a number written with a sign, digits, a point and an exponent;
    ValueError otherwise ("nan" and "inf" are words, not numbers).  An exponent past
    a float's range reads as infinity: callers that need a finite value check it."""
    if not _DECIMAL.fullmatch(text):
        raise ValueError(f"not a number: {text!r}")
    return float(text)
