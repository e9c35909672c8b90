"""Text a request brings is valid Unicode, or a 400 naming where it was; and any text
is shown safely in an error message.

What can go wrong, and where it is checked:

* bytes that are not UTF-8: werkzeug replaces them with U+FFFD in the path, keeps them
  as ``%FF`` text in the query (and the form body, whose check is in uws.web.http),
  replaces them in a multipart part's RFC 2231 ``name*=``/``filename*=`` (checked in
  uws.web.incoming); the path and the query are checked here, for every request;
* lone surrogates (U+D800 to U+DFFF), which only JSON's ``\\uXXXX`` escapes can give
  (checked where the JSON is read, uws.web.batchbodies): no UTF-8 answer can carry one;
* control characters in the query: no query value takes one, a document cannot show
  one, and PostgreSQL cannot store NUL (an owner of that name was a 500).  Form and JSON
  values are judged by what they set (a parameter, a run id, a hold's reason).
"""
from __future__ import annotations

import re
from urllib.parse import quote_from_bytes, unquote_to_bytes

from ..domain.errors import BadRequest
from ..domain.model import fits_xml

_SURROGATE = re.compile("[\ud800-\udfff]")
#: what a message shows escaped: control characters but tab and newline, surrogates
_UNSHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff]")
#: a raw query with none of these is ASCII text without escapes: nothing to check
_QUERY_SUSPECT = re.compile(rb"[%\x00-\x1f\x7f-\xff]")


def shown(text: str) -> str:
    """``text`` fit for any message: control characters and surrogates as escapes."""
    return _UNSHOWN.sub(lambda found: ascii(found.group())[1:-1], text)


def check_text(value: str, field: str) -> str:
    """``value``, unless it holds a lone surrogate: BadRequest naming ``field``."""
    found = None if value.isascii() else _SURROGATE.search(value)
    if found:
        raise BadRequest(f"{shown(field)}: not valid Unicode (a lone surrogate, "
                         f"{shown(found.group())})")
    return value


def check_request(environ: dict, query: bytes) -> None:
    """400 for a path that is not UTF-8, or a query that is not UTF-8 or holds a control
    character, naming the query's field."""
    path = environ.get("PATH_INFO", "")
    if not path.isascii():
        try:    # WSGI hands the path over as latin-1 text of its bytes
            path.encode("latin-1").decode("utf-8")
        except UnicodeError:
            raise BadRequest("the URL's path is not UTF-8 once percent-decoded") from None
    if query and _QUERY_SUSPECT.search(query):
        for name, value in _pairs(query, "the query"):
            if not (fits_xml(name) and fits_xml(value)):
                raise BadRequest(f"{shown(name) or 'a field'}: a control character "
                                 "in the query (no document could show it)")


def check_utf8(raw: bytes, where: str) -> None:
    """400 naming the field of a urlencoded ``raw`` (a form body) that is not UTF-8 once
    percent-decoded: werkzeug keeps undecodable escapes such as %FF as literal text."""
    if b"%" in raw or not raw.isascii():
        for _ in _pairs(raw, where):
            pass


def _pairs(raw: bytes, where: str):
    """The (name, value) pairs of urlencoded ``raw``, decoded; BadRequest naming the
    first field that is not UTF-8."""
    for pair in raw.split(b"&"):
        name, _, value = unquote_to_bytes(pair.replace(b"+", b" ")).partition(b"=")
        try:
            yield name.decode("utf-8"), value.decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest(f"{_field(name)}: not UTF-8 once percent-decoded "
                             f"(in {where})") from None


def _field(name: bytes) -> str:
    """A field's name for a message: as the client wrote it when it is not UTF-8."""
    try:
        return shown(name.decode("utf-8")) or "a field"
    except UnicodeDecodeError:
        return quote_from_bytes(name, safe="")
