"""Response headers set on every answer, cheaply."""
from __future__ import annotations

from werkzeug.datastructures import Headers


def add_missing(headers: Headers, pairs) -> None:
    """``headers.setdefault`` for each (name, value) of ``pairs``, in one pass over the
    headers: werkzeug's setdefault raises and catches a KeyError for each absent name,
    which costs more than the rest of it."""
    present = {name.lower() for name, _ in headers}
    for name, value in pairs:
        if name.lower() not in present:
            headers.add(name, value)
