"""The WSGI layer around the app: the client behind a trusted proxy, request ids, and
one log line a request.

For a peer in ``[server] trusted_proxies`` (:mod:`uws.http.proxies`), ``REMOTE_ADDR``
becomes the client the proxy names, and the scheme and host those it forwards: every
limit counted per client address after the headers are read (parked WAITs, password
failures), the log lines and the links in documents then see the client and the
public URL.  The peer's own address stays in ``environ["uws.peer"]``.  A peer that is
not trusted has its forwarding headers ignored.

Each request has an id: a trusted proxy's ``X-Request-ID`` when it is short and plain,
otherwise a new one.  The answer echoes it, and every log line of the request names it.

The request's line (logger ``uws.access``) is written when its answer starts: client,
method, path (without its query string, which may hold secrets), status, the time to
the answer's start in milliseconds, and the request id.
"""
from __future__ import annotations

import logging
import re
import time
import uuid

from ..http import logs
from ..http.parking import ENVIRON_KEY
from ..http.proxies import Malformed, TrustedProxies

access = logging.getLogger("uws.access")
log = logging.getLogger(__name__)

PEER_KEY = "uws.peer"
REQUEST_ID_KEY = "uws.request_id"
#: an X-Request-ID taken as it is: what proxies make (uuids, hex), no spaces or controls
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")
_FORWARDING = ("HTTP_FORWARDED", "HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_PROTO",
               "HTTP_X_FORWARDED_HOST")


def peer_address(environ) -> str:
    """The address the connection comes from (a proxy's, behind one)."""
    return environ.get(PEER_KEY) or environ.get("REMOTE_ADDR") or ""


class Proxied:
    """Wraps a WSGI app (``app.wsgi_app``)."""

    def __init__(self, app, trusted: TrustedProxies):
        self.app = app
        self.trusted = trusted
        self._warned = False

    def __call__(self, environ, start_response):
        started = time.monotonic()
        trusted = self._rewrite(environ)
        rid = _request_id(environ.get("HTTP_X_REQUEST_ID", "") if trusted else "")
        environ[REQUEST_ID_KEY] = rid
        token = logs.request_id.set(rid)

        def starting(status, headers, exc_info=None):
            headers = [(k, v) for k, v in headers if k.lower() != "x-request-id"]
            headers.append(("X-Request-ID", rid))
            _log_request(environ, status, started)
            return start_response(status, headers, exc_info)

        try:
            return self.app(environ, starting)
        finally:
            logs.request_id.reset(token)

    def _rewrite(self, environ) -> bool:
        """The client, scheme and host a trusted peer forwards; whether it is trusted."""
        peer = environ.get("REMOTE_ADDR", "")
        environ[PEER_KEY] = peer
        if not self.trusted or not self.trusted.trusts(peer):
            return False
        headers = {name[5:].lower().replace("_", "-"): environ[name]
                   for name in _FORWARDING if name in environ}
        try:
            forwarded = self.trusted.forwarded(peer, headers)
        except Malformed as exc:
            self._warn_once(peer, exc)
            return True
        if forwarded is None:
            return True
        environ["REMOTE_ADDR"] = forwarded.client
        ticket = environ.get(ENVIRON_KEY)
        if ticket is not None:      # a parked WAIT counts for the client, not the proxy
            ticket.address = forwarded.client
        if forwarded.proto:
            environ["wsgi.url_scheme"] = forwarded.proto
        if forwarded.host:
            environ["HTTP_HOST"] = forwarded.host
        return True

    def _warn_once(self, peer: str, exc: Malformed) -> None:
        if not self._warned:     # once: a misconfigured proxy would fill the log
            self._warned = True
            log.warning("trusted proxy %s sent a malformed forwarding header (%s): its own "
                        "address stands for the client (logged once)", peer, exc)


def _request_id(given: str) -> str:
    return given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


def _log_request(environ, status: str, started: float) -> None:
    ms = round((time.monotonic() - started) * 1000, 1)
    client = environ.get("REMOTE_ADDR", "")
    method = _printable(environ.get("REQUEST_METHOD", ""))
    path = _printable(environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", ""))
    code = int(status.split(" ", 1)[0]) if status[:3].isdigit() else status
    access.info('%s "%s %s" %s %.1f ms', client, method, path, code, ms,
                extra={"client": client, "method": method, "path": path, "status": code,
                       "duration_ms": ms})


def _printable(text: str) -> str:
    """No control characters or quotes in a log line (one request, one line)."""
    return "".join(c if c.isprintable() and c not in '"\\' else f"%{ord(c):02X}"
                   for c in text)
