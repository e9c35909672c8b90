"""HTTP(S) connections to a host a client named, made to an address already
checked, and ended at a deadline for the whole exchange.

A socket timeout bounds one read, not an exchange: a peer that sends a byte now
and then restarts it at each byte, and would hold a job's fetch or a callback
thread for as long as it likes.  So a timer shuts the socket down at the
deadline, whatever it is doing (connecting TLS, sending, reading headers or
the body); the blocked call then fails, and ``expired`` says why.

Standard library only: jobs' child processes use it (uws.execution.fetch).
"""
from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from urllib.parse import quote, urlsplit

# what stays as it is in a request target: the delimiters, and escapes already made
_SAFE = "!$%&'()*+,/:;=?@[]~"


def request_target(url: str) -> tuple[str, str]:
    """The request target of an http(s) URL, with what is not ASCII percent-encoded
    as UTF-8 (as browsers send it), and its Host header, the name in IDNA.  ValueError
    (UnicodeError) for a name IDNA cannot encode."""
    parts = urlsplit(url)
    target = quote(parts.path or "/", safe=_SAFE)
    if parts.query:
        target += "?" + quote(parts.query, safe=_SAFE)
    host = (parts.hostname or "").encode("idna").decode("ascii")
    if ":" in host:
        host = f"[{host}]"
    default = 443 if parts.scheme.lower() == "https" else 80
    return target, host if parts.port in (None, default) else f"{host}:{parts.port}"


class PinnedConnection(http.client.HTTPConnection):
    """A connection to ``host`` made to the first of the checked ``addresses``
    that answers (TLS still verifies the certificate against the host's name),
    each socket operation bounded by ``timeout`` and all of them by ``deadline``
    (a ``time.monotonic()`` value)."""

    def __init__(self, host: str, port: int, addresses, *, tls: bool, deadline: float,
                 timeout: float):
        super().__init__(host, port, timeout=timeout)
        self._timeout = timeout     # the base class's attribute may be None
        self.default_port = 443 if tls else 80      # no ":443" in the Host header
        self._addresses = addresses
        self._tls = tls
        self._deadline = deadline
        self._live: socket.socket | None = None
        self._watch: threading.Timer | None = None
        self.expired = False

    def connect(self) -> None:
        sock = self._connected()
        self._live = sock
        self._watch = threading.Timer(max(0.0, self._deadline - time.monotonic()),
                                      self._expire)
        self._watch.daemon = True
        self._watch.start()
        if self._tls:
            try:    # the handshake on the socket the timer can reach
                sock = ssl.create_default_context().wrap_socket(
                    sock, server_hostname=self.host, do_handshake_on_connect=False)
                self._live = sock
                sock.do_handshake()
            except BaseException:
                sock.close()
                raise
        self.sock = sock

    def _connected(self) -> socket.socket:
        for address in self._addresses:
            left = self._deadline - time.monotonic()
            if left <= 0:
                self.expired = True
                break
            try:
                return socket.create_connection((address, self.port), min(self._timeout, left))
            except OSError:
                continue
        raise OSError("no address answered")

    def _expire(self) -> None:
        self.expired = True
        live = self._live
        if live is not None:
            try:    # the descriptor's own shutdown: wakes a read blocked in TLS too
                socket.socket.shutdown(live, socket.SHUT_RDWR)
            except OSError:
                pass    # already closed

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        super().close()
