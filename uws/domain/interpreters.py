"""Which argument of a command line an interpreter runs as code.

A service's command may start an interpreter (``sh -c SCRIPT``, ``python -c CODE``,
``perl -e CODE``): a placeholder in that code would make a job's parameter value
code.  Only the options before the script or the code are read; what follows them
are the script's own arguments, whatever they look like (``tool.py -c CONFIG``).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

#: (names, option letters that take code, long options that take code)
_INTERPRETERS = (
    (re.compile(r"(?:ba|da|z|k|a|mk)?sh"), "c", ()),
    (re.compile(r"python[0-9.]*|pypy[0-9.]*"), "c", ()),
    (re.compile(r"perl[0-9.]*"), "eE", ()),
    (re.compile(r"ruby[0-9.]*|Rscript|julia|lua[0-9.]*"), "e", ("--eval",)),
    (re.compile(r"node(?:js)?"), "ep", ("--eval", "--print")),
    (re.compile(r"php[0-9.]*"), "r", ()),
)


def code_arguments(command: Sequence[str]) -> list[str]:
    """The arguments of ``command`` that an interpreter at its head (maybe through
    ``env`` or ``busybox``) runs as code."""
    words = _past_wrappers(list(command))
    options = _code_options(Path(words[0]).name) if words else None
    if options is None:
        return []
    letters, longs = options
    rest = iter(words[1:])
    for word in rest:
        if word in ("-", "--") or not word.startswith("-"):
            return []       # the script, or standard input: its arguments follow
        if word in longs or (not word.startswith("--") and word[-1] in letters):
            return [next(rest, "")]     # the code; its arguments ($0, $1...) follow
    return []


def _past_wrappers(words: list[str]) -> list[str]:
    """``env [-i] [NAME=value...] prog ...`` and ``busybox applet ...``: from ``prog``."""
    while words and Path(words[0]).name in ("env", "busybox"):
        words = words[1:]
        while words and (words[0].startswith("-") or "=" in words[0]):
            words = words[1:]
    return words


def _code_options(name: str) -> tuple[str, tuple[str, ...]] | None:
    for names, letters, longs in _INTERPRETERS:
        if names.fullmatch(name):
            return letters, longs
    return None
