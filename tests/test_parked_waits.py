"""Blocking GETs (``WAIT``) under ``uws serve`` hold no worker thread
(:mod:`uws.http.parking`).

A WAIT that must wait is parked: its thread is freed, its connection stays open,
and it is answered when its job leaves the phase, at its timeout, or never (its
waiter dropped at once) when its client hangs up.  The server here is the one
``uws serve`` builds (:func:`uws.http.server.create`), in this process on a free
port, so that the tests can read its waiter count.  The store's side of waiting
(LISTEN/NOTIFY, polling) is tested in test_wait.py and test_notify.py: SQLite only.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import socket
import threading
import time

import pytest
import requests
from pyvo.dal.tap import AsyncTAPJob

from uws.http import server as httpserver
from uws.web.app import create_app, shutdown

from conftest import assert_valid_uws, make_config
from uwshelp import Waiter, wait_for

UWS = "{http://www.ivoa.net/xml/UWS/v1.0}"
HTTP_TIMEOUT = 30
#: "at once": far under the WAIT=30 asked, which a request that waited would last
AT_ONCE = 5.0


class ParkingServer:
    """The app behind the server ``uws serve`` builds, its event loop in a thread."""

    def __init__(self, tmp_path, **settings):
        settings = {"wait_max": 60, "host": "127.0.0.1", "port": 0, **settings}
        self.config = make_config(tmp_path, "", **settings)
        self.app = create_app(self.config)
        self.server = httpserver.create(self.app, self.config, httpserver.raise_open_file_limit(),
                                        "127.0.0.1")
        self.port = self.server.effective_port
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            self.server.asyncore.loop(timeout=0.05, map=self.server._map, count=1)

    @property
    def waiting(self) -> int:
        """The app's waiters (what /metrics shows as uws_blocked_waits)."""
        return self.app.extensions["uws"].watch.waiting

    def close(self):
        import waitress.wasyncore
        self.app.extensions["uws"].watch.stop()
        self._stop.set()
        self._thread.join(timeout=5)
        self.server.task_dispatcher.shutdown(timeout=5)
        waitress.wasyncore.close_all(self.server._map)
        shutdown(self.app)


@pytest.fixture
def serve(tmp_path):
    """Start a ParkingServer with the given ``[server]`` settings."""
    started = []

    def start(**settings) -> ParkingServer:
        server = ParkingServer(tmp_path / f"s{len(started)}", **settings)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture
def srv(serve):
    return serve()


# -- helpers ------------------------------------------------------------------------------

def phase_of(body: bytes) -> str:
    return assert_valid_uws(body).find(UWS + "phase").text


def http_create(base: str, **params) -> str:
    r = requests.post(f"{base}/sleep", data=params, allow_redirects=False, timeout=HTTP_TIMEOUT)
    assert r.status_code == 303, r.text
    return r.headers["Location"]


def abort(job: str) -> None:
    r = requests.post(f"{job}/phase", data={"PHASE": "ABORT"}, allow_redirects=False,
                      timeout=HTTP_TIMEOUT)
    assert r.status_code == 303


def path_of(url: str) -> str:
    return "/" + url.split("/", 3)[3]


def send_get(port: int, path: str, source: str = "127.0.0.1", requests_: int = 1):
    """A connection from ``source`` that sent ``requests_`` GETs of ``path`` (pipelined)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=HTTP_TIMEOUT,
                                 source_address=(source, 0))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode() * requests_)
    return s


def read_answer(s: socket.socket, buffered: bytearray | None = None) -> tuple[int, bytes]:
    """One HTTP answer from ``s`` (Content-Length framed): its status and body.  Bytes
    read past it stay in ``buffered``, for the next answer."""
    data = buffered if buffered is not None else bytearray()
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, "the server closed the connection without an answer"
        data += chunk
    head, _, _ = bytes(data).partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    start = len(head) + 4
    while len(data) < start + length:
        chunk = s.recv(65536)
        assert chunk, "the server closed the connection in the middle of an answer"
        data += chunk
    body = bytes(data[start:start + length])
    del data[:start + length]
    return int(head.split(b" ", 2)[1]), body


#: the addresses a crowd of waiters comes from (an address parks a share of them)
CROWD = tuple(f"127.0.0.{i}" for i in range(2, 22))


@contextlib.contextmanager
def parked(srv: ParkingServer, url: str, count: int = 1, sources=("127.0.0.1",)):
    """``count`` connections with a WAIT of ``url`` parked (spread over ``sources``)."""
    before = srv.waiting
    sockets = [send_get(srv.port, path_of(url), sources[i % len(sources)]) for i in range(count)]
    try:
        wait_for(lambda: srv.waiting >= before + count, timeout=10, step=0.01)
        yield sockets
    finally:
        for s in sockets:
            s.close()


# -- answered ---------------------------------------------------------------------------

def test_a_parked_wait_is_answered_when_its_job_leaves_the_phase(srv):
    job = http_create(srv.url, DURATION="30")
    waiter = Waiter(f"{job}?WAIT=30")
    waiter.start()
    wait_for(lambda: srv.waiting == 1, timeout=10, step=0.01)
    aborted_at = time.monotonic()
    abort(job)
    waiter.join(timeout=HTTP_TIMEOUT)
    assert waiter.error is None and waiter.response is not None
    assert waiter.response.status_code == 200
    assert phase_of(waiter.response.content) == "ABORTED"
    assert waiter.returned_at >= aborted_at
    assert waiter.returned_at - aborted_at < AT_ONCE, "answered only near its timeout"
    assert srv.waiting == 0


def test_a_parked_wait_is_answered_at_its_timeout(srv):
    job = http_create(srv.url, DURATION="30")
    started = time.monotonic()
    r = requests.get(f"{job}?WAIT=1", timeout=HTTP_TIMEOUT)
    elapsed = time.monotonic() - started
    assert r.status_code == 200 and phase_of(r.content) == "PENDING"
    assert 0.9 <= elapsed < 3.0, f"WAIT=1 on an unchanging PENDING job took {elapsed:.2f} s"
    assert srv.waiting == 0


def test_a_wait_beyond_wait_max_is_answered_at_wait_max(serve):
    srv = serve(wait_max=1)
    job = http_create(srv.url, DURATION="30")
    started = time.monotonic()
    r = requests.get(f"{job}?WAIT=-1", timeout=HTTP_TIMEOUT)
    elapsed = time.monotonic() - started
    assert r.status_code == 200 and phase_of(r.content) == "PENDING"
    assert 0.9 <= elapsed < 3.0, f"WAIT=-1 with wait_max = 1 took {elapsed:.2f} s"


def test_a_notice_without_a_phase_change_parks_the_wait_again(srv):
    """A notice about the job (PostgreSQL echoes a process's own) wakes the waiter,
    which finds the phase unchanged and parks again until its timeout."""
    job = http_create(srv.url, DURATION="30")
    waiter = Waiter(f"{job}?WAIT=2")
    waiter.start()
    wait_for(lambda: srv.waiting == 1, timeout=10, step=0.01)
    started = time.monotonic()
    srv.app.extensions["uws"].watch.notify(job.rsplit("/", 1)[1])
    waiter.join(timeout=HTTP_TIMEOUT)
    assert waiter.response is not None and waiter.response.status_code == 200
    assert phase_of(waiter.response.content) == "PENDING"
    assert waiter.returned_at - started >= 0.5, "the notice answered the WAIT"


def test_a_request_pipelined_after_a_parked_wait_is_answered_after_it(srv):
    job = http_create(srv.url, DURATION="30")
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=HTTP_TIMEOUT)
    host = f"Host: 127.0.0.1:{srv.port}\r\n\r\n"
    s.sendall(f"GET {path_of(job)}?WAIT=30 HTTP/1.1\r\n{host}"
              f"GET {path_of(job)}/phase HTTP/1.1\r\n{host}".encode())
    wait_for(lambda: srv.waiting == 1, timeout=10, step=0.01)
    abort(job)
    buffered = bytearray()
    status, body = read_answer(s, buffered)
    assert status == 200 and phase_of(body) == "ABORTED"
    status, body = read_answer(s, buffered)
    assert status == 200 and body.strip() == b"ABORTED"
    s.close()


# -- hang-up, deletion, bad input ---------------------------------------------------

def test_a_client_hanging_up_drops_its_parked_waiter_at_once(srv):
    job = http_create(srv.url, DURATION="30")
    s = send_get(srv.port, f"{path_of(job)}?WAIT=30")
    wait_for(lambda: srv.waiting == 1, timeout=10, step=0.01)
    s.close()
    wait_for(lambda: srv.waiting == 0, timeout=AT_ONCE, step=0.01)
    assert srv.server.parking.count == 0


def test_a_wait_on_a_job_deleted_while_parked_is_404(srv):
    job = http_create(srv.url, DURATION="30")
    waiter = Waiter(f"{job}?WAIT=30")
    waiter.start()
    wait_for(lambda: srv.waiting == 1, timeout=10, step=0.01)
    r = requests.delete(job, allow_redirects=False, timeout=HTTP_TIMEOUT)
    assert r.status_code == 303
    waiter.join(timeout=HTTP_TIMEOUT)
    assert waiter.response is not None and waiter.response.status_code == 404
    assert srv.waiting == 0 and srv.server.parking.count == 0


@pytest.mark.parametrize("value", ["soon", "1.5", "-2"])
def test_a_wait_that_is_not_a_whole_number_of_seconds_is_400(srv, value):
    job = http_create(srv.url, DURATION="30")
    r = requests.get(f"{job}?WAIT={value}", timeout=HTTP_TIMEOUT)
    assert r.status_code == 400
    assert srv.waiting == 0


# -- no thread, and bounds --------------------------------------------------------------

def test_five_hundred_parked_waits_add_no_thread(serve):
    srv = serve()
    job = http_create(srv.url, DURATION="30")
    threads = threading.active_count()
    dispatcher = srv.server.task_dispatcher
    with parked(srv, f"{job}?WAIT=30", 500, CROWD):
        # a few threads may come and go beside (the sweeps' scheduler starts its own)
        assert threading.active_count() <= threads + 4
        # every worker thread idle (the last parked request's may still be unwinding)
        wait_for(lambda: dispatcher.active_count == 0, timeout=AT_ONCE, step=0.01)
        started = time.monotonic()
        r = requests.get(job, timeout=HTTP_TIMEOUT)      # the threads are free
        assert r.status_code == 200 and phase_of(r.content) == "PENDING"
        assert time.monotonic() - started < AT_ONCE
    wait_for(lambda: srv.waiting == 0, timeout=AT_ONCE, step=0.01)


def test_a_wait_beyond_max_waiters_is_answered_at_once(serve):
    srv = serve(max_waiters=2)
    job = http_create(srv.url, DURATION="30")
    with parked(srv, f"{job}?WAIT=30", 2):
        started = time.monotonic()
        r = requests.get(f"{job}?WAIT=30", timeout=HTTP_TIMEOUT)
        assert r.status_code == 200 and phase_of(r.content) == "PENDING"
        assert time.monotonic() - started < AT_ONCE
        assert srv.server.parking.count == 2


def test_one_address_parks_at_most_its_share_of_waits(serve):
    """With max_waiters = 100 an address holds 10; past them its WAIT is answered at
    once, while another address's still parks."""
    srv = serve(max_waiters=100, connections_per_address=100)
    job = http_create(srv.url, DURATION="30")
    with parked(srv, f"{job}?WAIT=30", 10):
        started = time.monotonic()
        r = requests.get(f"{job}?WAIT=30", timeout=HTTP_TIMEOUT)
        assert r.status_code == 200 and phase_of(r.content) == "PENDING"
        assert time.monotonic() - started < AT_ONCE
        with parked(srv, f"{job}?WAIT=30", 1, sources=("127.0.0.2",)):
            assert srv.server.parking.count == 11


def test_pyvo_wait_ends_with_its_job_beside_a_thousand_parked_waits(serve):
    srv = serve()
    others = http_create(srv.url, DURATION="30")
    with parked(srv, f"{others}?WAIT=60", 1000, CROWD):
        job = AsyncTAPJob(http_create(srv.url, DURATION="0.5"))
        job.run()
        job.wait(timeout=30)
        returned = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        assert job.phase == "COMPLETED"
        assert srv.waiting == 1000
    ended = job.job.endtime.to_datetime()      # naive UTC, as pyvo parses it
    assert ended <= returned
    assert (returned - ended).total_seconds() < AT_ONCE, "answered long after the job ended"


# -- the event loop ---------------------------------------------------------------------

def test_a_turn_of_the_event_loop_asks_nothing_of_parked_connections(srv, monkeypatch):
    """Parked connections rest in a set kept between turns: asking each of thousands
    whether it is readable on every turn made each turn cost tens of milliseconds."""
    job = http_create(srv.url, DURATION="30")
    asked = []
    readable = httpserver.Channel.readable

    def counted(channel):
        if channel.parked is not None:
            asked.append(channel)
        return readable(channel)

    with parked(srv, f"{job}?WAIT=30", 20, CROWD):
        wait_for(lambda: srv.server.task_dispatcher.active_count == 0, timeout=AT_ONCE,
                 step=0.01)
        assert requests.get(job, timeout=HTTP_TIMEOUT).status_code == 200  # turns: they rest
        monkeypatch.setattr(httpserver.Channel, "readable", counted)
        for _ in range(5):
            assert requests.get(job, timeout=HTTP_TIMEOUT).status_code == 200
        assert srv.server.parking.count == 20
        assert asked == []


def test_a_hang_up_among_many_parked_connections_drops_only_its_waiter(srv):
    job = http_create(srv.url, DURATION="30")
    with parked(srv, f"{job}?WAIT=30", 50, CROWD) as sockets:
        sockets[7].close()
        wait_for(lambda: srv.waiting == 49, timeout=AT_ONCE, step=0.01)
        assert srv.server.parking.count == 49


def test_connections_that_reuse_the_numbers_of_hung_up_parked_ones_are_served(srv):
    job = http_create(srv.url, DURATION="30")
    with parked(srv, f"{job}?WAIT=30", 30, CROWD) as sockets:
        for s in sockets:
            s.close()
        fresh = [send_get(srv.port, path_of(job), CROWD[i % len(CROWD)]) for i in range(30)]
        try:
            for s in fresh:
                status, body = read_answer(s)
                assert status == 200 and phase_of(body) == "PENDING"
        finally:
            for s in fresh:
                s.close()
        wait_for(lambda: srv.waiting == 0, timeout=AT_ONCE, step=0.01)


def test_a_parked_wait_woken_after_a_request_was_pipelined_behind_it_answers_both(srv):
    """The pipelined request takes the connection out of the resting set (it reads
    nothing more); the wake must still reach the loop."""
    job = http_create(srv.url, DURATION="30")
    s = send_get(srv.port, f"{path_of(job)}?WAIT=30")
    wait_for(lambda: srv.waiting == 1, timeout=10, step=0.01)
    wait_for(lambda: srv.server.task_dispatcher.active_count == 0, timeout=AT_ONCE, step=0.01)
    s.sendall(f"GET {path_of(job)}/phase HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n\r\n".encode())
    wait_for(lambda: any(len(c.requests) == 2 for c in srv.server.active_channels.values()),
             timeout=AT_ONCE, step=0.01)
    abort(job)
    buffered = bytearray()
    status, body = read_answer(s, buffered)
    assert status == 200 and phase_of(body) == "ABORTED"
    status, body = read_answer(s, buffered)
    assert status == 200 and body.strip() == b"ABORTED"
    s.close()
