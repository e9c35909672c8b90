"""URLs for the client, read the way ``requests`` and urllib3 read them when connecting.

``urllib.parse`` and urllib3 disagree on odd URLs (``http://a:1\\@b/`` is host ``b`` to the
former, ``a`` to the latter): anything deciding where credentials go uses urllib3's
parser on the URL as ``requests`` prepares it, which is the URL that is sent.
"""
from __future__ import annotations

import re
from urllib.parse import quote, unquote, urljoin, urlsplit, urlunsplit

import requests
from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

Origin = tuple[str, str, int | None]
_DEFAULT_PORTS = {"http": 80, "https": 443}
# scheme://…@ as RFC 3986 reads it (the last @ of the authority): for messages only
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")


def prepared(url: str) -> str:
    """``url`` as ``requests`` sends it (IDNA host, quoted path); raises ValueError."""
    request = requests.PreparedRequest()
    try:
        request.prepare_url(url, None)
    except requests.RequestException:
        raise ValueError(f"not a URL: {redacted(url)}") from None
    assert request.url is not None
    return request.url


def origin_of(url: str) -> Origin | None:
    """(scheme, host, port) of where a request for ``url`` connects; None if it cannot."""
    try:
        parts = parse_url(prepared(url))
    except (ValueError, LocationParseError):
        return None
    scheme = (parts.scheme or "").lower()
    return scheme, (parts.host or "").lower(), parts.port or _DEFAULT_PORTS.get(scheme)


def is_http(url: str) -> bool:
    origin = origin_of(url)
    return origin is not None and origin[0] in _DEFAULT_PORTS and bool(origin[1])


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """A job list's URL without ``user:password@``, and that user and password
    (unquoted). Raises ValueError unless it is an http(s) URL with a host."""
    if not is_http(url):
        raise ValueError(f"not an http(s) URL: {redacted(url)}")
    parts = parse_url(prepared(url))
    if parts.auth is None:
        return prepared(url), None, None
    user, _, password = parts.auth.partition(":")
    return parts._replace(auth=None).url, unquote(user), unquote(password)


def public_url(url: str) -> str:
    """A URL a server gave, as it will be requested and without userinfo, so that no
    URL the client prints or keeps carries a password."""
    try:
        parts = parse_url(prepared(url))
    except (ValueError, LocationParseError):
        return redacted(url)
    return parts._replace(auth=None).url if parts.auth else prepared(url)


def resolved(base: str, href: str) -> str:
    """``href`` (a server's, maybe relative) as an absolute public URL; an href that
    cannot be joined is kept as it is (and never requested: it is not http)."""
    try:
        return public_url(urljoin(base, href))
    except ValueError:      # urljoin: "Invalid IPv6 URL"
        return redacted(href)


def redacted(url: str) -> str:
    """``url`` without anything that may be userinfo: for messages about bad URLs."""
    return _USERINFO.sub(r"\1", url)


def child_url(base: str, *segments: str) -> str:
    """``base`` with ``segments`` added to its path, each quoted, and its query kept:
    ``http://h/jobs/?t=1`` and ``J``, ``phase`` give ``http://h/jobs/J/phase?t=1``."""
    parts = urlsplit(base)
    path = parts.path.rstrip("/") + "".join("/" + quote(s, safe="") for s in segments)
    return urlunsplit(parts._replace(path=path, fragment=""))
