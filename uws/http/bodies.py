"""Request bodies waitress receives before the application sees them: one budget
for all connections, so stalled uploads cannot hold unbounded memory and disk."""
from __future__ import annotations

import collections
import logging
import threading

from waitress.parser import HTTPRequestParser, ParsingError
from waitress.utilities import Error

log = logging.getLogger("uws.http.server")


class BodyBudget:
    """The request-body bytes buffered across all connections, and per client address.

    A request reserves its announced ``Content-Length`` as soon as its headers
    are in (a chunked one, what it has sent so far), and gives it back when it
    has been answered or its connection closes."""

    def __init__(self, limit: int, per_address: int):
        self.limit = limit
        self.per_address = per_address
        self.used = 0
        self.by_address: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def take(self, address: str, n: int) -> bool:
        with self._lock:
            if (self.used + n > self.limit
                    or self.by_address[address] + n > self.per_address):
                return False
            self.used += n
            self.by_address[address] += n
            return True

    def give(self, address: str, n: int) -> None:
        with self._lock:
            self.used -= n
            self.by_address[address] -= n
            if self.by_address[address] <= 0:
                del self.by_address[address]


class Busy(Error):
    code = 503
    reason = "Service Unavailable"


class VersionNotSupported(Error):
    code = 505
    reason = "HTTP Version Not Supported"


class Parser(HTTPRequestParser):
    """waitress's request parser, holding a share of the body budget, and refusing
    what RFC 9112 lets a server refuse and waitress takes: a request line of another
    major HTTP version (waitress answered it as HTTP/1.0), an HTTP/1.1 request without
    Host, and a body framed both by Content-Length and Transfer-Encoding (a proxy in
    front that reads the other one would see another request in it: smuggling)."""

    completed: bool
    error: Error | None

    def __init__(self, adj, budget: BodyBudget | None = None, address: str = ""):
        super().__init__(adj)
        self.budget = budget
        self.address = address
        self.held = 0

    def parse_header(self, header_plus):
        super().parse_header(header_plus)
        if self.version.partition(".")[0] != "1":      # a later 1.x reads as 1.1 (RFC 9112)
            self.error = VersionNotSupported(f"HTTP/{self.version} is not served here; "
                                             "send HTTP/1.1")
            self.completed = True
        elif self.version != "1.0" and "HOST" not in self.headers:
            raise ParsingError("an HTTP/1.1 request must name its Host")
        elif self.chunked and "CONTENT_LENGTH" in self.headers:
            raise ParsingError("Content-Length and Transfer-Encoding together")

    def received(self, data):
        if self.completed:
            return 0
        consumed = super().received(data)
        if self.budget is None or self.error is not None or not self.headers_finished:
            return consumed
        wanted = max(self.content_length, self.body_bytes_received)
        if wanted > self.held:
            if not self.budget.take(self.address, wanted - self.held):
                log.warning("refused a %d-byte request body from %s: the server is "
                            "buffering too many bodies (max_buffered_bytes)",
                            wanted, self.address)
                self.error = Busy("Too many request bodies are being received; "
                                  "try again later.")
                self.completed = True
                return len(data)        # the rest is that body: no request of its own
            self.held = wanted
        return consumed

    def release(self) -> None:
        """Give the reserved bytes back (once, from whichever thread comes first)."""
        held, self.held = self.held, 0
        if held and self.budget is not None:
            self.budget.give(self.address, held)

    def close(self):
        self.release()
        super().close()
