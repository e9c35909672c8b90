"""The body of a batch creation: parameter sets from JSON or CSV, and its control values.

* ``application/json``: an array of objects (one per job) mapping a parameter name to
  a value or a list of values (strings, numbers, booleans; null omits the name), or an
  object ``{"jobs": [...], "runId": "...", "phase": "RUN", "callback": "https://..."}``.
  Its strings are valid Unicode: a ``\\ud800`` escape, a lone surrogate, is refused.
* ``text/csv`` (the body), or a multipart form with one file part holding the CSV: a
  header row of parameter names (a name repeated for a multi-valued parameter), then one
  row per job; an empty cell omits the name, so its default applies.

Rows are counted from 1 in the order given.  The body is read as it is parsed, and what
it may cost is bounded as it is read (413 past a bound, see Budget): MAX_BATCH_BYTES in
all, one row past the service's ``max_batch_jobs`` (a body of millions of tiny rows is
refused once that row is read, never held or expanded whole), ROW_CHARS of text a row
and MAX_BATCH_VALUES values in all (a few rows of millions of values each), and
BLANK_LINES of a CSV.  Errors are met in the body's order (a malformed row past a bound
is never seen).  At most ``server.batch_parses`` bodies are parsed at once (ParseSlots).
"""
from __future__ import annotations

import contextlib
import csv
import io
import threading
from collections.abc import Iterator
from typing import Any

from flask import request

from ..domain.errors import BadRequest, TooLarge
from ..domain.services import Service
from .http import (
    MAX_FORM_BYTES,
    UnsupportedMediaType,
    check_unencoded,
    form_pairs,
    split_control,
    uploads,
)
from .jsonstream import JsonStream, TooLong
from .passwords import Busy
from .texts import check_text

MAX_BATCH_BYTES = 32 << 20
#: Text of one row (a JSON element, a CSV record): a single creation's form body has at
#: most as much (uws.web.http.MAX_FORM_BYTES).
ROW_CHARS = MAX_FORM_BYTES
#: Parameter values of all rows: 26 a job at 10 000 jobs.  Each becomes a pair here
#: (about 100 bytes) before the use case validates any, so this bounds what a body of
#: many values takes (2-byte ones: 16 M in 32 MiB, over 4 GB) to tens of MiB.
MAX_BATCH_VALUES = 1 << 18
#: Blank lines of a CSV, skipped (a few ms of CPU); more is padding, not rows.
BLANK_LINES = 1 << 16
#: Seconds a batch body waits for a parse slot before 503: long enough for a parse at
#: the limits to end (well under a second), short enough not to pile up threads.
PARSE_WAIT = 2.0
CONTROL = frozenset({"PHASE", "RUNID", "CALLBACK"})
JSON_KEYS = {"jobs", "runId", "phase", "callback"}

Rows = list[list[tuple[str, str]]]


class ParseSlots:
    """At most ``count`` batch bodies parsed at once in this process: each may take a
    few MiB and a CPU for up to a second, so many at once would starve other requests."""

    def __init__(self, count: int):
        self._slots = threading.BoundedSemaphore(count)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A slot for the block, waited for up to PARSE_WAIT seconds; else Busy (503)."""
        if not self._slots.acquire(timeout=PARSE_WAIT):
            raise Busy("too many batch bodies are being read at once; try again shortly", 1)
        try:
            yield
        finally:
            self._slots.release()


def read_batch(service: Service) -> tuple[Rows, dict[str, list[str]]]:
    """The parameter sets of this request, and its control values (PHASE, RUNID, CALLBACK) from
    the query string and the body.  BadRequest, TooLarge (past MAX_BATCH_BYTES, or more rows
    than ``service.max_batch_jobs``) or UnsupportedMediaType."""
    check_unencoded()
    limit = Budget(service)
    if request.mimetype == "multipart/form-data":
        return _multipart(limit)
    control, rest = split_control(request.args.items(multi=True), CONTROL)
    _refuse_fields(rest)
    if request.mimetype == "application/json":
        rows, given = _json_body(_request_body(), limit)
        for name, value in given.items():
            control.setdefault(name, []).append(value)
        return rows, control
    if request.mimetype == "text/csv":
        return csv_rows(_request_body(), limit), control
    raise UnsupportedMediaType(f"unsupported body type {request.mimetype or 'unknown'!r}; send "
                               "application/json, text/csv, or a CSV file in multipart/form-data")


def _multipart(limit: Budget) -> tuple[Rows, dict[str, list[str]]]:
    control, rest = split_control(form_pairs(), CONTROL)
    _refuse_fields(rest)
    files = list(uploads().values())
    if len(files) != 1:
        raise BadRequest(f"send one CSV file in the form, not {len(files)}")
    return csv_rows(CappedBody(files[0].stream), limit), control


def _refuse_fields(pairs) -> None:
    if pairs:
        raise BadRequest(f"{pairs[0][0]}: parameters go in the batch's rows, not the query "
                         "string or the form")


def _request_body() -> CappedBody:
    """The request's body, refused at once when it says it is too large."""
    if (request.content_length or 0) > MAX_BATCH_BYTES:
        raise _too_big()
    return CappedBody(request.stream)


def _too_big() -> TooLarge:
    return TooLarge(f"a batch body has at most {MAX_BATCH_BYTES} bytes")


class Budget:
    """What a body may still take as it is read; TooLarge (413) past it."""

    def __init__(self, service: Service):
        self.name, self.most = service.name, service.max_batch_jobs
        self.values = 0
        self.blank_lines = 0

    def row(self, number: int) -> None:
        """Row ``number`` was read: one past ``max_batch_jobs`` ends the reading."""
        if number > self.most:
            raise TooLarge(f"a batch of {self.name!r} has at most {self.most} jobs; "
                           f"this one has more (reading stopped at row {number})")

    def add_values(self, count: int) -> None:
        self.values += count
        if self.values > MAX_BATCH_VALUES:
            raise TooLarge(f"a batch body has at most {MAX_BATCH_VALUES} parameter values "
                           "in all")

    def blank_line(self) -> None:
        self.blank_lines += 1
        if self.blank_lines > max(BLANK_LINES, self.most + 1):
            raise TooLarge(f"a batch CSV has at most {max(BLANK_LINES, self.most + 1)} "
                           "blank lines")


def _row_too_long(number: int) -> TooLarge:
    row = f"row {number}" if number else "the header row"
    return TooLarge(f"{row}: more than {ROW_CHARS} characters (a job's parameters take at "
                    "most as much as a single creation's form)")


class CappedBody(io.RawIOBase):
    """A body stream read in pieces; TooLarge once more than MAX_BATCH_BYTES come."""

    def __init__(self, stream):
        super().__init__()
        self._stream = stream
        self._seen = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._stream.read(min(len(buffer), MAX_BATCH_BYTES + 1 - self._seen))
        self._seen += len(data)
        if self._seen > MAX_BATCH_BYTES:
            raise _too_big()
        buffer[:len(data)] = data
        return len(data)


# -- JSON ------------------------------------------------------------------------------------

def _json_body(body: CappedBody, limit: Budget) -> tuple[Rows, dict[str, str]]:
    """Rows, and the control values of the object form."""
    doc = JsonStream(body.read)
    try:
        first = doc.peek()
        if first == "[":
            rows: Rows | None = _json_array(doc, limit)
            fields: dict[str, Any] = {}
        elif first == "{":
            rows, fields = _json_object(doc, limit)
        else:
            doc.value(ROW_CHARS)    # a malformed body says so first
            rows, fields = None, {}
        doc.end()
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    except TooLong:         # a value of the object form besides its rows
        raise TooLarge(f"a member of the batch object has more than {ROW_CHARS} "
                       "characters") from None
    control = _json_control(fields)
    if rows is None:
        raise BadRequest("a batch is a JSON array of parameter objects, or an object whose "
                         "'jobs' is one")
    return rows, control


def _json_array(doc: JsonStream, limit: Budget) -> Rows:
    """The rows of an array whose "[" is next, each converted as soon as it is read."""
    doc.take("[", "'['")
    rows: Rows = []
    if doc.peek() == "]":
        doc.take("]", "']'")
        return rows
    while True:
        number = len(rows) + 1
        try:
            item = doc.value(ROW_CHARS)
        except TooLong:
            raise _row_too_long(number) from None
        limit.row(number)
        rows.append(_json_row(number, item))
        limit.add_values(len(rows[-1]))
        if doc.take(",]", "',' delimiter") == "]":
            return rows


def _json_object(doc: JsonStream, limit: Budget) -> tuple[Rows | None, dict[str, Any]]:
    """The object form: its rows (None when "jobs" is no array) and its other members."""
    doc.take("{", "'{'")
    rows: Rows | None = None
    fields: dict[str, Any] = {}
    if doc.peek() == "}":
        doc.take("}", "'}'")
        return rows, fields
    while True:
        if doc.peek() != '"':
            doc.take('"', "property name enclosed in double quotes")
        key = doc.value(ROW_CHARS)
        doc.take(":", "':' delimiter")
        if key == "jobs" and doc.peek() == "[":
            rows, fields[key] = _json_array(doc, limit), None
        else:
            fields[key] = doc.value(ROW_CHARS)
            if key == "jobs":       # the last of repeated keys counts, as in json.loads
                rows = None
        if doc.take(",}", "',' delimiter") == "}":
            return rows, fields


def _json_control(fields: dict[str, Any]) -> dict[str, str]:
    unknown = sorted(set(fields) - JSON_KEYS)
    if unknown:
        raise BadRequest(f"{unknown[0]}: not a key of a batch (jobs, runId, phase, callback)")
    control: dict[str, str] = {}
    for key, name in (("runId", "RUNID"), ("phase", "PHASE"), ("callback", "CALLBACK")):
        value = fields.get(key)
        if value is not None and not isinstance(value, str):
            raise BadRequest(f"{key}: must be a string")
        if value is not None:
            control[name] = check_text(value, key)
    return control


def _json_row(number: int, item: Any) -> list[tuple[str, str]]:
    if not isinstance(item, dict):
        raise BadRequest(f"row {number}: must be an object of parameter names and values")
    pairs = []
    for name, value in item.items():
        check_text(name, f"row {number}: a parameter name")
        for one in value if isinstance(value, list) else [value]:
            if one is None:
                continue
            if isinstance(one, bool):
                pairs.append((name, "true" if one else "false"))
            elif isinstance(one, str):
                pairs.append((name, check_text(one, f"row {number}: {name}")))
            elif isinstance(one, (int, float)):
                pairs.append((name, str(one)))
            else:
                raise BadRequest(f"row {number}: {name}: a value is a string, a number or a "
                                 "boolean (or a list of them)")
    return pairs


# -- CSV -------------------------------------------------------------------------------------

class _Lines:
    """The lines of a CSV body as text, decoded as they are read; each record (one line,
    or more when a quoted value holds line breaks) at most ROW_CHARS characters."""

    def __init__(self, body: CappedBody):
        self._text = io.TextIOWrapper(io.BufferedReader(body), encoding="utf-8-sig",
                                      newline="")
        self.record = 1     # the number of the record being read (the header is 0)
        self._chars = 0     # characters of it so far

    def next_record(self, number: int) -> None:
        self.record, self._chars = number, 0

    def __iter__(self) -> Iterator[str]:
        while True:
            try:
                line = self._text.readline(ROW_CHARS + 1 - self._chars)
            except UnicodeDecodeError:
                raise BadRequest("the CSV is not UTF-8") from None
            if not line:
                return
            self._chars += len(line)
            if self._chars > ROW_CHARS:
                raise _row_too_long(self.record)
            yield line


def csv_rows(body: CappedBody, limit: Budget) -> Rows:
    """Rows of a CSV whose first row names the parameters; blank lines are skipped."""
    lines = _Lines(body)
    lines.next_record(0)
    records = csv.reader(lines)
    try:
        header = [name.strip() for name in _next_record(records, lines, limit) or []]
        if not header:
            raise BadRequest("the CSV has no header row")
        if not all(header):
            raise BadRequest("the CSV header has an empty column name")
        rows: Rows = []
        while True:
            lines.next_record(len(rows) + 1)
            cells = _next_record(records, lines, limit)
            if cells is None:
                return rows
            number = len(rows) + 1
            limit.row(number)
            if len(cells) > len(header):
                raise BadRequest(f"row {number}: {len(cells)} values for {len(header)} "
                                 "columns")
            rows.append([(name, cell) for name, cell in zip(header, cells) if cell != ""])
            limit.add_values(len(rows[-1]))
    except csv.Error as exc:
        raise BadRequest(f"malformed CSV: {exc}") from None


def _next_record(records, lines: _Lines, limit: Budget) -> list[str] | None:
    """The next record that is not a blank line; None at the end."""
    for cells in records:
        if cells:
            return cells
        limit.blank_line()
        lines.next_record(lines.record)     # a blank line is no part of the next row
    return None
