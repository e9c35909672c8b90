#!/usr/bin/env python
"""Parked WAITs under ``uws serve``: how many it holds, what they cost, how fast they wake.

Starts ``uws serve`` (bench.py's ``Server``: defaults, SQLite; the config only makes
``/metrics`` public, so the held count can be read), creates the jobs, then on
loopback only:

1. GET {job} p50/p99 from ``--clients`` honest keep-alive clients, no WAIT held;
2. opens ``--waiters`` connections, each with ``GET {job}?WAIT=-1`` for a PENDING job
   (spread over the jobs, from source addresses 127.0.2.x so that the per-address
   bounds do not cap them), and reads how many the server holds (``uws_blocked_waits``)
   and its RSS before and while holding them;
3. the same honest GETs while they are held;
4. wake latency: ``--single`` jobs aborted one after another (from the abort sent to
   each of its waiters answered), then ``--bulk`` jobs aborted by 8 threads at once.

Bounded in count and time (the waits end at the server's wait_max, 60 s, anyway); stops
the server at the end.  Prints a table.

    python bench/waiters.py [--waiters 10000] [--connection-limit N] [--quick]
"""
from __future__ import annotations

import argparse
import http.client
import os
import re
import resource
import selectors
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import HOST, Server, percentile

SOURCES = [f"127.0.2.{i}" for i in range(1, 255)]
PER_SOURCE = 80         # waiters per source address (the per-address bound is 100)


class WaitServer(Server):
    def __init__(self, data_dir: Path, log_path: Path, connection_limit: int):
        super().__init__(data_dir, log_path)
        self.connection_limit = connection_limit

    def _config_args(self) -> list[str]:
        path = self.log_path.with_name("uws.toml")
        extra = f"connection_limit = {self.connection_limit}\n" if self.connection_limit else ""
        path.write_text(f"[server]\nmetrics_public = true\n{extra}")
        return ["--config", str(path)]


class Conn:
    """One keep-alive HTTP/1.1 connection (http.client)."""

    def __init__(self, port: int):
        self.http = http.client.HTTPConnection(HOST, port, timeout=30)

    def request(self, method: str, path: str, body: str | None = None) -> tuple[int, bytes, dict]:
        headers = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
        self.http.request(method, path, body=body, headers=headers)
        r = self.http.getresponse()
        return r.status, r.read(), dict(r.getheaders())


def create_jobs(port: int, count: int) -> list[str]:
    conn, paths = Conn(port), []
    for _ in range(count):
        status, _, headers = conn.request("POST", "/sleep", "DURATION=600")
        assert status == 303, status
        paths.append("/" + headers["Location"].split("/", 3)[3])
    return paths


def honest_gets(port: int, path: str, clients: int, each: int) -> list[float]:
    times: list[float] = []
    lock = threading.Lock()

    def run():
        conn, mine = Conn(port), []
        for _ in range(each):
            started = time.perf_counter()
            status, _, _ = conn.request("GET", path)
            mine.append(time.perf_counter() - started)
            assert status == 200, status
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=run) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times


class Waiters:
    """Many raw connections each with one WAIT sent; one thread reads the answers."""

    def __init__(self, port: int):
        self.port = port
        self.selector = selectors.DefaultSelector()
        self.job_of: list[str] = []
        self.answered: dict[int, tuple[float, int]] = {}     # index -> (when, status)
        self.buffers: dict[int, bytes] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)

    def open(self, paths: list[str], count: int) -> None:
        self.reader.start()     # answers past the server's bounds close their sockets
        for i in range(count):
            path = paths[i % len(paths)]
            s = socket.socket()
            s.bind((SOURCES[i // PER_SOURCE], 0))
            s.settimeout(30)
            s.connect((HOST, self.port))
            s.sendall(f"GET {path}?WAIT=-1 HTTP/1.1\r\nHost: {HOST}:{self.port}\r\n\r\n".encode())
            s.setblocking(False)
            self.job_of.append(path)
            self.buffers[i] = b""
            self.selector.register(s, selectors.EVENT_READ, i)

    def _read(self) -> None:
        while not self.stop.is_set():
            if not self.selector.get_map():
                time.sleep(0.01)        # select() fails on an empty epoll set on some systems
                continue
            for key, _ in self.selector.select(0.05):
                i, s = key.data, key.fileobj
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    continue
                now = time.monotonic()
                self.buffers[i] += data
                if b"\r\n\r\n" in self.buffers[i] or not data:
                    status = int(self.buffers[i].split(b" ", 2)[1]) if data else 0
                    with self.lock:
                        self.answered.setdefault(i, (now, status))
                    self.selector.unregister(s)
                    s.close()

    def of_jobs(self, paths: set[str]) -> list[int]:
        return [i for i, p in enumerate(self.job_of) if p in paths]

    def wait_answered(self, indexes: list[int], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if all(i in self.answered for i in indexes):
                    return True
            time.sleep(0.002)
        return False

    def close(self) -> None:
        self.stop.set()
        self.reader.join(timeout=5)
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()


def abort(conn: Conn, path: str) -> float:
    sent = time.monotonic()
    status, _, _ = conn.request("POST", f"{path}/phase", "PHASE=ABORT")
    assert status == 303, status
    return sent


def blocked_waits(port: int) -> int:
    _, body, _ = Conn(port).request("GET", "/metrics")
    match = re.search(rb"^uws_blocked_waits (\S+)", body, re.M)
    return int(float(match.group(1))) if match else -1


def ms(values: list[float], q: float) -> str:
    return f"{percentile(values, q) * 1000:.1f}" if values else "-"


def raise_file_limit(needed: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, needed), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiters", type=int, default=10_000)
    parser.add_argument("--single", type=int, default=20, help="jobs woken one by one")
    parser.add_argument("--bulk", type=int, default=1000, help="jobs woken all at once")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--gets", type=int, default=200, help="GETs per honest client")
    parser.add_argument("--connection-limit", type=int, default=0, help="0: the default")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.waiters, args.single, args.bulk, args.gets = 1000, 5, 100, 50
    limit = raise_file_limit(args.waiters + 512)
    if limit < args.waiters + 100:
        args.waiters = limit - 100
    tmp = Path(tempfile.mkdtemp(prefix="uws-waiters-"))
    server = WaitServer(tmp / "data", tmp / "server.log", args.connection_limit)
    server.start()
    rows: list[tuple[str, str]] = []
    try:
        port = int(server.url.rsplit(":", 1)[1].strip("/"))
        paths = create_jobs(port, args.single + args.bulk + 1)
        plain, single, bulk = paths[0], paths[1:1 + args.single], paths[1 + args.single:]
        idle = honest_gets(port, plain, args.clients, args.gets)
        rss_before = server.memory_kib("VmRSS") or 0
        threads_before = len(os.listdir(f"/proc/{server.proc.pid}/task"))
        waiters = Waiters(port)
        opened = time.monotonic()
        waiters.open(single + bulk, args.waiters)
        deadline = time.monotonic() + 30
        held = blocked_waits(port)
        while held + len(waiters.answered) < args.waiters and time.monotonic() < deadline:
            time.sleep(0.2)
            held = blocked_waits(port)
        held_after = time.monotonic() - opened
        rss_held = server.memory_kib("VmRSS") or 0
        threads_held = len(os.listdir(f"/proc/{server.proc.pid}/task"))
        with waiters.lock:
            early_set = set(waiters.answered)      # past the bounds: answered at once
        early = len(early_set)
        busy = honest_gets(port, plain, args.clients, args.gets)

        conn, one = Conn(port), []
        for path in single:
            sent = abort(conn, path)
            mine = [i for i in waiters.of_jobs({path}) if i not in early_set]
            waiters.wait_answered(mine, 10)
            one += [waiters.answered[i][0] - sent for i in mine if i in waiters.answered]
        sent_at: dict[str, float] = {}
        lock = threading.Lock()

        def end_some(part: list[str]):
            c = Conn(port)
            for path in part:
                when = abort(c, path)
                with lock:
                    sent_at[path] = when

        started = time.monotonic()
        enders = [threading.Thread(target=end_some, args=(bulk[k::8],)) for k in range(8)]
        for t in enders:
            t.start()
        for t in enders:
            t.join()
        spread = time.monotonic() - started
        mine = [i for i in waiters.of_jobs(set(bulk)) if i not in early_set]
        waiters.wait_answered(mine, 10)
        many = [waiters.answered[i][0] - sent_at[waiters.job_of[i]]
                for i in mine if i in waiters.answered]
        unanswered = len(mine) - len(many)
        statuses = {waiters.answered[i][1] for i in mine if i in waiters.answered}
        waiters.close()

        per_waiter = (rss_held - rss_before) / max(held, 1)
        rows += [
            ("ulimit -n (server: raised to the hard limit) / nproc",
             f"{resource.getrlimit(resource.RLIMIT_NOFILE)[1]} / {os.cpu_count()}"),
            ("WAITs sent / held at once (uws_blocked_waits)", f"{args.waiters} / {held}"
             f" (in {held_after:.1f} s)"),
            ("answered at once (past the bounds), left out below", str(early)),
            ("server threads before / while holding", f"{threads_before} / {threads_held}"),
            ("RSS before / holding (MiB)", f"{rss_before / 1024:.0f} / {rss_held / 1024:.0f}"
             f" (+{(rss_held - rss_before) / 1024:.0f} MiB, {per_waiter:.1f} KiB per waiter)"),
            (f"GET job p50/p99 ms, {args.clients} clients, none held", f"{ms(idle, 50)} / {ms(idle, 99)}"),
            (f"GET job p50/p99 ms, {args.clients} clients, all held", f"{ms(busy, 50)} / {ms(busy, 99)}"),
            (f"wake p50/p99 ms, one job at a time ({len(one)} waiters of {len(single)} jobs)",
             f"{ms(one, 50)} / {ms(one, 99)} (max {ms(one, 100)})"),
            (f"{len(bulk)} jobs aborted by 8 clients in", f"{spread:.2f} s"),
            (f"wake p50/p99/max ms, those jobs' {len(mine)} waiters (from each abort sent)",
             f"{ms(many, 50)} / {ms(many, 99)} / {ms(many, 100)}; unanswered {unanswered}; "
             f"statuses {sorted(statuses)}"),
        ]
    finally:
        server.stop()
    width = max(len(k) for k, _ in rows) if rows else 0
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    problems = server.log_problems()
    if problems:
        print(f"server log: {len(problems)} problem lines, e.g. {problems[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
