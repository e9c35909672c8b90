"""Fetching a URL-valued file parameter without letting a job reach internal hosts.

The one way jobs read URLs (``ctx.open_parameter``, ``ctx.fetch``, and the
inputs of command runners):

- http and https only;
- every address the host name resolves to must be public (not loopback,
  private, link-local, multicast, reserved or unspecified), unless the service
  allow-lists the host (``fetch_hosts``);
- the connection goes to an address that was checked: the name is resolved
  once per request, so a second answer (DNS rebinding) cannot redirect it;
- redirects are followed here, a bounded number, each target checked again;
- the body is capped in size and the whole fetch in time (a deadline that ends
  even a server sending a byte now and then: uws.http.pinned).

Errors say nothing about internal hosts: a refused address, a closed port, an
unreachable host and a failed name lookup all give the same message.

Standard library only: it runs in each job's child process.
"""
from __future__ import annotations

import http.client
import os
import ssl
import time
from urllib.parse import urljoin, urlsplit

from ..http.pinned import PinnedConnection, request_target
from ..usecases.addresses import listed, resolve

MAX_REDIRECTS = 5
TIMEOUT_SECONDS = 60.0
DEFAULT_MAX_BYTES = 100 * 1024 * 1024
CHUNK = 1 << 16
REDIRECTS = frozenset({301, 302, 303, 307, 308})


class FetchError(Exception):
    """A URL that could not be fetched; the message is safe to show the job's owner."""


def fetch(url: str, dest, *, allow_hosts=(), max_bytes: int = DEFAULT_MAX_BYTES,
          timeout: float = TIMEOUT_SECONDS, max_redirects: int = MAX_REDIRECTS) -> int:
    """Write the body at ``url`` to the file ``dest``; its size in bytes."""
    deadline = time.monotonic() + timeout
    allowed = {h.lower().rstrip(".") for h in allow_hosts}
    target = url
    for _ in range(max_redirects + 1):
        response, conn = _request(target, allowed, deadline)
        try:
            if response.status in REDIRECTS and response.getheader("Location"):
                target = urljoin(target, response.getheader("Location"))
                continue
            if response.status != 200:
                raise FetchError(f"cannot fetch {url}: the server answered {response.status}")
            return _save(response, conn, dest, url, max_bytes)
        finally:
            conn.close()
    raise FetchError(f"cannot fetch {url}: more than {max_redirects} redirects")


def _request(url: str, allowed: set, deadline: float):
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise FetchError(f"cannot fetch {url}: only http and https URLs are fetched")
    try:
        host, port = parts.hostname, parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise FetchError(f"cannot fetch {url}: not a valid URL") from None
    if not host:
        raise FetchError(f"cannot fetch {url}: not a valid URL")
    addresses = _addresses(host, port, url, checked=not listed(host, allowed))
    try:
        path, _ = request_target(url)
    except ValueError:
        raise _unreachable(url) from None
    conn = PinnedConnection(host, port, addresses, tls=scheme == "https", deadline=deadline,
                            timeout=_left(deadline, url))
    try:
        conn.putrequest("GET", path, skip_accept_encoding=True)
        conn.putheader("Accept-Encoding", "identity")
        conn.putheader("User-Agent", "uws-fetch")
        conn.endheaders()
        return conn.getresponse(), conn
    except (OSError, http.client.HTTPException, ValueError) as exc:
        conn.close()
        if conn.expired:
            raise _timed_out(url) from None
        if isinstance(exc, ssl.SSLError):
            raise FetchError(f"cannot fetch {url}: the TLS handshake failed") from None
        raise _unreachable(url) from None


def _addresses(host: str, port: int, url: str, checked: bool) -> list[str]:
    try:
        return resolve(host, port, checked)
    except (OSError, UnicodeError, ValueError):
        raise _unreachable(url) from None


def _unreachable(url: str) -> FetchError:
    return FetchError(f"cannot fetch {url}: the host cannot be reached from this service")


def _left(deadline: float, url: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _timed_out(url)
    return left


def _timed_out(url: str) -> FetchError:
    return FetchError(f"cannot fetch {url}: timed out")


def _save(response, conn: PinnedConnection, dest, url: str, max_bytes: int) -> int:
    length = response.getheader("Content-Length")
    if length and length.strip().isdigit() and int(length) > max_bytes:
        raise FetchError(f"cannot fetch {url}: larger than {max_bytes} bytes")
    size = 0
    try:
        with open(dest, "wb") as out:
            while True:
                try:
                    chunk = response.read(CHUNK)
                except (OSError, http.client.HTTPException):
                    if conn.expired:
                        raise _timed_out(url) from None
                    raise FetchError(f"cannot fetch {url}: the transfer failed") from None
                if conn.expired:    # the timer's shutdown can look like the body's end
                    raise _timed_out(url)
                if not chunk:
                    return size
                size += len(chunk)
                if size > max_bytes:
                    raise FetchError(f"cannot fetch {url}: larger than {max_bytes} bytes")
                out.write(chunk)
    except BaseException:
        try:
            os.unlink(dest)
        except OSError:
            pass
        raise
