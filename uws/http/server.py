"""The waitress server of ``uws serve``, hardened against hostile connections.

waitress alone lets an anonymous client take the server down or starve it:
``select()`` fails past descriptor 1023 and ends ``run()``; idle or slowly sent
headers hold connections for two minutes; a client that never reads a large
response keeps a worker thread waiting on it.  Here:

- the loop uses ``poll()``, the soft open-file limit is raised to the hard one,
  and the connection limit stays well under it (:func:`limits`);
- a connection whose request headers take longer than ``header_timeout``, or
  that does nothing for ``idle_timeout``, is closed;
- a worker thread waits at most ``send_timeout`` for a client that takes no
  bytes at all (:class:`Channel`), then the connection is closed;
- one client address holds at most ``connections_per_address`` connections
  (:class:`Server`): further ones are closed as soon as they are accepted; a trusted
  reverse proxy (``trusted_proxies``), which carries every client's connections, is
  spared (the application counts its clients by their forwarded address);
- waitress reads a whole request body (to memory, then a temporary file) before
  the application, and so authentication, sees it: the bodies being buffered
  share one budget (:mod:`uws.http.bodies`), and a request whose announced or
  received body does not fit answers 503 at once;
- an error in the accept loop is logged and the server goes on;
- the loop does not poll a connection whose task thread is writing its answer
  (:meth:`Channel.writable`): it would spin on it;
- each turn of the loop accepts every connection waiting (up to
  ``ACCEPT_BATCH``), so that honest clients do not queue for seconds in the
  listen backlog behind a flood, and hands each event only to the connection
  it was for (:class:`PollLoop`).

A blocking GET (``WAIT``) that must wait is parked (:mod:`uws.http.parking`): its
worker thread is freed, the connection stays open, and the request is served
again when its job changes or its time is up; a hang-up drops it at once.  A parked
connection costs the loop nothing per turn: it rests in a set kept between turns
(:class:`PollLoop`).

Files are sent by waitress's ``wsgi.file_wrapper`` path (see web/downloads.py),
from the event loop, so a slow reader of a file holds no worker thread.
"""
from __future__ import annotations

import collections
import dataclasses
import errno
import logging
import resource
import time

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import MultiSocketServer, TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher, WSGITask

from .bodies import BodyBudget, Parser
from .loop import PollLoop
from .parking import ENVIRON_KEY, Parked, Parking, Ticket, per_address_share
from .proxies import TrustedProxies

log = logging.getLogger("uws.http.server")

#: descriptors kept for everything but client connections (database, job files, pipes)
RESERVED_FDS = 256
#: a connection may use up to 3: its socket, a file being sent, an overflow buffer
FDS_PER_CONNECTION = 3
MAX_CONNECTIONS = 10_000
#: how long accepting pauses when the process is out of descriptors
ACCEPT_PAUSE = 0.5
#: connections accepted in one turn of the event loop, at most
ACCEPT_BATCH = 256


@dataclasses.dataclass(frozen=True)
class Limits:
    connections: int
    per_address: int


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit where allowed; the soft limit then."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return target if soft == resource.RLIM_INFINITY else soft


def limits(cfg, open_files: int) -> Limits:
    """The configured connection limits, or ones derived from the open-file limit."""
    derived = (open_files - RESERVED_FDS) // FDS_PER_CONNECTION
    connections = cfg.connection_limit or max(16, min(MAX_CONNECTIONS, derived))
    per_address = cfg.connections_per_address or max(8, min(100, connections // 10))
    return Limits(connections, min(per_address, connections))


class Task(WSGITask):
    """waitress's task, with the request's WAIT ticket in the environ (a request
    served again after parking keeps its ticket)."""

    def get_environment(self):
        environ = super().get_environment()
        ticket = getattr(self.request, "uws_ticket", None)
        if ticket is None:
            ticket = self.request.uws_ticket = Ticket(self.channel, self.channel.server.parking)
        environ[ENVIRON_KEY] = ticket
        return environ


class Channel(HTTPChannel):
    """A connection whose worker thread gives up on a client that reads nothing,
    and whose WAIT can be parked without a thread (:mod:`uws.http.parking`).

    waitress makes a task thread wait, without end, until a client has taken
    the response down to ``outbuf_high_watermark`` (a second pipelined request
    after a large file, or a large generated response).  Here the wait ends
    after ``send_timeout`` seconds without a byte sent, and the connection
    closes; a client that keeps reading keeps its connection."""

    task_class = Task
    _parked: Ticket | None = None

    @property
    def parked(self) -> Ticket | None:
        """The ticket of the request parked at the head (set by :mod:`.parking`)."""
        return self._parked

    @parked.setter
    def parked(self, ticket: Ticket | None) -> None:
        self._parked = ticket
        loop = self.server.asyncore
        if isinstance(loop, PollLoop):
            loop.review(self)       # it rests while parked: no cost per turn

    def service(self):
        """Serve the request at the head; a parked one stays there, its thread freed
        (requests pipelined after it wait their turn: nothing starts them meanwhile)."""
        try:
            super().service()
        except Parked as parked:
            parked.ticket.parked()

    def readable(self):
        """While parked, read on to see a hang-up at once (the waiter is then
        dropped); a request pipelined behind it is read, and nothing more."""
        if self.parked is not None:
            return len(self.requests) == 1 and not (
                self.will_close or self.close_when_flushed or self.total_outbufs_len)
        return super().readable()

    def _flush_outbufs_below_high_watermark(self):
        watermark = self.adj.outbuf_high_watermark
        if self.total_outbufs_len <= watermark:
            return
        started = time.time()
        with self.outbuf_lock:
            _, failed = self._flush_exception(self._flush_some, do_close=False)
            while not failed and self.connected and self.total_outbufs_len > watermark:
                stalled = time.time() - max(self.last_activity, started)
                if stalled > self.server.send_timeout:
                    self._give_up()
                    return
                self.server.pull_trigger()
                self.outbuf_lock.wait(min(1.0, self.server.send_timeout))
        if failed:
            self.server.pull_trigger()

    def _give_up(self) -> None:
        log.info("closing the connection of %s: it read nothing for %s s",
                 self.client_host, self.server.send_timeout)
        self.will_close = True
        self.connected = False      # the task ends (ClientDisconnected), none follows
        self.abandoned = True       # its pipelined requests stay queued: close anyway
        self.server.pull_trigger()

    def writable(self):
        """Not while a task thread holds the output lock to write and flush its
        answer itself: polling for POLLOUT would return at once, the loop spinning
        and taking the GIL from that very thread (which halved the server's
        throughput from two concurrent clients on).  Still when the output is over
        the high watermark: the task then waits for the loop to send it."""
        if self.requests and self.total_outbufs_len and not (
                self.will_close or self.close_when_flushed
                or self.total_outbufs_len > self.adj.outbuf_high_watermark):
            if not self.outbuf_lock.acquire(False):
                return False
            self.outbuf_lock.release()
        return super().writable()

    def write_soon(self, data):
        """waitress wakes the loop while the task still holds the output lock, so
        the loop may find the connection not writable and sleep: wake it again
        once the lock is free if output is left unsent (a client reading slowly)."""
        sent = super().write_soon(data)
        if self.total_outbufs_len:
            self.server.pull_trigger()
        return sent

    def parser_class(self, adj):
        return Parser(adj, self.server.budget, self.client_host)

    def __init__(self, server, sock, addr, adj, map=None):
        self.client_host = addr[0]
        self._counted = False
        self.abandoned = False
        super().__init__(server, sock, addr, adj, map=map)

    # counts the connections of each client address, while they are in the map
    def add_channel(self, map=None):
        super().add_channel(map)
        if not self._counted:
            self._counted = True
            self.server.connections_of[self.client_host] += 1

    def del_channel(self, map=None):
        loop = self.server.asyncore
        if isinstance(loop, PollLoop):
            loop.forget(self)
        if self._counted:
            self._counted = False
            self.server.release(self.client_host)
        for request in [self.request, *self.requests]:
            if isinstance(request, Parser):
                request.release()       # a body cut off with its connection
            ticket = getattr(request, "uws_ticket", None)
            if ticket is not None:
                ticket.drop()           # a parked WAIT's client hung up: no waiter left
        super().del_channel(map)


class Server(TcpWSGIServer):
    """waitress's TCP server with a bound per client address, request-header
    deadlines, and an accept loop that survives errors."""

    channel_class = Channel

    def __init__(self, *args, per_address: int, header_timeout: float, send_timeout: float,
                 parking: Parking, budget: BodyBudget | None = None,
                 trusted: TrustedProxies = TrustedProxies(), **kwargs):
        self.per_address = per_address
        self.trusted = trusted
        self.parking = parking
        self.budget = budget
        self.header_timeout = header_timeout
        self.send_timeout = send_timeout
        self.connections_of: collections.Counter = collections.Counter()
        self._accept_paused_until = 0.0
        self._last_refusal_log = 0.0
        super().__init__(*args, **kwargs)

    def release(self, host: str) -> None:
        self.connections_of[host] -= 1
        if self.connections_of[host] <= 0:
            del self.connections_of[host]

    def readable(self):
        accepting = super().readable()      # also runs maintenance()
        return accepting and time.monotonic() >= self._accept_paused_until

    def handle_accept(self):
        """Accept the connections waiting, up to ACCEPT_BATCH and the connection limit
        (one per turn, as waitress does, drains a flood's backlog at tens a second)."""
        for _ in range(ACCEPT_BATCH):
            if len(self._map) >= self.adj.connection_limit or not self._accept_one():
                return

    def _accept_one(self) -> bool:
        """Accept one connection; False when none is waiting or accepting failed."""
        try:
            pair = self.accept()
            if pair is None:
                return False
            conn, addr = pair
            self.set_socket_options(conn)
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                self._accept_paused_until = time.monotonic() + ACCEPT_PAUSE
            log.warning("accept() failed: %s", exc)
            return False
        self._admit(conn, addr)
        return True

    def _admit(self, conn, addr) -> None:
        if (self.connections_of[addr[0]] >= self.per_address
                and not self.trusted.trusts(addr[0])):
            conn.close()
            self._refused(addr[0])
            return
        try:
            self.channel_class(self, conn, addr, self.adj, map=self._map)
        except OSError as exc:          # reset before it could be set up
            log.info("dropped a connection from %s: %s", addr[0], exc)
            conn.close()

    def _refused(self, host: str) -> None:
        now = time.monotonic()
        if now - self._last_refusal_log > 10:
            self._last_refusal_log = now
            log.warning("refusing connections from %s: it holds %d (connections_per_address)",
                        host, self.per_address)

    def maintenance(self, now):
        """waitress closes connections idle for ``channel_timeout``; also close
        those whose request headers have not all come within ``header_timeout``."""
        super().maintenance(now)
        for channel in list(self.active_channels.values()):
            request = channel.request
            if request is None or request.headers_finished or channel.requests:
                continue
            first_seen = getattr(request, "uws_first_seen", None)
            if first_seen is None:
                request.uws_first_seen = now
            elif now - first_seen > self.header_timeout:
                channel.will_close = True
        self._close_abandoned()

    def _close_abandoned(self) -> None:
        """Close the connections marked for closing (idle, slow headers, a client
        that read nothing for send_timeout) that no task uses any more.  waitress
        closes a channel only once its socket is writable, which the socket of a
        client that stopped reading never becomes again."""
        for channel in list(self.active_channels.values()):
            if channel.will_close and (channel.abandoned or not channel.requests):
                channel.handle_close()

    def handle_error(self):
        """An unexpected error while accepting: log it and keep listening
        (wasyncore's default closes the listening socket)."""
        log.exception("error in the accept loop; serving on")


def create(app, cfg, open_files: int, server_name: str):
    """The server for ``app`` on cfg.host:cfg.port (one per address the host names)."""
    lim = limits(cfg, open_files)
    adj = Adjustments(
        host=cfg.host, port=cfg.port, threads=cfg.threads, ident="uws",
        asyncore_use_poll=True,             # select() fails past descriptor 1023
        connection_limit=lim.connections,
        channel_timeout=cfg.idle_timeout,
        # checks idle connections and header deadlines this often (seconds)
        cleanup_interval=max(1, min(cfg.idle_timeout, cfg.header_timeout) // 4),
        # waitress buffers a whole body before the app sees it: refuse
        # larger ones as their headers arrive.
        max_request_body_size=cfg.max_body_bytes,
        # the host of absolute URLs for HTTP/1.0 requests without Host
        # (waitress's default is a dummy)
        server_name=server_name)
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(adj.threads)
    socket_map: dict = {}
    budget = BodyBudget(cfg.buffer_limit, max(cfg.max_body_bytes, cfg.buffer_limit // 4))
    waiters = waiter_limit(cfg, lim)
    servers: list[Server] = []
    parking = Parking(waiters, per_address_share(waiters), lambda: servers[0].pull_trigger())
    servers += [Server(app, map=socket_map, dispatcher=dispatcher, adj=adj, sockinfo=info,
                       per_address=lim.per_address, header_timeout=cfg.header_timeout,
                       send_timeout=cfg.send_timeout, parking=parking, budget=budget,
                       trusted=TrustedProxies(cfg.trusted_proxies))
                for info in adj.listen]
    if len(servers) == 1:
        server = servers[0]
    else:
        server = MultiSocketServer(socket_map, adj, [(s.effective_host, s.effective_port)
                                                     for s in servers],
                                   dispatcher, servers[-1].log_info)
        server.effective_port = servers[-1].effective_port
    loop = PollLoop(parking)
    for each in {server, *servers}:    # what run() loops on; what channels tell of parking
        each.asyncore = loop
    server.parking = parking
    server.limits_text = (f"at most {lim.connections} connections, {lim.per_address} per "
                          f"client address (open-file limit {open_files}); {waiters} parked "
                          f"WAITs, {parking.per_address} per client address")
    return server


def waiter_limit(cfg, lim: Limits) -> int:
    """Parked WAITs at once: ``max_waiters``, or nine in ten connections (each holds one,
    and no thread), so that a tenth stays for everything else."""
    return cfg.max_waiters or max(1, lim.connections - lim.connections // 10)
