"""The body of a batch creation: parameter sets from JSON or CSV, and its control values.

* ``application/json``: an array of objects (one per job) mapping a parameter name to
  a value or a list of values (strings, numbers, booleans; null omits the name), or an
  object ``{"jobs": [...], "runId": "...", "phase": "RUN", "callback": "https://..."}``.
  Its strings are valid Unicode: a ``\\ud800`` escape, a lone surrogate, is refused.
* ``text/csv`` (the body), or a multipart form with one file part holding the CSV: a
  header row of parameter names (a name repeated for a multi-valued parameter), then one
  row per job; an empty cell omits the name, so its default applies.

Rows are counted from 1 in the order given.  The body is read up to MAX_BATCH_BYTES.
"""
from __future__ import annotations

import csv
import io
import json
from typing import Any

from flask import request

from ..domain.errors import BadRequest, TooLarge
from .http import UnsupportedMediaType, check_unencoded, form_pairs, split_control, uploads
from .texts import check_text

MAX_BATCH_BYTES = 32 << 20
CONTROL = frozenset({"PHASE", "RUNID", "CALLBACK"})
JSON_KEYS = {"jobs", "runId", "phase", "callback"}

Rows = list[list[tuple[str, str]]]


def read_batch() -> tuple[Rows, dict[str, list[str]]]:
    """The parameter sets of this request, and its control values (PHASE, RUNID, CALLBACK) from
    the query string and the body.  BadRequest, TooLarge or UnsupportedMediaType."""
    check_unencoded()
    if request.mimetype == "multipart/form-data":
        return _multipart()
    control, rest = split_control(request.args.items(multi=True), CONTROL)
    _refuse_fields(rest)
    if request.mimetype == "application/json":
        rows, given = _json_rows(_parse_json(_bounded(request.stream)))
        for name, value in given.items():
            control.setdefault(name, []).append(value)
        return rows, control
    if request.mimetype == "text/csv":
        return csv_rows(_text(_bounded(request.stream))), control
    raise UnsupportedMediaType(f"unsupported body type {request.mimetype or 'unknown'!r}; send "
                               "application/json, text/csv, or a CSV file in multipart/form-data")


def _multipart() -> tuple[Rows, dict[str, list[str]]]:
    control, rest = split_control(form_pairs(), CONTROL)
    _refuse_fields(rest)
    files = list(uploads().values())
    if len(files) != 1:
        raise BadRequest(f"send one CSV file in the form, not {len(files)}")
    return csv_rows(_text(_bounded(files[0].stream))), control


def _refuse_fields(pairs) -> None:
    if pairs:
        raise BadRequest(f"{pairs[0][0]}: parameters go in the batch's rows, not the query "
                         "string or the form")


def _bounded(stream) -> bytes:
    data = stream.read(MAX_BATCH_BYTES + 1)
    if len(data) > MAX_BATCH_BYTES:
        raise TooLarge(f"a batch body has at most {MAX_BATCH_BYTES} bytes")
    return data


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise BadRequest("the CSV is not UTF-8") from None


def _parse_json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None


def _json_rows(doc: Any) -> tuple[Rows, dict[str, str]]:
    """Rows, and the control values of the object form."""
    control: dict[str, str] = {}
    if isinstance(doc, dict):
        unknown = sorted(set(doc) - JSON_KEYS)
        if unknown:
            raise BadRequest(f"{unknown[0]}: not a key of a batch (jobs, runId, phase, "
                             "callback)")
        for key, name in (("runId", "RUNID"), ("phase", "PHASE"), ("callback", "CALLBACK")):
            value = doc.get(key)
            if value is not None and not isinstance(value, str):
                raise BadRequest(f"{key}: must be a string")
            if value is not None:
                control[name] = check_text(value, key)
        doc = doc.get("jobs")
    if not isinstance(doc, list):
        raise BadRequest("a batch is a JSON array of parameter objects, or an object whose "
                         "'jobs' is one")
    return [_json_row(number, item) for number, item in enumerate(doc, 1)], control


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


def csv_rows(text: str) -> Rows:
    """Rows of a CSV whose first row names the parameters; blank lines are skipped."""
    try:
        lines = [line for line in csv.reader(io.StringIO(text, newline="")) if line]
    except csv.Error as exc:
        raise BadRequest(f"malformed CSV: {exc}") from None
    if not lines:
        raise BadRequest("the CSV has no header row")
    header = [name.strip() for name in lines[0]]
    if not all(header):
        raise BadRequest("the CSV header has an empty column name")
    rows = []
    for number, cells in enumerate(lines[1:], 1):
        if len(cells) > len(header):
            raise BadRequest(f"row {number}: {len(cells)} values for {len(header)} columns")
        rows.append([(name, cell) for name, cell in zip(header, cells) if cell != ""])
    return rows
