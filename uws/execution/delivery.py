"""Delivering callbacks: a few threads per server process POST due outbox rows.

Never in a request thread nor in a job's process: a slow or dead receiver holds
one of these threads for at most twice the service's ``callback_timeout`` (the
whole attempt's deadline, however slowly it trickles its answer: uws.http.pinned), and
the outbox row stays leased meanwhile, so no other thread or process attempts it
at the same time.  Which row a thread takes is decided by
uws.usecases.callbackturns: no owner or receiver holds more than half the threads,
owners take turns, and a receiver that keeps failing rests as a whole.

What is sent is made by the payload maker registered for the row's subject kind
(``@payload_maker("job")``, ``@payload_maker("batch")`` below); a new kind of subject
registers its own and adds its rows with :func:`uws.store.callbacks.add_delivery`.
"""
from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..domain import timeutil
from ..domain.model import DELIVERED, FAILED
from ..http.pinned import PinnedConnection, request_target
from ..render import batch as render_batch
from ..render import json as render_json
from ..render.xml import Links
from ..store.batches import BatchStore
from ..usecases import callbacks
from ..usecases.callbackturns import Breaker, Turns

log = logging.getLogger(__name__)

POLL = 1.0                  # seconds between looks for rows other processes made due
MAX_RESPONSE_BYTES = 4096   # of a receiver's answer, read then dropped
MAX_ADDRESSES = 3           # of a host's checked addresses, tried in turn
USER_AGENT = "uws-callback"
BATCH_PAGE = 100            # jobs of a batch's report sent with it (its first page)

#: subject kind -> fn(api, outbox row, base URL) -> the JSON document, or None if
#: the subject is gone.
PayloadMaker = Callable[[Any, Any, str], "dict[str, Any] | None"]
PAYLOADS: dict[str, PayloadMaker] = {}


def payload_maker(kind: str) -> Callable[[PayloadMaker], PayloadMaker]:
    """Register what a delivery about a ``kind`` of subject sends."""
    def register(fn: PayloadMaker) -> PayloadMaker:
        PAYLOADS[kind] = fn
        return fn
    return register


@payload_maker("job")
def job_payload(api, row, base: str) -> dict[str, Any] | None:
    """The job's JSON document (uws.render.json), as its owner would read it."""
    job = api.store.get_job(row.subject_id, row.service, row.owner)
    if job is None:
        return None
    return render_json.job(job, Links(f"{base}{row.service}/{row.subject_id}"))


@payload_maker("batch")
def batch_payload(api, row, base: str) -> dict[str, Any] | None:
    """The batch's JSON document (uws.render.batch) with the first page of its report,
    as its owner would read it."""
    batches = BatchStore(api.store)
    batch = batches.get_batch(row.subject_id, row.service, row.owner)
    if batch is None:
        return None
    url = f"{base}{row.service}/batches/{batch.id}"
    report = render_batch.BatchReport(
        batch, batches.progress(batch.id), batches.batch_jobs(batch.id, 0, BATCH_PAGE), 0, url,
        lambda job_id: f"{base}{row.service}/{job_id}", batches.batch_callback(batch.id))
    return render_batch.batch_json(report)


class Deliverer:
    """The delivery threads of one process, for the services of ``api.config``."""

    def __init__(self, api, *, threads: int | None = None, poll: float | None = None,
                 breaker: Breaker | None = None):
        self.api = api
        self.store = api.store
        cfg = api.config
        # Absolute links in what is sent: public_url, else the address we listen on.
        self.base = cfg.public_url or f"http://{cfg.host}:{cfg.port}/"
        self.poll = POLL if poll is None else poll
        self._name = f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._wake = threading.Event()
        threads = threads or api.config.callback_threads
        self.turns = Turns(self.store, threads, breaker)
        self._threads = [threading.Thread(target=self._run, args=(f"{self._name}:{i}",),
                                          name=f"uws-callback-{i}", daemon=True)
                         for i in range(threads)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def wake(self, _job_id: str = "") -> None:
        """Look for due rows now (a job of this process just ended)."""
        self._wake.set()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop taking rows; an attempt under way ends by its own timeout (or with the
        process: its lease then expires and another process retries it)."""
        self._stop.set()
        self._wake.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            if t.is_alive():
                t.join(max(0.0, deadline - time.monotonic()))

    def _run(self, worker: str) -> None:
        while not self._stop.is_set():
            try:
                row = self.turns.claim(worker, self._lease_seconds())
                if row is not None:
                    answered = None
                    try:
                        answered = self._attempt(row, worker)
                    finally:
                        self.turns.done(row, answered)
                    continue
            except Exception:   # the database away for a moment: try again later
                log.exception("callback delivery failed")
            self._wake.wait(self.poll)
            self._wake.clear()

    def _lease_seconds(self) -> float:
        """Longer than any attempt can take (its deadline, :func:`post`)."""
        longest = max((s.callback_timeout for s in self.api.config.services.values()),
                      default=10.0)
        return 2 * longest + 30

    def _attempt(self, row, worker: str) -> bool | None:
        """Deliver ``row``, unless its receiver rests (uws.usecases.callbackturns)."""
        rest = self.turns.resting(row.url)
        if rest > 0 and row.service in self.api.config.services:
            self._wait(row, worker, rest)
            return None
        return self.deliver(row, worker)

    def _wait(self, row, worker: str, seconds: float) -> None:
        """Put ``row`` back, due when its receiver's rest ends, no attempt spent; or
        failed, if its retry time would run out meanwhile (as after a failure)."""
        service = self.api.config.services[row.service]
        elapsed = (timeutil.now() - row.due_time).total_seconds()
        if elapsed + seconds > service.callback_retry_seconds:
            self.store.release_callback(
                row.id, worker, state=FAILED, last_error=row.last_error
                or "not attempted: its receiver kept failing until the retry time ran out")
            return
        self.store.release_callback(row.id, worker,
                                    next_attempt=timeutil.add_seconds(timeutil.now(), seconds))

    def deliver(self, row, worker: str) -> bool | None:
        """One attempt at ``row`` (leased to ``worker``), and its outcome recorded;
        whether its receiver answered (a status under 500), failed (no answer, a
        5xx), or None when it was not attempted."""
        service = self.api.config.services.get(row.service)
        maker = PAYLOADS.get(row.subject_kind)
        if service is None or maker is None:
            self._give_up(row, worker, None, f"no {row.subject_kind!r} callbacks in "
                          f"service {row.service!r}")
            return None
        doc = maker(self.api, row, self.base)
        if doc is None:
            self._give_up(row, worker, None, f"the {row.subject_kind} no longer exists")
            return None
        body = json.dumps(doc).encode()
        try:
            status = post(row.url, body, service)
        except callbacks.CallbackError as exc:
            self._failed(row, worker, service, None, str(exc))
            return False
        except Exception as exc:    # unforeseen: still an attempt, so retries stay bounded
            log.exception("callback %s: the attempt failed", row.id)
            self._failed(row, worker, service, None, f"the request failed ({type(exc).__name__})")
            return False
        if 200 <= status < 300:
            self.store.finish_attempt(row.id, worker, state=DELIVERED,
                                      last_status=status, last_error=None,
                                      delivered_time=timeutil.now())
        else:
            self._failed(row, worker, service, status, f"the receiver answered {status}")
        return status < 500

    def _failed(self, row, worker: str, service, status: int | None, error: str) -> None:
        attempts = row.attempts + 1
        delay = callbacks.retry_delay(attempts, service.callback_backoff)
        elapsed = (timeutil.now() - row.due_time).total_seconds()
        if callbacks.gives_up(attempts, service.callback_max_attempts, elapsed, delay,
                              service.callback_retry_seconds):
            self._give_up(row, worker, status, error)
            return
        self.store.finish_attempt(row.id, worker, last_status=status, last_error=error,
                                  next_attempt=timeutil.add_seconds(timeutil.now(), delay))

    def _give_up(self, row, worker: str, status: int | None, error: str) -> None:
        self.store.finish_attempt(row.id, worker, state=FAILED,
                                  last_status=status, last_error=error)


def post(url: str, body: bytes, service) -> int:
    """POST ``body`` to ``url`` (its addresses checked again now, and connected to
    as checked; no redirect followed); the HTTP status.  CallbackError when no
    checked address answers, or the exchange outlasts ``callback_timeout`` twice
    (connecting, then the answer), however slowly the receiver trickles bytes."""
    target = callbacks.target(url, service.callback_hosts)
    try:
        path, host = request_target(url)
    except ValueError:
        raise callbacks.CallbackError("the receiver's name cannot be sent (IDNA)") from None
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, "Host": host,
               **callbacks.signed_headers(service.callback_secret, int(time.time()), body)}
    conn = PinnedConnection(target.host, target.port, target.addresses[:MAX_ADDRESSES],
                            tls=target.scheme == "https", timeout=service.callback_timeout,
                            deadline=time.monotonic() + 2 * service.callback_timeout)
    try:
        conn.connect()
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
    except (OSError, http.client.HTTPException, ValueError) as exc:
        reason = _failure(exc, conn)
        conn.close()
        raise callbacks.CallbackError(reason) from None
    try:    # the status says it all: some of the body is read, politely, then dropped
        response.read(MAX_RESPONSE_BYTES)
    except (OSError, http.client.HTTPException):
        pass
    finally:
        conn.close()
    return response.status


def _failure(exc: Exception, conn: PinnedConnection) -> str:
    if conn.expired or isinstance(exc, TimeoutError):
        return "the receiver did not answer in time"
    if isinstance(exc, ssl.SSLError):
        return "the TLS connection to the receiver failed"
    if conn.sock is None:       # no checked address accepted the connection
        return "the receiver cannot be reached"
    return f"the request failed ({type(exc).__name__})"
