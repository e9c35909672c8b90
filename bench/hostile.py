"""The hostile mix of bench/load.py: idle connections, clients that never read a
large file, oversize bodies, wrong passwords; all against the server the script started on
127.0.0.1, bounded in count and time, stopping by themselves at the deadline.

Hostile sockets come from other loopback source addresses (127.0.1.x), as
several machines would, so the server's per-address bound meets them as it
would real ones, and the honest clients (127.0.0.1) keep their own share.

``HostileProcess`` runs a ``Hostile`` in a child process of its own: its many
threads in tight loops would otherwise take the GIL from the honest clients'
threads, whose latency would then be the load generator's, not the server's.
"""
from __future__ import annotations

import base64
import collections
import multiprocessing
import os
import resource
import secrets
import signal
import socket
import threading
import time

from bench import REQUEST_ERRORS, SERVICE, HttpClient

BIG = 24 * 1024 * 1024      # the slow readers' file: over waitress's 16 MiB watermark
PER_SOURCE = 40             # hostile connections per source address
GUESSERS_FROM = 12000       # the wrong-password threads' first n: 127.0.1.51 and on


class Hostile:
    def __init__(self, host: str, port: int, idle: int, slow_readers: int, oversize: int,
                 wrong_passwords: int = 0, user: str = ""):
        self.host, self.port = host, port
        self.want = {"idle": idle, "slow": slow_readers, "oversize": oversize,
                     "guess": wrong_passwords}
        self.user = user            # a known name of [auth.users]: its password is guessed
        self.counts: collections.Counter = collections.Counter()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.file_path = ""

    @property
    def active(self) -> bool:
        return any(self.want.values())

    def prepare(self, upload) -> None:
        """Raise our open-file limit; upload the slow readers' file with ``upload(bytes)``,
        which returns the path of its parameter URL."""
        self.raise_file_limit()
        if self.want["slow"]:
            self.file_path = upload(bytes(range(256)) * (BIG // 256))

    def raise_file_limit(self) -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        needed = self.want["idle"] + self.want["slow"] + self.want["guess"] + 512
        if soft < needed:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, needed), hard))

    def params(self) -> dict:
        """What a child process needs to rebuild this mix (locks do not pickle)."""
        return {"host": self.host, "port": self.port, "idle": self.want["idle"],
                "slow_readers": self.want["slow"], "oversize": self.want["oversize"],
                "wrong_passwords": self.want["guess"], "user": self.user,
                "file_path": self.file_path}

    @classmethod
    def from_params(cls, params: dict) -> Hostile:
        params = dict(params)
        file_path = params.pop("file_path")
        hostile = cls(**params)
        hostile.file_path = file_path
        return hostile

    def start(self, deadline: float) -> None:
        for kind, target in (("idle", self._idle), ("slow", self._slow),
                             ("oversize", self._oversize)):
            if self.want[kind]:
                self._thread(target, deadline)
        for i in range(self.want["guess"]):
            self._thread(self._guess, deadline, i)

    def _thread(self, target, *args) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        t.start()
        self.threads.append(t)

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(15)

    def summary(self) -> str:
        c = self.counts
        return (f"idle connections opened {c['idle.opened']} (closed by the server "
                f"{c['idle.closed']}, refused {c['idle.refused']}); slow readers "
                f"{c['slow.opened']} (closed by the server {c['slow.closed']}); oversize "
                f"bodies {c['oversize.sent']} ({c['oversize.413']} answered 413)"
                + (f"; {self.guess_summary()}" if self.want["guess"] else ""))

    def guess_summary(self) -> str:
        c = self.counts
        other = ", ".join(f"{k[12:]}: {v}" for k, v in c.items() if k.startswith("guess.other."))
        return (f"wrong passwords for {self.user!r} from {self.want['guess']} threads: "
                f"{c['guess.sent']} sent, answered 401 {c['guess.401']}, 429 {c['guess.429']}, "
                f"503 {c['guess.503']} ({c['guess.no_retry_after']} of the 429/503 without "
                f"Retry-After), other {other or 0}, connection errors {c['guess.error']}")

    # -- the kinds ------------------------------------------------------------------------

    def _connect(self, n: int, rcvbuf: int | None = None) -> socket.socket:
        s = socket.socket()
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.bind((_source(n), 0))
        s.settimeout(5)
        s.connect((self.host, self.port))
        s.setblocking(False)
        return s

    def _hold(self, kind: str, deadline: float, opening) -> None:
        """Keep ``want[kind]`` sockets open (reopening those the server closes) until
        the deadline; each is opened by ``opening(n)``."""
        held: dict[int, socket.socket] = {}
        n = 0
        try:
            while not self.stop.is_set() and time.monotonic() < deadline:
                for i in range(self.want[kind]):
                    if i not in held and time.monotonic() < deadline:
                        try:
                            held[i] = opening(n)
                            self.counts[f"{kind}.opened"] += 1
                        except OSError:
                            self.counts[f"{kind}.refused"] += 1
                        n += 1
                for i, s in list(held.items()):
                    if _closed(s, drain=(kind == "idle")):
                        self.counts[f"{kind}.closed"] += 1
                        s.close()
                        del held[i]
                self.stop.wait(0.5)
        finally:
            for s in held.values():
                s.close()

    def _guess(self, deadline: float, i: int) -> None:
        """Send wrong passwords for ``user`` until the deadline, ignoring Retry-After
        as a guesser would; each thread from its own address, like a botnet, so that
        the per-user limit meets them rather than only the per-address one."""
        n = GUESSERS_FROM + i * PER_SOURCE
        http = HttpClient(f"http://{self.host}:{self.port}/", timeout=(5, 30), source=_source(n))
        counts: collections.Counter = collections.Counter()
        try:
            while not self.stop.is_set() and time.monotonic() < deadline:
                kinds = self._guess_once(http)
                counts.update(kinds)
                counts["guess.sent"] += 1
                if "guess.error" in kinds:
                    self.stop.wait(0.1)     # a refused connection: do not spin
        finally:
            http.close()
            with self.lock:
                self.counts.update(counts)

    def _guess_once(self, http: HttpClient) -> list[str]:
        """One wrong guess on the honest clients' job list; the counts it adds."""
        token = base64.b64encode(f"{self.user}:{secrets.token_urlsafe(9)}".encode()).decode()
        try:
            r = http.request("GET", f"/{SERVICE}?LAST=1",
                             headers={"Authorization": "Basic " + token})
        except REQUEST_ERRORS:
            return ["guess.error"]
        if r.status_code not in (401, 429, 503):
            return [f"guess.other.{r.status_code}"]
        if r.status_code != 401 and not r.headers.get("Retry-After"):
            return [f"guess.{r.status_code}", "guess.no_retry_after"]
        return [f"guess.{r.status_code}"]

    def _idle(self, deadline: float) -> None:
        self._hold("idle", deadline, lambda n: self._connect(n))

    def _slow(self, deadline: float) -> None:
        request = (f"GET {self.file_path} HTTP/1.1\r\nHost: {self.host}\r\n"
                   f"Range: bytes=0-\r\n\r\n").encode()

        def opening(n):
            s = self._connect(5000 + n, rcvbuf=4096)
            s.sendall(request)
            return s
        self._hold("slow", deadline, opening)

    def _oversize(self, deadline: float) -> None:
        head = (f"POST /sleep HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: "
                f"application/x-www-form-urlencoded\r\nContent-Length: {1 << 40}\r\n\r\n")
        while not self.stop.is_set() and time.monotonic() < deadline:
            for k in range(self.want["oversize"]):
                try:
                    with self._connect(9000 + k) as s:
                        s.setblocking(True)
                        s.sendall(head.encode() + b"x" * 65536)
                        self.counts["oversize.sent"] += 1
                        if b" 413 " in s.recv(200):
                            self.counts["oversize.413"] += 1
                except OSError:
                    pass
            self.stop.wait(1.0)


class HostileProcess:
    """A ``Hostile`` run in a child process (spawned: it inherits none of our threads
    or sockets) until a deadline; its counts come back to ``hostile.counts`` over a
    pipe, so that ``hostile.summary()`` reads as before."""

    def __init__(self, hostile: Hostile):
        self.hostile = hostile
        self.process: multiprocessing.Process | None = None
        self.conn = None

    def start(self, seconds: float) -> None:
        """Start the mix for ``seconds``; returns once the child has started it."""
        ctx = multiprocessing.get_context("spawn")
        self.conn, child_end = ctx.Pipe(duplex=False)
        # daemon: multiprocessing ends it when we exit, whatever stopped us
        self.process = ctx.Process(target=_child, args=(self.hostile.params(), seconds,
                                                        child_end, os.getpid()),
                                   name="hostile", daemon=True)
        self.process.start()
        child_end.close()
        try:
            started = self.conn.poll(30) and self.conn.recv() == "started"
        except EOFError:            # it died first; its traceback is in our stderr
            started = False
        if not started:
            raise RuntimeError("the hostile process did not start")

    def join(self, timeout: float = 60.0) -> None:
        """Wait (at most ``timeout`` s) for the child's counts, then for its end."""
        if self.process is None:
            return
        try:
            if self.conn.poll(timeout):
                self.hostile.counts.update(self.conn.recv())
        except (EOFError, OSError):
            pass                    # the child died without counts: summary shows zeros
        self.stop(grace=5)

    def stop(self, grace: float = 0) -> None:
        """End the child if it has not ended within ``grace`` s (none after an
        interruption: SIGTERM at once)."""
        process, self.process = self.process, None
        if process is None:
            return
        process.join(grace)
        if process.is_alive():
            process.terminate()
            process.join(5)
        if process.is_alive():
            process.kill()
            process.join(5)
        self.conn.close()


def _child(params: dict, seconds: float, conn, parent: int) -> None:
    """The hostile process: run the mix until the deadline, or until the parent is
    gone; then send the counts.  Ctrl-C is the parent's to handle: it stops us."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    hostile = Hostile.from_params(params)
    hostile.raise_file_limit()
    deadline = time.monotonic() + seconds
    hostile.start(deadline)
    conn.send("started")
    while time.monotonic() < deadline and os.getppid() == parent:
        time.sleep(0.5)
    hostile.join()
    try:
        conn.send(dict(hostile.counts))
    except OSError:
        pass                        # the parent is gone: nobody to count for
    conn.close()


def _source(n: int) -> str:
    """The loopback address the n-th hostile connection comes from."""
    return f"127.0.1.{1 + n // PER_SOURCE % 250}"


def _closed(s: socket.socket, drain: bool) -> bool:
    """True when the server has closed ``s``; reads only what an idle socket got."""
    try:
        if drain:
            return s.recv(4096) == b""
        return s.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
