"""HTTP for the client: credentials for the server's origin only, error statuses as
exceptions, answers read within a deadline and a size limit, streamed downloads.

Every failure of ``requests`` or urllib3 leaves here as a ``UWSError``: a connection that
cannot be made, breaks or is too slow as ``ConnectionFailed``; an answer that cannot be
read (bad encoding, too long, too many redirects) or a URL that is not http(s) as
``ProtocolError``.

Documents (job, list, error) are read decoded (gzip, deflate), and their limit holds for
the decoded bytes: urllib3 from 2.6 decodes at most what each read asks for, so a small
compressed answer cannot swell past the limit in memory either. Result downloads are
not decoded at all (see ``Transport.download``).
"""
from __future__ import annotations

import codecs
import contextlib
import dataclasses
import os
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import requests
import urllib3
from lxml import etree

from .errors import ConnectionFailed, ProtocolError, UWSError, for_status
from .urls import Origin, is_http, origin_of, public_url, resolved

CHUNK = 1 << 16
MAX_DOCUMENT = 32 << 20         # a UWS document longer than this is not one
MAX_ERROR_BODY = 64 << 10       # what an error message is taken from
MAX_REDIRECTS = 10
MAX_LINE = 1 << 20              # of an event stream: an event's JSON is far shorter
STALL_BYTES = 1024              # a download bringing less in a timeout's time has stalled
REDIRECTS = (301, 302, 303, 307, 308)
# ASCII digits, and few enough for int() (a header of 5,000 digits is no offset)
_CONTENT_RANGE = re.compile(r"bytes\s+(?:([0-9]{1,20})-[0-9]{1,20}|\*)/([0-9]{1,20}|\*)")
_CHARSET = re.compile(r"""charset\s*=\s*["']?([^"';\s]+)""", re.IGNORECASE)


class BearerAuth(requests.auth.AuthBase):
    def __init__(self, token: str):
        self.token = token

    def __call__(self, request):
        request.headers["Authorization"] = f"Bearer {self.token}"
        return request


class OriginOnly(requests.auth.AuthBase):
    """Credentials on requests to the server's origin and none at all (not even a
    session's ``Authorization`` header) on requests to any other: a result stored
    elsewhere, a presigned URL. The origin is read from the prepared URL, the one sent."""

    def __init__(self, origin: Origin | None, credentials: Any, session: requests.Session):
        self.origin = origin
        self.credentials = credentials
        self.session = session

    def __call__(self, request):
        if origin_of(request.url) != self.origin:
            request.headers.pop("Authorization", None)
            return request
        credentials = self.credentials
        if credentials is None and self.session.trust_env:     # as requests would: ~/.netrc
            credentials = requests.utils.get_netrc_auth(request.url)
        if isinstance(credentials, tuple):
            credentials = requests.auth.HTTPBasicAuth(*credentials)
        return credentials(request) if credentials is not None else request


@dataclasses.dataclass(frozen=True)
class Reply:
    """An answer read whole: the URL that gave it (after redirects), status, headers, body."""
    url: str
    status: int
    headers: Mapping[str, str]
    body: bytes
    reason: str = ""

    @property
    def text(self) -> str:
        return self.body.decode(_charset(self.headers), "replace")

    @property
    def location(self) -> str | None:
        """The Location header as an absolute URL, without userinfo."""
        location = self.headers.get("Location")
        return resolved(self.url, location) if location else None

    def link(self, rel: str) -> str | None:
        """The absolute URL of a ``Link: <…>; rel=…`` header."""
        for link in requests.utils.parse_header_links(self.headers.get("Link", "")):
            if rel in link.get("rel", "").split() and link.get("url"):
                return resolved(self.url, link["url"])
        return None


class Transport:
    """A ``requests`` session with the caller's credentials and timeouts. ``timeout``
    bounds connecting and each whole answer (headers and body)."""

    def __init__(self, origin: str, session: requests.Session | None = None, user: str | None = None,
                 password: str | None = None, token: str | None = None, timeout: float = 30,
                 ca_bundle: str | None = None):
        if not timeout > 0:
            raise ValueError(f"the timeout must be more than 0 s, not {timeout}")
        # sent with each request: a session's own verify loses to REQUESTS_CA_BUNDLE
        self.verify: dict[str, Any] = {} if ca_bundle is None else {"verify": ca_bundle}
        self.session = session or requests.Session()
        credentials: Any = self.session.auth
        if token:
            credentials = BearerAuth(token)
        elif user is not None:
            credentials = (user, password or "")
        self.auth = OriginOnly(origin_of(origin), credentials, self.session)
        self.timeout = timeout

    def request(self, method: str, url: str, *, block: float = 0, within: float | None = None,
                accept: tuple[int, ...] = (), **kwargs) -> Reply:
        """Send and read the answer, raising the matching exception for an error status
        not in ``accept``. GETs follow redirects. ``block``: seconds the server may hold
        the answer (WAIT), added to the timeout; ``within``: a shorter limit for it all."""
        budget = self.timeout + block if within is None else min(self.timeout + block, within)
        deadline = time.monotonic() + budget
        response = self._open(method, url, deadline, budget, accept, follow=method == "GET", **kwargs)
        return self._reply(response, self._read(response, MAX_DOCUMENT, deadline, budget))

    def get(self, url: str, **kwargs) -> Reply:
        return self.request("GET", url, **kwargs)

    def change(self, method: str, url: str, **kwargs) -> Reply:
        """POST or DELETE, expecting UWS's 303 (or a 200 from lenient servers). A 307 or
        308 asks for the request again elsewhere: that is not done (nor reported as
        done) but raised, naming the place, so the caller can use that URL."""
        reply = self.request(method, url, **kwargs)
        if reply.status in (307, 308):
            raise ProtocolError(f"{method} {url} was not done: the server answered {reply.status}, "
                                f"asking for it at {reply.location or '(no Location)'}; use that URL")
        if reply.status >= 300 and reply.location is None:
            raise ProtocolError(f"{method} {url}: {reply.status} without a Location")
        return reply

    def download(self, url: str, path: Path, resume: bool = False) -> int:
        """Stream ``url`` into ``path`` (replacing it); with ``resume``, when ``path``
        holds the start of it already, ask only for the rest (Range) and append.
        Returns the bytes now in the file. No size or total time limit: each read must
        come within the timeout, and at least STALL_BYTES in every timeout's time.

        The file holds the body as sent, never decoded: a result is the file the server
        stores (ours sends it as it is), and a Range counts bytes of the body as sent, so
        only those can be resumed. ``Accept-Encoding: identity`` asks servers that
        compress for transport not to; one that compresses anyway (``Content-Encoding``)
        gets its compressed bytes saved, never a gzip bomb expanded on the disk."""
        have = path.stat().st_size if resume and path.exists() else 0
        headers = {"Accept-Encoding": "identity"}
        if have:
            headers["Range"] = f"bytes={have}-"
        deadline = time.monotonic() + self.timeout
        response = self._open("GET", url, deadline, self.timeout, (416,) if have else (),
                              follow=True, headers=headers)
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
                # what arrived stays in the file when it breaks off: the next download
                # resumes from there
                for chunk in self._stream(response):
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
        return path.stat().st_size

    def event_lines(self, url: str, idle: float, **kwargs) -> Iterator[bytes]:
        """An event stream (Server-Sent Events) line by line, as it arrives, without
        the line ends (LF, CRLF); its end ends them. A silence longer than ``idle``
        seconds is ConnectionFailed, a line over MAX_LINE bytes a ProtocolError."""
        budget = max(self.timeout, idle)
        response = self._open("GET", url, time.monotonic() + budget, budget, (), follow=True,
                              **kwargs)
        kind = response.headers.get("Content-Type", "")
        if not kind.startswith("text/event-stream"):
            response.close()
            raise ProtocolError(f"{response.url}: not an event stream ({kind or 'no type'}): "
                                "a server without this package's events?")
        pending = b""
        with response, _failures(response.url, idle):
            while True:
                _bound_next_read(response, idle)
                chunk = response.raw.read1(CHUNK, decode_content=True)
                if not chunk:
                    return
                *complete, pending = (pending + chunk).split(b"\n")
                if len(pending) > MAX_LINE:
                    raise ProtocolError(f"{response.url}: a line longer than {MAX_LINE} bytes")
                for line in complete:
                    yield line[:-1] if line.endswith(b"\r") else line

    # -- the plumbing -------------------------------------------------------------------

    def _open(self, method: str, url: str, deadline: float, budget: float, accept: tuple[int, ...],
              follow: bool, **kwargs) -> requests.Response:
        """The answer with its body unread, after following redirects (each request
        sent with credentials only to the origin) when ``follow``."""
        for _ in range(MAX_REDIRECTS + 1):
            response = self._send(method, url, deadline, budget, **kwargs)
            location = response.headers.get("Location")
            if not (follow and location and response.status_code in REDIRECTS):
                break
            response.close()
            url = resolved(response.url, location)
            kwargs.pop("params", None)
        else:
            raise ProtocolError(f"{url}: more than {MAX_REDIRECTS} redirects")
        if response.status_code >= 400 and response.status_code not in accept:
            try:
                body = self._read(response, MAX_ERROR_BODY, deadline, budget, cut=True)
            except UWSError:
                body = b""
            raise for_status(response.status_code, server_message(self._reply(response, body)), url)
        return response

    def _send(self, method: str, url: str, deadline: float, budget: float, **kwargs) -> requests.Response:
        if not is_http(url):
            raise ProtocolError(f"{public_url(url)} is not an http(s) URL: not requested")
        left = deadline - time.monotonic()
        if left <= 0:
            raise ConnectionFailed(f"{url} did not answer within {budget:g} s")
        with _failures(url, budget):
            return self.session.request(method, url, auth=self.auth, allow_redirects=False, stream=True,
                                        timeout=(min(self.timeout, left), left), **self.verify,
                                        **kwargs)

    def _read(self, response: requests.Response, limit: int, deadline: float, budget: float,
              cut: bool = False) -> bytes:
        """The body, complete before ``deadline``; longer than ``limit``: ProtocolError,
        or with ``cut`` its first ``limit`` bytes."""
        body = bytearray()
        with response, _failures(response.url, budget):
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ConnectionFailed(f"{response.url} did not answer within {budget:g} s")
                _bound_next_read(response, left)
                chunk = response.raw.read1(CHUNK, decode_content=True)
                if not chunk:
                    return bytes(body)
                body += chunk
                if len(body) > limit:
                    if cut:
                        return bytes(body[:limit])
                    raise ProtocolError(f"{response.url}: an answer longer than {limit} bytes")

    def _stream(self, response: requests.Response) -> Iterator[bytes]:
        """The body as it arrives, as sent (not decoded); a trickle of less than
        STALL_BYTES in any timeout's time is a stall (ConnectionFailed) as much as
        silence is."""
        window_end, received = time.monotonic() + self.timeout, 0
        with _failures(response.url, self.timeout):
            while chunk := response.raw.read1(CHUNK, decode_content=False):
                yield chunk
                received += len(chunk)
                if time.monotonic() >= window_end:
                    if received < STALL_BYTES:
                        raise ConnectionFailed(f"{response.url}: the download stalled "
                                               f"({received} bytes in {self.timeout:g} s)")
                    window_end, received = time.monotonic() + self.timeout, 0

    @staticmethod
    def _reply(response: requests.Response, body: bytes) -> Reply:
        return Reply(url=response.url, status=response.status_code, headers=response.headers,
                     body=body, reason=response.reason or "")


@contextlib.contextmanager
def _failures(url: str, budget: float) -> Iterator[None]:
    """requests' and urllib3's exceptions as the client's."""
    try:
        yield
    except (requests.exceptions.InvalidSchema, requests.exceptions.MissingSchema,
            requests.exceptions.InvalidURL, requests.exceptions.InvalidHeader) as exc:
        raise ProtocolError(f"cannot request {public_url(url)}: {exc}") from None
    except (requests.exceptions.ContentDecodingError, urllib3.exceptions.DecodeError) as exc:
        raise ProtocolError(f"{url}: an answer that cannot be decoded: {exc}") from None
    except (requests.Timeout, urllib3.exceptions.TimeoutError):
        raise ConnectionFailed(f"{url} did not answer within {budget:g} s") from None
    except requests.ConnectionError as exc:
        raise ConnectionFailed(f"cannot reach {url}: {exc}") from None
    except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
        # ChunkedEncodingError, a body cut short (IncompleteRead), a reset connection
        raise ConnectionFailed(f"{url}: the connection broke: {exc}") from None


def _bound_next_read(response: requests.Response, seconds: float) -> None:
    """Let the next socket read wait no longer than the answer's time left."""
    sock = getattr(getattr(response.raw, "connection", None), "sock", None)
    if sock is not None:
        sock.settimeout(max(seconds, 0.001))


def _charset(headers: Mapping[str, str]) -> str:
    """The charset a Content-Type names, when Python knows it; else UTF-8."""
    match = _CHARSET.search(headers.get("Content-Type", ""))
    if match:
        with contextlib.suppress(LookupError):
            return codecs.lookup(match.group(1)).name
    return "utf-8"


def _resumed_at(response: requests.Response) -> int:
    """Where a ranged answer starts: 0 when the server sent the whole file (200)."""
    if response.status_code != 206:
        return 0
    match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
    if not match or match.group(1) is None:
        raise ProtocolError(f"206 with a bad Content-Range: {response.headers.get('Content-Range')!r}")
    return int(match.group(1))


def server_message(reply: Reply, limit: int = 500) -> str:
    """What the server said about an error: the text of a plain, HTML or XML body (no
    HTML style or script), squeezed."""
    body = reply.body[:MAX_ERROR_BODY]
    ctype = reply.headers.get("Content-Type", "")
    text = reply.text
    if "xml" in ctype or "html" in ctype:
        try:
            parser = etree.HTMLParser(no_network=True) if "html" in ctype else etree.XMLParser(
                resolve_entities=False, no_network=True, load_dtd=False)
            root = etree.fromstring(body, parser)
            if root is not None:
                etree.strip_elements(root, "script", "style", with_tail=False)
                text = " ".join(root.itertext())
        except etree.XMLSyntaxError:
            pass
    text = " ".join(text.split())
    return text[:limit] or reply.reason
