"""Request parsing and response helpers shared by the routes."""
from __future__ import annotations

import json

from flask import Response, current_app, request

from ..domain.errors import BadRequest, UWSError
from .incoming import current
from .negotiation import url_root
from .texts import check_utf8

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
XML_TYPE = "text/xml; charset=utf-8"
TEXT_TYPE = "text/plain; charset=utf-8"
JSON_TYPE = "application/json"
MAX_FORM_BYTES = 1 << 20     # urlencoded bodies (uploads go in multipart ones)


class UnsupportedMediaType(UWSError):
    status = 415


def jobs_api():
    """The use-case object of this app (uws.usecases.jobs.Jobs)."""
    return current_app.extensions["uws"]


def check_form_body() -> None:
    """415 unless the body is empty or a form (what UWS clients send), unencoded."""
    has_body = (request.content_length or 0) > 0 or "chunked" in \
        request.headers.get("Transfer-Encoding", "").lower()
    if not has_body:
        return
    if request.mimetype not in FORM_TYPES:
        raise UnsupportedMediaType(
            f"unsupported body type {request.mimetype or 'unknown'!r}; "
            "send application/x-www-form-urlencoded or multipart/form-data")
    check_unencoded()


def check_unencoded() -> None:
    """415 for a compressed body: no client of ours sends one, and reading it as
    plain bytes would store garbage."""
    if (request.content_encoding or "identity").lower() != "identity":
        raise UnsupportedMediaType(f"unsupported Content-Encoding {request.content_encoding!r}")


def form_pairs(include_query: bool = True) -> list[tuple[str, str]]:
    """(name, value) pairs of the query string and the form body, in order."""
    check_form_body()
    pairs: list[tuple[str, str]] = []
    if include_query:      # its text was checked as the request came (uws.web.texts)
        pairs.extend(request.args.items(multi=True))
    if request.method in ("POST", "PUT"):
        pairs.extend(_form().items(multi=True))
    if any(not name for name, _ in pairs):
        raise BadRequest("a form field has no name")
    return pairs


def _form():
    """The parsed form body; 400 for one that cannot be parsed or decoded."""
    length = request.content_length
    if request.mimetype == FORM_TYPES[0] and length is not None and length <= MAX_FORM_BYTES:
        check_utf8(request.get_data(cache=True), "the form body")
    try:
        return request.form
    except UnicodeDecodeError:
        raise BadRequest("a form field is not UTF-8") from None
    except ValueError as exc:
        raise BadRequest(f"malformed form body: {exc}") from None


def uploads() -> dict:
    """File parts of a multipart body, by part name; empty file inputs are skipped."""
    if request.mimetype != "multipart/form-data":
        return {}
    _form()     # parses the body, or answers 400
    files = {}
    for name, part in request.files.items(multi=True):
        if not name:
            raise BadRequest("an uploaded part has no name")
        if not part.filename and part.content_length in (0, None) and _empty(part):
            continue
        if name in files:
            raise BadRequest(f"{name}: more than one file uploaded")
        files[name] = part
    return files


def _empty(part) -> bool:
    head = part.stream.read(1)
    part.stream.seek(0)
    return not head


def split_control(pairs, names) -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """Take the (case-insensitive) control names out of ``pairs``."""
    control: dict[str, list[str]] = {}
    rest = []
    for name, value in pairs:
        key = name.upper()
        if key in names:
            control.setdefault(key, []).append(value)
        else:
            rest.append((name, value))
    return control, rest


def single(control: dict, name: str) -> str | None:
    values = control.get(name)
    if not values:
        return None
    if len(set(values)) > 1:
        raise BadRequest(f"{name}: given more than once with different values")
    return values[0]


def query_values(name: str) -> list[str]:
    """Values of a query parameter, its name matched case-insensitively."""
    return list(current().query_index.get(name.upper(), ()))


def query_value(name: str) -> str | None:
    values = query_values(name)
    if len(values) > 1:
        raise BadRequest(f"{name}: given more than once")
    return values[0] if values else None


def base_url() -> str:
    """``[server] public_url``, else scheme://host[:port]/prefix/ exactly as the client
    addressed us (a Host this server answers to: see uws.http.hosts)."""
    return jobs_api().config.public_url or url_root() or request.url_root


def job_url(service: str, job_id: str) -> str:
    return f"{base_url()}{service}/{job_id}"


def see_other(location: str) -> Response:
    return Response(f"See {location}\n", status=303, headers={"Location": location},
                    content_type=TEXT_TYPE)


def xml(body, status: int = 200, headers=None) -> Response:
    return Response(body, status=status, content_type=XML_TYPE, headers=headers)


def json_response(doc, status: int = 200, headers=None) -> Response:
    """``doc`` (dicts, lists, strings, numbers, None) as an application/json body."""
    body = json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n"
    return Response(body, status=status, content_type=JSON_TYPE, headers=headers)


def json_stream(body, status: int = 200, headers=None) -> Response:
    """A JSON body already encoded (bytes, or an iterator of chunks to stream)."""
    return Response(body, status=status, content_type=JSON_TYPE, headers=headers)


def text(body: str, status: int = 200, headers=None) -> Response:
    return Response(body, status=status, content_type=TEXT_TYPE, headers=headers)
