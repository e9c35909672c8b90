"""Serving a job's files (results, uploads): streamed, with ranges, sandboxed."""
from __future__ import annotations

import io

from flask import request, send_file
from werkzeug import Response
from werkzeug.exceptions import PreconditionFailed, RequestedRangeNotSatisfiable
from werkzeug.http import parse_date, parse_etags, parse_range_header
from werkzeug.wsgi import wrap_file

SANDBOX = "sandbox; default-src 'none'"


def download(opened, mime_type: str, name: str) -> Response:
    """``opened`` is (binary file, os.stat_result) from JobFiles.open_*.

    Sent as an attachment of its declared type and sandboxed, so even a result
    that is HTML can never run script on this origin.  Served from the open
    file, never by path again (see files._open_beneath)."""
    file, st = opened
    etag = f"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"
    answer = _preconditions(etag, int(st.st_mtime))
    if answer is not None:
        file.close()
        if answer == 412:
            raise PreconditionFailed("the file does not match the request's If-Match or "
                                     "If-Unmodified-Since")
        not_modified = Response(status=304)
        not_modified.set_etag(etag)
        not_modified.last_modified = st.st_mtime
        return not_modified
    response: Response = send_file(file, mimetype=mime_type or "application/octet-stream",
                         as_attachment=True, download_name=name, conditional=False,
                         etag=False, max_age=0)
    response.content_type = mime_type or "application/octet-stream"   # as declared, verbatim
    response.content_length = st.st_size
    response.last_modified = st.st_mtime
    response.set_etag(etag)
    try:
        response = response.make_conditional(_ranges_we_serve(st.st_size),
                                             accept_ranges=True, complete_length=st.st_size)
    except RequestedRangeNotSatisfiable:
        file.close()
        raise
    if response.status_code == 206:
        # werkzeug sends a range by iterating in the request's worker thread, which
        # a client that never reads then holds; the server's file wrapper (as for a
        # whole file) sends from its event loop instead, exactly the range's bytes.
        span = response.content_range
        assert span is not None and span.start is not None and span.stop is not None
        response.response = wrap_file(request.environ,
                                      FileSpan(file, span.start, span.stop))  # type: ignore[arg-type]
    response.headers["Content-Security-Policy"] = SANDBOX
    return response


def _preconditions(etag: str, modified: int) -> int | None:
    """RFC 9110 §13.2.2, in its order: 412 (If-Match, else If-Unmodified-Since), 304
    (If-None-Match, else If-Modified-Since), or None to answer.  Before any range:
    werkzeug's make_conditional skips them all for a 206 and sends a 412's body."""
    headers = request.headers
    if "If-Match" in headers:
        if not parse_etags(headers["If-Match"]).contains(etag):     # strong, or "*"
            return 412
    elif (since := parse_date(headers.get("If-Unmodified-Since"))) is not None:
        if modified > since.timestamp():
            return 412
    if "If-None-Match" in headers:
        if parse_etags(headers["If-None-Match"]).contains_weak(etag):
            return 304
    elif (since := parse_date(headers.get("If-Modified-Since"))) is not None:
        if modified <= since.timestamp():
            return 304
    return None


def _ranges_we_serve(size: int) -> dict:
    """The request's environ with its Range header made one we answer as RFC 9110
    asks: another unit or several ranges are ignored (a full 200, which the RFC
    allows), and a suffix longer than the file means the whole file.  The
    preconditions, already answered (:func:`_preconditions`), are left out."""
    environ = {k: v for k, v in request.environ.items() if k not in _PRECONDITIONS}
    header = environ.get("HTTP_RANGE")
    if header is None:
        return environ
    if "," in header:       # several ranges, valid or not (overlapping, a last comma...)
        environ.pop("HTTP_RANGE")
        return environ
    parsed = parse_range_header(header)
    if parsed is None:
        if not header.strip().lower().startswith("bytes="):
            environ.pop("HTTP_RANGE")       # another unit
        return environ                      # malformed byte ranges: 416 as werkzeug does
    if parsed.units != "bytes" or len(parsed.ranges) != 1:
        environ.pop("HTTP_RANGE")
        return environ
    start, _stop = parsed.ranges[0]
    if start < 0 and -start >= size > 0:
        environ["HTTP_RANGE"] = "bytes=0-"
    return environ


_PRECONDITIONS = frozenset({"HTTP_IF_MATCH", "HTTP_IF_UNMODIFIED_SINCE", "HTTP_IF_NONE_MATCH",
                            "HTTP_IF_MODIFIED_SINCE"})


class FileSpan(io.RawIOBase):
    """Bytes ``start`` to ``stop`` (excluded) of an open binary file, as a file
    of their own: reading ends at ``stop``, and seeking (as waitress does to
    learn the length) stays within the span."""

    def __init__(self, file, start: int, stop: int):
        super().__init__()
        self._file, self._start, self._stop = file, start, stop
        self._pos = start

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        wanted = min(len(buffer), self._stop - self._pos)
        if wanted <= 0:
            return 0
        self._file.seek(self._pos)
        data = self._file.read(wanted)
        buffer[:len(data)] = data
        self._pos += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: self._start, io.SEEK_CUR: self._pos, io.SEEK_END: self._stop}
        self._pos = min(max(base[whence] + offset, self._start), self._stop)
        return self._pos - self._start

    def tell(self) -> int:
        return self._pos - self._start

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()
