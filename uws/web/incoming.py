"""The request class: strict form parsing, and what each request works out once.

Helpers read these through :func:`current` (one context look-up) rather than
through Flask's ``request`` proxy, which costs a look-up at every attribute.
"""
from __future__ import annotations

import codecs
import functools
import re
import time
from typing import TYPE_CHECKING
from urllib.parse import unquote_to_bytes

from flask import Request, request
from werkzeug.formparser import FormDataParser, MultiPartParser
from werkzeug.http import parse_options_header

from ..domain.errors import BadRequest

if TYPE_CHECKING:
    from ..domain.model import Caller


#: A codec that decodes UTF-8 strictly whatever error handling its caller asks for:
#: werkzeug decodes multipart text fields with "replace", which would store U+FFFD.
STRICT_UTF8 = "uws_strict_utf8"


def _find_codec(name: str):
    if name != STRICT_UTF8:
        return None
    return codecs.CodecInfo(name=STRICT_UTF8, encode=codecs.utf_8_encode,
                            decode=lambda data, errors="strict": codecs.utf_8_decode(
                                data, "strict", True))


codecs.register(_find_codec)


class StrictMultiPartParser(MultiPartParser):
    def get_part_charset(self, headers) -> str:
        _check_disposition(headers)
        charset = super().get_part_charset(headers)
        return STRICT_UTF8 if charset == "utf-8" else charset

    def start_file_streaming(self, event, total_content_length):
        _check_disposition(event.headers)
        return super().start_file_streaming(event, total_content_length)


#: An RFC 2231 parameter (``filename*=utf-8''%C3%A9``, ``name*0*=...``): its key, and its
#: value, percent-encoded, after any charset'language' prefix.
_EXTENDED = re.compile(r"([\w!#$%&'+\-.^`|~]+)\*(?:\d+\*)?=([\w!#$%&'*+\-.^`|~]+)", re.ASCII)
_CHARSET = re.compile(r"([\w!#$%&*+\-.^`|~]*)'[\w!#$%&*+\-.^`|~]*'(.+)", re.ASCII)
#: the charsets werkzeug decodes such values from (replacing what they cannot decode)
_DECODED = {"ascii", "us-ascii", "utf-8"}


def _check_disposition(headers) -> None:
    """400 for a part whose name or filename werkzeug decoded from RFC 2231 bytes that
    are not in their charset: it puts U+FFFD in their place, a name nobody sent."""
    raw = headers.get("content-disposition", "")
    if "*" not in raw:
        return
    options = parse_options_header(raw)[1]
    if not any("\ufffd" in options.get(key, "") for key in ("name", "filename")):
        return
    charsets: dict[str, str] = {}
    for key, value in _EXTENDED.findall(raw):
        given = _CHARSET.fullmatch(value)
        if given:
            charsets[key], value = given.group(1).lower(), given.group(2)
        charset = charsets.get(key, "")
        try:
            if charset in _DECODED:
                unquote_to_bytes(value).decode(charset)
        except UnicodeDecodeError:
            raise BadRequest(f"a multipart part's {key} is not {charset} once "
                             "percent-decoded") from None


class StrictFormDataParser(FormDataParser):
    """werkzeug's parser, with multipart text fields that must be UTF-8 (or declare
    another charset werkzeug knows)."""

    def _parse_multipart(self, stream, mimetype, content_length, options):
        parser = StrictMultiPartParser(stream_factory=self.stream_factory, cls=self.cls,
                                       max_form_memory_size=self.max_form_memory_size,
                                       max_form_parts=self.max_form_parts)
        boundary = options.get("boundary", "").encode("ascii")
        if not boundary:
            raise ValueError("Missing boundary")
        form, files = parser.parse(stream, boundary, content_length)
        return stream, form, files


class UWSRequest(Request):
    """A malformed multipart body is an error, not an empty form; the metrics' clock
    starts as the request arrives; the caller, the address and the query are read once."""

    form_data_parser_class = StrictFormDataParser
    #: The caller, once authenticated (uws.web.identity).
    caller: Caller | None = None
    #: Why the Host cannot be answered (None: it can), and the URL root (uws.web.negotiation).
    site: tuple[str | None, str | None] | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.started = time.perf_counter()

    def make_form_data_parser(self):
        parser = super().make_form_data_parser()
        parser.silent = False
        return parser

    @functools.cached_property
    def query_index(self) -> dict[str, list[str]]:
        """The query's values by upper-case name (names match case-insensitively)."""
        index: dict[str, list[str]] = {}
        if not self.query_string:
            return index        # most requests: werkzeug would still build an empty MultiDict
        for name, value in self.args.items(multi=True):
            index.setdefault(name.upper(), []).append(value)
        return index


def current() -> UWSRequest:
    """This request, unwrapped from its context proxy."""
    # not typing.cast: it is a call too, and this runs a dozen times a request
    return request._get_current_object()    # type: ignore[attr-defined]
