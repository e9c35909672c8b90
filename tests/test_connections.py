"""Hostile connections against ``uws serve`` itself: floods of idle sockets, slow
headers, clients that never read, one address holding many connections.

Every test starts the installed ``uws serve`` as a subprocess, on 127.0.0.1.
Hostile sockets come from other loopback addresses (127.0.0.2, ...), so the
per-address bound never counts the honest client's own connections."""
from __future__ import annotations

import contextlib
import os
import resource
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests

from conftest import free_port
from uwshelp import UWS_COMMAND, wait_for

BIG = 40 * 1024 * 1024          # over waitress's 16 MiB output high watermark


@pytest.fixture
def serve(tmp_path):
    """A function starting ``uws serve`` with the given ``[server]`` settings; its port."""
    started = []

    def start(soft_open_files=None, **server):
        port = free_port()
        config = tmp_path / f"uws-{port}.toml"
        config.write_text("[server]\n" + "".join(f"{k} = {v!r}\n" for k, v in server.items()))
        env = {k: v for k, v in os.environ.items() if not k.startswith("UWS_")}
        process = subprocess.Popen(
            [UWS_COMMAND, "serve", "--config", str(config), "--port", str(port),
             "--data-dir", str(tmp_path / f"data-{port}")], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=soft_open_files and (lambda: _set_soft_open_files(soft_open_files)))
        started.append(process)
        wait_for(lambda: _answers(port), timeout=30, step=0.1)
        start.process = process
        return port

    yield start
    for process in started:
        process.terminate()
        process.wait(10)


def _set_soft_open_files(soft: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE,
                       (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def _answers(port: int) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _connect(port: int, source: str, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    return s


def _closed_by_server(s: socket.socket, timeout: float) -> bool:
    """True when the server closes ``s`` within ``timeout`` (whatever it sent first)."""
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _timed_get(port: int, path: str = "/", timeout: float = 30) -> float:
    started = time.monotonic()
    r = requests.get(f"http://127.0.0.1:{port}{path}", timeout=timeout)
    assert r.status_code == 200
    return time.monotonic() - started


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _served_connections(port: int, source_prefix: str) -> int:
    """The server's ESTABLISHED sockets on ``port`` whose peer address starts with
    ``source_prefix`` (read from /proc/net/tcp: the server's side, not the client's)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = line.split()[1:4]
        if state != "01" or int(local.split(":")[1], 16) != port:
            continue
        peer = socket.inet_ntoa(bytes.fromhex(remote.split(":")[0])[::-1])
        count += peer.startswith(source_prefix)
    return count


def _sources(count: int):
    """Loopback source addresses 127.0.1.1, 127.0.1.2, ... (never 127.0.0.1)."""
    return [f"127.0.1.{i}" for i in range(1, count + 1)]


@pytest.fixture
def many_files():
    """This process's open-file limit raised as far as allowed (to open 2,000 sockets)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2600
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.fail(f"the hard open-file limit ({hard}) is below {wanted}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_thousands_of_idle_connections_neither_end_nor_starve_the_server(serve, many_files):
    port = serve()
    pid = serve.process.pid
    held = []
    try:
        for source in _sources(40):                 # 50 connections from each of 40 addresses
            held += [_connect(port, source) for _ in range(50)]
        # all accepted: the server holds more than 2,000 descriptors (select() stops at 1,023)
        wait_for(lambda: _descriptors(pid) > 2000, timeout=30, step=0.2)
        elapsed = _timed_get(port)
        assert serve.process.poll() is None
        assert elapsed < 5          # a real request is not starved (about 10 ms when idle)
    finally:
        for s in held:
            s.close()
    assert serve.process.poll() is None and _answers(port)


def test_one_client_address_holds_at_most_connections_per_address(serve):
    port = serve(connections_per_address=5)
    mine = [_connect(port, "127.0.1.1") for _ in range(5)]
    try:
        wait_for(lambda: _descriptors(serve.process.pid) >= 5, timeout=10)
        extra = _connect(port, "127.0.1.1")
        assert _closed_by_server(extra, timeout=10)
        _timed_get(port)                            # another address is served
        mine.pop().close()
        time.sleep(0.5)
        again = _connect(port, "127.0.1.1")         # a closed one frees its place
        again.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert again.recv(100).startswith(b"HTTP/1.1 200")
        again.close()
    finally:
        for s in mine:
            s.close()


def test_request_headers_sent_slowly_are_cut_off(serve):
    port = serve(header_timeout=1)
    s = _connect(port, "127.0.1.1")
    s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    deadline = time.monotonic() + 30
    closed = False
    with contextlib.suppress(OSError):
        while time.monotonic() < deadline:
            s.sendall(b"X-A: b\r\n")                # a header line every 0.2 s, never the end
            time.sleep(0.2)
    closed = time.monotonic() < deadline
    s.close()
    assert closed


def test_an_idle_connection_is_closed_after_idle_timeout(serve):
    port = serve(idle_timeout=1)
    s = _connect(port, "127.0.1.1")
    assert _closed_by_server(s, timeout=20)
    s.close()


def _upload_big_file(port: int) -> str:
    """A job whose FILE parameter is a BIG upload; the parameter's URL."""
    data = bytes(range(256)) * (BIG // 256)
    r = requests.post(f"http://127.0.0.1:{port}/checksum", files={"FILE": ("big.bin", data)},
                      allow_redirects=False, timeout=60)
    assert r.status_code == 303, r.text
    return r.headers["Location"] + "/parameters/FILE"


def _never_read(port: int, url: str, sources, headers: bytes = b"", pipelined: int = 1):
    path = url.split(f":{port}", 1)[1].encode()
    request = b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n"
    sockets = []
    for source in sources:
        s = _connect(port, source, rcvbuf=4096)
        s.sendall(request * pipelined)
        sockets.append(s)
    return sockets


@pytest.mark.parametrize("headers", [b"", b"Range: bytes=0-\r\n"], ids=["whole", "range"])
def test_clients_that_never_read_a_large_file_hold_no_worker_thread(serve, headers):
    # send_timeout is long: only sending from the event loop can free the threads
    port = serve(threads=2, send_timeout=600)
    url = _upload_big_file(port)
    readers = _never_read(port, url, _sources(8), headers)
    try:
        time.sleep(1)
        assert _timed_get(port, timeout=20) < 10
    finally:
        for s in readers:
            s.close()


def test_pipelined_requests_from_a_client_that_reads_nothing_free_their_thread(serve):
    port = serve(threads=2, send_timeout=2)
    url = _upload_big_file(port)
    readers = _never_read(port, url, _sources(2), pipelined=2)
    try:
        # each connection's second request waits for the first response to be taken,
        # at most send_timeout, then the connection is closed and the thread is free
        time.sleep(3)
        assert _timed_get(port, timeout=30) < 25
        assert all(_closed_by_server(s, timeout=20) for s in readers)
    finally:
        for s in readers:
            s.close()


@pytest.mark.parametrize("pipelined", [1, 2], ids=["idle", "pipelined"])
def test_the_connections_of_a_client_that_stopped_reading_are_closed(serve, pipelined):
    # Watched from the server's side (its open descriptors), never by reading from
    # the stalled sockets: reading would let the server flush, then close, anyway.
    port = serve(threads=4, idle_timeout=2, send_timeout=2)
    url = _upload_big_file(port)
    readers = _never_read(port, url, _sources(3), pipelined=pipelined)
    try:
        wait_for(lambda: _served_connections(port, "127.0.1.") == 3, timeout=10)
        wait_for(lambda: _served_connections(port, "127.0.1.") == 0, timeout=30, step=0.2)
    finally:
        for s in readers:
            s.close()


def test_a_range_of_a_file_served_by_uws_serve_is_exactly_its_bytes(serve):
    port = serve()
    url = _upload_big_file(port)
    whole = bytes(range(256)) * (BIG // 256)
    r = requests.get(url, headers={"Range": "bytes=1000-1999"}, timeout=30)
    assert r.status_code == 206 and r.content == whole[1000:2000]
    r = requests.get(url, headers={"Range": f"bytes={BIG - 10}-"}, timeout=30)
    assert r.status_code == 206 and r.content == whole[-10:]
    r = requests.get(url, headers={"Range": "bytes=0-"}, timeout=60)
    assert r.status_code == 206 and r.content == whole


def test_an_error_escaping_the_event_loop_does_not_end_the_server():
    from uws import cli

    class Loop:
        runs = 0

        def run(self):          # fails twice (as select() did past fd 1023), then stops
            self.runs += 1
            if self.runs <= 2:
                raise ValueError("filedescriptor out of range in select()")

    loop = Loop()
    cli._serve_until_stopped(loop)
    assert loop.runs == 3


def test_jobs_still_run_while_thousands_of_connections_are_open(serve, many_files):
    port = serve()
    held = []
    try:
        for source in _sources(30):
            held += [_connect(port, source) for _ in range(50)]
        wait_for(lambda: _descriptors(serve.process.pid) > 1500, timeout=30, step=0.2)
        r = requests.post(f"http://127.0.0.1:{port}/sleep", data={"DURATION": "0",
                          "PHASE": "RUN"}, allow_redirects=False, timeout=30)
        job = r.headers["Location"]

        def finished():
            return requests.get(f"{job}/phase", timeout=30).text not in (
                "PENDING", "QUEUED", "EXECUTING")
        wait_for(finished, timeout=60, step=0.2)
        assert requests.get(f"{job}/phase", timeout=30).text == "COMPLETED"
    finally:
        for s in held:
            s.close()


def test_uws_serve_raises_its_soft_open_file_limit_to_the_hard_one(serve):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 1024:
        pytest.fail(f"the hard open-file limit ({hard}) leaves nothing to raise")
    serve(soft_open_files=1024)
    limits = open(f"/proc/{serve.process.pid}/limits").read()
    soft_now = [line.split()[3] for line in limits.splitlines()
                if line.startswith("Max open files")][0]
    assert soft_now != "1024"


# -- request bodies buffered before the application sees them ---------------------------

MIB = 1 << 20


def _stalled_upload(port: int, source: str, length: int) -> socket.socket:
    """A POST announcing ``length`` body bytes that sends only the first few."""
    s = _connect(port, source)
    s.sendall(b"POST /sleep HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Type: application/x-www-form-urlencoded\r\n"
              b"Content-Length: %d\r\n\r\nx=1" % length)
    return s


def _status_within(s: socket.socket, timeout: float) -> int | None:
    """The status code the server answers on ``s`` within ``timeout``, else None."""
    s.settimeout(timeout)
    try:
        head = s.recv(4096)
    except (TimeoutError, ConnectionResetError):
        return None
    return int(head.split()[1]) if head.startswith(b"HTTP/") else None


def test_bodies_beyond_the_buffered_bytes_budget_answer_503_at_once(serve):
    # max_upload_bytes 1 MiB: bodies up to 2 MiB; 5 MiB for all of them at once
    port = serve(max_upload_bytes=MIB, max_buffered_bytes=5 * MIB)
    held = [_stalled_upload(port, source, 2 * MIB - 100) for source in _sources(2)]
    time.sleep(0.3)
    refused = _stalled_upload(port, "127.0.1.3", 2 * MIB - 100)
    assert _status_within(refused, 5) == 503
    for s in held:      # the bodies within the budget are still being waited for
        assert _status_within(s, 0.2) is None
    for s in held + [refused]:
        s.close()


def test_small_requests_still_fit_beside_stalled_bodies(serve):
    port = serve(max_upload_bytes=MIB, max_buffered_bytes=5 * MIB)
    held = [_stalled_upload(port, source, 2 * MIB - 100) for source in _sources(2)]
    time.sleep(0.3)
    r = requests.post(f"http://127.0.0.1:{port}/sleep", data={"DURATION": "0"}, timeout=10,
                      allow_redirects=False)
    assert r.status_code == 303
    for s in held:
        s.close()


def test_the_budget_is_given_back_when_a_stalled_body_is_abandoned(serve):
    port = serve(max_upload_bytes=MIB, max_buffered_bytes=5 * MIB)
    held = [_stalled_upload(port, source, 2 * MIB - 100) for source in _sources(2)]
    for s in held:
        s.close()
    time.sleep(0.5)
    body = {"DURATION": "0", "MESSAGE": "x" * (2 * MIB - 4096)}
    for _ in range(3):      # more than the budget holds at once, one after the other
        r = requests.post(f"http://127.0.0.1:{port}/sleep", data=body, timeout=10,
                          allow_redirects=False)
        assert r.status_code in (303, 400), r.text    # received, then judged by the app
        assert r.status_code != 503


def test_one_client_address_may_hold_at_most_a_quarter_of_the_budget(serve):
    # 8 MiB in all, 2 MiB (one whole body) for any one address
    port = serve(max_upload_bytes=MIB, max_buffered_bytes=8 * MIB)
    first = _stalled_upload(port, "127.0.1.1", int(1.5 * MIB))
    time.sleep(0.3)
    second = _stalled_upload(port, "127.0.1.1", int(1.5 * MIB))
    assert _status_within(second, 5) == 503
    other = _stalled_upload(port, "127.0.1.2", int(1.5 * MIB))
    assert _status_within(other, 0.5) is None       # another address has its own share
    for s in (first, second, other):
        s.close()


# -- the event loop ----------------------------------------------------------------------

@pytest.fixture
def bare_server(tmp_path):
    """uws serve's waitress server for a trivial app, on a free port, not running."""
    from uws.config.settings import from_dict
    from uws.http import server as httpserver

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    cfg = from_dict({}, env={}, port=0, data_dir=tmp_path / "data")
    server = httpserver.create(app, cfg, 4096, "localhost")
    yield server
    server.close()


def test_one_turn_of_the_loop_accepts_every_connection_waiting(bare_server):
    port = int(bare_server.effective_port)
    waiting = [_connect(port, source) for source in _sources(5) for _ in range(8)]
    time.sleep(0.2)         # all 40 are in the listen backlog
    bare_server.handle_accept()
    assert len(bare_server.active_channels) == 40
    for s in waiting:
        s.close()


def test_the_loop_serves_connections_whose_descriptor_numbers_are_reused(bare_server):
    import threading
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            bare_server.asyncore.loop(timeout=0.05, map=bare_server._map, count=1)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        for _ in range(30):     # each closes before the next opens: the same numbers again
            r = requests.get(f"http://127.0.0.1:{bare_server.effective_port}/", timeout=2,
                             headers={"Connection": "close"})
            assert r.text == "ok"
    finally:
        stop.set()
        thread.join(5)


def test_a_connection_never_receives_the_events_of_a_closed_one_with_its_number():
    import select

    from uws.http.loop import PollLoop

    class Conn:
        accepting = False

        def __init__(self, name, log):
            self.name, self.log = name, log

        def readable(self):
            return True

        def writable(self):
            return False

        def handle_read_event(self):
            self.log.append((self.name, "read"))
            if self.name == "a":        # closing b, and accepting c under b's number
                socket_map[6] = Conn("c", self.log)

        def handle_close(self):
            self.log.append((self.name, "close"))

    class FakePoll:
        def register(self, fd, flags):
            pass

        def poll(self, timeout):
            return [(5, select.POLLIN), (6, select.POLLHUP)]

    log: list = []
    socket_map = {5: Conn("a", log), 6: Conn("b", log)}
    loop = PollLoop()
    loop._poller = FakePoll
    loop.turn(0, socket_map)
    assert log == [("a", "read")]       # b's hang-up reached neither b (gone) nor c


@contextlib.contextmanager
def _channel_of(server):
    """A connection of ``server`` (not in its loop's map), and the client's socket;
    both closed afterwards."""
    ours, theirs = socket.socketpair()
    channel = server.channel_class(server, ours, ("127.0.0.9", 1), server.adj, map={})
    try:
        yield channel, theirs
    finally:
        channel.close()
        theirs.close()


def _held_by_another_thread(lock):
    """Hold ``lock`` in a thread, as a task thread writing its response does."""
    import threading
    taken, done = threading.Event(), threading.Event()

    def hold():
        with lock:
            taken.set()
            done.wait(5)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    taken.wait(5)
    return done, thread


def test_the_loop_does_not_poll_a_connection_whose_task_is_writing(bare_server):
    # Polling for POLLOUT then returns at once: the loop spun and took the GIL from
    # the very thread it waited for (throughput halved from 2 concurrent clients on).
    with _channel_of(bare_server) as (channel, client):
        channel.requests = [object()]
        channel.total_outbufs_len = 10
        done, thread = _held_by_another_thread(channel.outbuf_lock)
        try:
            assert not channel.writable()
        finally:
            done.set()
            thread.join(5)
        assert channel.writable()       # what the task could not send, the loop sends


def test_a_connection_to_close_is_polled_even_while_its_task_writes(bare_server):
    with _channel_of(bare_server) as (channel, client):
        channel.requests = [object()]
        channel.total_outbufs_len = 10
        channel.will_close = True
        done, thread = _held_by_another_thread(channel.outbuf_lock)
        try:
            assert channel.writable()
        finally:
            done.set()
            thread.join(5)


def test_a_connection_over_the_high_watermark_is_polled_while_its_task_waits(bare_server):
    with _channel_of(bare_server) as (channel, client):
        channel.requests = [object()]
        channel.total_outbufs_len = channel.adj.outbuf_high_watermark + 1
        done, thread = _held_by_another_thread(channel.outbuf_lock)
        try:
            assert channel.writable()       # the task waits for the loop to send
        finally:
            done.set()
            thread.join(5)


def test_output_a_task_leaves_unsent_is_polled_by_the_loop_it_wakes(bare_server):
    """The loop, woken by the task, must then see the connection writable: else it
    sleeps for a second while a slow reader's answer waits."""
    import concurrent.futures
    with _channel_of(bare_server) as (channel, client):      # the client reads nothing yet
        channel.requests = [object()]
        seen_by_loop = []

        def pull_trigger():         # the loop wakes at once and looks, from its thread
            with concurrent.futures.ThreadPoolExecutor(1) as loop:
                seen_by_loop.append(bool(loop.submit(channel.writable).result()))

        bare_server.pull_trigger = pull_trigger
        channel.write_soon(b"x" * (4 * 1024 * 1024))
        assert channel.total_outbufs_len > 0
        assert seen_by_loop and seen_by_loop[-1]
