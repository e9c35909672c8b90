"""HTTP for the client: authentication, error statuses as exceptions, streamed downloads."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests
from lxml import etree

from .errors import ConnectionFailed, ProtocolError, for_status

CHUNK = 1 << 16
_CONTENT_RANGE = re.compile(r"bytes\s+(?:(\d+)-\d+|\*)/(\d+|\*)")


class BearerAuth(requests.auth.AuthBase):
    def __init__(self, token: str):
        self.token = token

    def __call__(self, request):
        request.headers["Authorization"] = f"Bearer {self.token}"
        return request


class Transport:
    """A ``requests`` session with the caller's credentials and timeouts."""

    def __init__(self, session: requests.Session | None = None, user: str | None = None,
                 password: str | None = None, token: str | None = None, timeout: float = 30,
                 origin: str | None = None):
        self.session = session or requests.Session()
        self.auth: Any = None
        if token:
            self.auth = BearerAuth(token)
        elif user is not None:
            self.auth = (user, password or "")
        # Credentials go to the server's own origin only, never to a host a document
        # names (a result stored elsewhere, a presigned URL).
        self.origin = _origin(origin) if origin else None
        self.timeout = timeout

    def request(self, method: str, url: str, *, block: float = 0, accept: tuple[int, ...] = (),
                **kwargs) -> requests.Response:
        """Send, raising the matching exception for an error status not in ``accept``.
        ``block``: seconds the server may hold the answer (WAIT), added to the read timeout."""
        kwargs.setdefault("allow_redirects", False)
        kwargs.setdefault("timeout", (self.timeout, self.timeout + block))
        if self.auth is not None and (self.origin is None or _origin(url) == self.origin):
            kwargs.setdefault("auth", self.auth)
        try:
            response = self.session.request(method, url, **kwargs)
        except requests.ConnectionError as exc:
            raise ConnectionFailed(f"cannot reach {url}: {exc}") from None
        except requests.Timeout:
            raise ConnectionFailed(f"{url} did not answer within {self.timeout + block:g} s") from None
        if response.status_code >= 400 and response.status_code not in accept:
            raise for_status(response.status_code, server_message(response), url)
        return response

    def get(self, url: str, **kwargs) -> requests.Response:
        """GET, following redirects (a result may live elsewhere)."""
        kwargs.setdefault("allow_redirects", True)
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs) -> str:
        """POST, expecting UWS's 303 (or a 200 from lenient servers); the absolute URL of
        its Location, or ``url`` when there is none."""
        response = self.request("POST", url, **kwargs)
        if response.headers.get("Location"):       # 303 as UWS says; 201 or 302 elsewhere
            return urljoin(url, response.headers["Location"])
        if response.status_code >= 300:
            raise ProtocolError(f"POST {url}: {response.status_code} without a Location")
        return url

    def download(self, url: str, path: Path, resume: bool = False) -> int:
        """Stream ``url`` into ``path`` (replacing it); with ``resume``, when ``path``
        holds the start of it already, ask only for the rest (Range) and append.
        Returns the bytes now in the file."""
        have = path.stat().st_size if resume and path.exists() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        response = self.get(url, headers=headers, stream=True, accept=(416,) if have else ())
        if response.status_code == 416:
            response.close()
            total = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if total and total.group(2) == str(have):
                return have                 # nothing left to fetch: the file is whole
            path.unlink()                   # longer than the result: not a start of it
            return self.download(url, path, resume)
        with response:
            start = _resumed_at(response) if have else 0
            mode = "ab" if start else "wb"
            if start and start != have:
                raise ProtocolError(f"{url}: asked for bytes from {have}, got them from {start}")
            with open(path, mode) as out:
                try:
                    for chunk in response.iter_content(CHUNK):
                        out.write(chunk)
                except requests.RequestException as exc:
                    # what arrived stays in the file: the next download resumes from there
                    raise ConnectionFailed(f"{url}: the download broke off: {exc}") from None
                out.flush()
                os.fsync(out.fileno())
        return path.stat().st_size


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port


def _resumed_at(response: requests.Response) -> int:
    """Where a ranged answer starts: 0 when the server sent the whole file (200)."""
    if response.status_code != 206:
        return 0
    match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
    if not match or match.group(1) is None:
        raise ProtocolError(f"206 with a bad Content-Range: {response.headers.get('Content-Range')!r}")
    return int(match.group(1))


def server_message(response: requests.Response, limit: int = 500) -> str:
    """What the server said about an error: the text of a plain, HTML or XML body, squeezed."""
    body = response.content[:65536]
    ctype = response.headers.get("Content-Type", "")
    text = body.decode(response.encoding or "utf-8", "replace")
    if "xml" in ctype or "html" in ctype:
        try:
            parser = etree.HTMLParser(no_network=True) if "html" in ctype else etree.XMLParser(
                resolve_entities=False, no_network=True, load_dtd=False)
            root = etree.fromstring(body, parser)
            if root is not None:
                text = " ".join(root.itertext())
        except etree.XMLSyntaxError:
            pass
    text = " ".join(text.split())
    return text[:limit] or response.reason or ""
