"""Content negotiation: who gets HTML pages, who gets the UWS documents."""
from __future__ import annotations

from collections.abc import Callable

from flask import Response, current_app, request
from werkzeug.exceptions import BadHost

from .headers import add_missing
from .incoming import current

#: Headers of a representation chosen by the Accept header (HTML, JSON or XML), for caches.
NEGOTIATED = {"Vary": "Accept"}


def choose(xml: Callable[[], Response], json: Callable[[], Response],
           html: Callable[[], Response] | None = None) -> Response:
    """The representation this request asks for, built by the one callable chosen:
    JSON (:func:`wants_json`), else HTML for browsers where a page exists, else XML
    (or the plain text UWS defines).  Each answer carries ``Vary: Accept``."""
    if wants_json():
        response = json()
    elif html is not None and wants_html():
        response = html()
    else:
        response = xml()
    add_missing(response.headers, _VARY)
    return response


_VARY = (("Vary", "Accept"),)


def wants_html() -> bool:
    """True for browsers; XML stays the default for everyone else.

    A browser ranks HTML above XML and names application/xhtml+xml.  A client
    that ranks text/html first but also takes anything (``*/*``) without
    naming XHTML is a library default, e.g. Java's HttpURLConnection
    (``text/html, image/gif, image/jpeg, */*; q=0.2``, what STILTS and TOPCAT
    send): it gets XML.  ``Accept: text/html`` alone still gets HTML.
    """
    if not usable_host():
        return False    # pages build links from the Host header; plain text needs none
    return _by_accept(current())[1]


def wants_json() -> bool:
    """True for ``?FORMAT=json`` on a GET (what a browser's address bar can ask) or
    an Accept header that ranks JSON above XML and HTML; XML stays the default."""
    req = current()
    if req.method in ("GET", "HEAD") and req.query_string:
        fmt = req.query_index.get("FORMAT")
        if fmt:
            return fmt[-1].strip().lower() in ("json", "application/json")
    return _by_accept(req)[0]


def _by_accept(req) -> tuple[bool, bool]:
    """(JSON asked for, HTML asked for) by this request's Accept header, remembered
    for each header value (clients send few): parsing one costs more than a GET's
    other negotiation."""
    header = req.environ.get("HTTP_ACCEPT", "")
    try:
        return _ACCEPT_VERDICTS[header]
    except KeyError:
        pass
    accept = req.accept_mimetypes
    verdict = (_json_first(accept), _html_first(accept, header))
    if len(header) <= MAX_REMEMBERED_CHARS:
        if len(_ACCEPT_VERDICTS) >= MAX_VERDICTS:
            _ACCEPT_VERDICTS.clear()
        _ACCEPT_VERDICTS[header] = verdict
    return verdict


_ACCEPT_VERDICTS: dict[str, tuple[bool, bool]] = {}


def _json_first(accept) -> bool:
    best = accept.best_match(["application/xml", "text/xml", "text/html", "application/json"])
    return best == "application/json" and accept["application/json"] > max(
        accept["application/xml"], accept["text/xml"], accept["text/html"])


def _html_first(accept, header: str) -> bool:
    if not (accept.best_match(["application/xml", "text/xml", "text/html"]) == "text/html"
            and accept["text/html"] > max(accept["application/xml"], accept["text/xml"])):
        return False
    named = _accepted_ranges(header)
    return "application/xhtml+xml" in named or not named & {"*/*", "*"}


def _accepted_ranges(header: str) -> set[str]:
    """Media ranges of an Accept header, but those refused with q=0.  Read from the
    raw header: werkzeug drops entries such as Java's ``*; q=.2``."""
    ranges = set()
    for part in header.split(","):
        media, *params = (item.strip().lower() for item in part.split(";"))
        if media and _quality(params) > 0:
            ranges.add(media)
    return ranges


def _quality(params: list[str]) -> float:
    for param in params:
        key, _, value = param.partition("=")
        if key.strip() == "q":
            try:
                return float(value)
            except ValueError:
                return 1.0
    return 1.0


def usable_host() -> bool:
    """Whether absolute URLs may be built for this request (see :func:`host_problem`)."""
    return host_problem() is None


def host_problem() -> str | None:
    """Why this request's Host header cannot be answered, or None.  werkzeug refuses
    some names (empty labels, invalid IDNA such as ``xn--a``); the others must be one of
    this server's (:mod:`uws.http.hosts`).  Without the header (HTTP/1.0) the server's own
    name is used, which needs no check."""
    return _site()[0]


def url_root() -> str | None:
    """scheme://host[:port]/prefix/ as the client addressed us; None for a Host header
    :func:`host_problem` refuses."""
    return _site()[1]


def _site() -> tuple[str | None, str | None]:
    """(host problem, URL root) of this request, worked out once for each request, and
    remembered for each Host (and server address) they depend on: the check costs more
    than the rest of a GET, and werkzeug rebuilds the URL root at each call."""
    req = current()
    if req.site is None:
        req.site = remembered(_SITES, _read_site)
    return req.site


def remembered(name: str, compute):
    """``compute()`` for this request's address as the client gave it (Host header,
    server name and port, scheme, script name), remembered per app under ``name``,
    for at most :data:`MAX_VERDICTS` addresses (many Host values, perhaps hostile:
    start afresh)."""
    environ = current().environ
    key = (environ.get("HTTP_HOST"), environ.get("SERVER_NAME"), environ.get("SERVER_PORT"),
           environ.get("wsgi.url_scheme"), environ.get("SCRIPT_NAME"))
    memory = current_app.extensions.setdefault(name, {})
    try:
        return memory[key]
    except KeyError:
        pass
    value = compute()
    if sum(len(part or "") for part in key) <= MAX_REMEMBERED_CHARS:
        if len(memory) >= MAX_VERDICTS:
            memory.clear()
        memory[key] = value
    return value


_SITES = "uws_sites"
#: Host headers (or Accept headers) whose verdict is remembered at once, at most
MAX_VERDICTS = 1024
#: Longer headers are judged afresh each time, never remembered: real ones are far
#: shorter, and a hostile client could otherwise fill the memory with 1024 huge ones.
MAX_REMEMBERED_CHARS = 512


def _read_site() -> tuple[str | None, str | None]:
    unusable = "the Host header does not name a usable host"
    if isinstance(request.routing_exception, BadHost):
        return unusable, None
    try:
        root = request.url_root
        if request.host.rsplit(":", 1)[0] in ("", "[]") or not root:
            return unusable, None
    except ValueError:      # UnicodeError included
        return unusable, None
    if "HTTP_HOST" in request.environ and \
            not current_app.extensions["uws_hosts"].allows(request.host):
        return (f"this server does not answer to the host {request.host!r} "
                "(its [server] allowed_hosts or public_url do not name it)"), None
    return None, root
