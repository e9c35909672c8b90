"""Serving a job's files (results, uploads): streamed, with ranges, sandboxed."""
from __future__ import annotations

from flask import request, send_file
from werkzeug.exceptions import RequestedRangeNotSatisfiable
from werkzeug.http import parse_range_header

SANDBOX = "sandbox; default-src 'none'"


def download(opened, mime_type: str, name: str):
    """``opened`` is (binary file, os.stat_result) from JobFiles.open_*.

    Sent as an attachment of its declared type and sandboxed, so even a result
    that is HTML can never run script on this origin.  Served from the open
    file, never by path again (see files._open_inside)."""
    file, st = opened
    response = send_file(file, mimetype=mime_type or "application/octet-stream",
                         as_attachment=True, download_name=name, conditional=False,
                         etag=False, max_age=0)
    response.content_type = mime_type or "application/octet-stream"   # as declared, verbatim
    response.content_length = st.st_size
    response.last_modified = st.st_mtime
    response.set_etag(f"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}")
    try:
        response = response.make_conditional(_ranges_we_serve(st.st_size),
                                             accept_ranges=True, complete_length=st.st_size)
    except RequestedRangeNotSatisfiable:
        file.close()
        raise
    response.headers["Content-Security-Policy"] = SANDBOX
    return response


def _ranges_we_serve(size: int) -> dict:
    """The request's environ with its Range header made one we answer as RFC 9110
    asks: another unit or several ranges are ignored (a full 200, which the RFC
    allows), and a suffix longer than the file means the whole file."""
    environ = dict(request.environ)
    header = environ.get("HTTP_RANGE")
    if header is None:
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
