"""Plain helpers and constants shared by the tests (fixtures live in conftest.py)."""
from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from lxml import etree

NS = {"uws": "http://www.ivoa.net/xml/UWS/v1.0",
      "xlink": "http://www.w3.org/1999/xlink",
      "xsi": "http://www.w3.org/2001/XMLSchema-instance"}
HREF = "{http://www.w3.org/1999/xlink}href"
NIL = "{http://www.w3.org/2001/XMLSchema-instance}nil"
ACTIVE = ("PENDING", "QUEUED", "EXECUTING")
#: The installed ``uws`` command, as users run it (beside this interpreter).
UWS_COMMAND = str(Path(sys.executable).with_name("uws"))
#: how often a test's own HTTP server looks for its shutdown (the standard library's
#: 0.5 s made each test stopping one wait that long)
POLL_S = 0.02


def runner_module(tmp_path: Path, monkeypatch, name: str, source: str) -> None:
    """Make ``source`` the importable module ``name`` (a service's runner), in a folder
    of the test's own put on the path."""
    lib = tmp_path / "lib"
    lib.mkdir(exist_ok=True)
    (lib / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(lib))


def files_under(root: Path, pattern: str = "*") -> list[Path]:
    """The files under ``root`` matching ``pattern``, but those of the executors' spare
    job directories (``jobs/.spare/``, made ahead of any job; uws.execution.jobdirs)."""
    return [p for p in Path(root).rglob(pattern)
            if p.is_file() and ".spare" not in p.relative_to(root).parts]


def path_of(url: str) -> str:
    """The path and query of an absolute URL, for the Flask test client."""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def job_id(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def create(client, **params) -> str:
    """Create a sleep job; the path of its URL."""
    r = client.post("/sleep", data=params)
    assert r.status_code == 303, r.data
    return path_of(r.headers["Location"])


def create_id(client, **params) -> str:
    """Create a sleep job; its id."""
    return job_id(create(client, **params))


def job_xml(client, path: str, query: str = ""):
    r = client.get(path + query)
    assert r.status_code == 200, r.data
    return etree.fromstring(r.data)


def text(el, tag: str):
    return el.findtext(f"uws:{tag}", namespaces=NS)


def phase(client, path: str) -> str:
    return client.get(f"{path}/phase").get_data(as_text=True)


def assert_303_to_job(r, path: str) -> None:
    assert r.status_code == 303, r.data
    assert r.headers["Location"] == f"http://localhost{path}"


def wait_while(client, path: str, phases) -> str:
    """Block with ``WAIT=10&PHASE=<current>`` until the job leaves ``phases``; its phase."""
    for _ in range(30):
        current = job_xml(client, path).findtext("uws:phase", namespaces=NS)
        if current not in phases:
            return current
        client.get(f"{path}?WAIT=10&PHASE={current}")
    pytest.fail(f"{path} stayed in {phases}")


def run_to_end(client, path: str) -> str:
    """RUN the job and block until it leaves the active phases; its phase."""
    assert client.post(f"{path}/phase", data={"PHASE": "RUN"}).status_code == 303
    return wait_while(client, path, ACTIVE)


def wait_for(predicate, timeout=10.0, step=0.02):
    """Poll until ``predicate()`` holds (when, by the monotonic clock); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(step)
    pytest.fail("condition not reached in time")


def holds_throughout(predicate, seconds: float, why: str, step=0.02) -> None:
    """Fail as soon as ``predicate()`` stops holding within ``seconds``: a bounded look
    for something that must not happen, where no event would show it.  ``why`` says
    why that long would have been enough to see it."""
    assert why, "say why the bound is enough"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), f"it happened within {seconds} s ({why})"
        time.sleep(step)


def settle(client, path, timeout=15):
    """Poll until the job leaves the active phases; the response to GET of it."""
    wait_for(lambda: phase(client, path) not in ACTIVE, timeout)
    return client.get(path)


def gone(pids) -> bool:
    """True when none of ``pids`` runs any more (zombies count as gone)."""
    def alive(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        # a zombie has exited; only its parent's wait() is missing
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split(")")[-1].split()[0] != "Z"
        except (ProcessLookupError, FileNotFoundError):
            return False        # reaped between the two looks
    return not any(alive(p) for p in pids)


class ByteServer:
    """A server on 127.0.0.1 (TLS with ``tls``, a server-side SSLContext) that
    answers every request with a 200 of ``size`` bytes and records what it was sent;
    with ``trickle``, one byte every ``interval`` seconds from its status line on
    (``"head"``) or from its body on (``"body"``): a peer no read timeout catches."""

    def __init__(self, trickle: str | None = None, *, size: int = 2, tls=None,
                 interval: float = 0.1):
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.1)
        self._trickle, self._tls, self._interval = trickle, tls, interval
        self._answer_bytes = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size, b"x" * size
        self._stop = threading.Event()
        self.port = self._server.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.requests: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        head, body = self._answer_bytes
        try:
            if self._tls is not None:
                conn.settimeout(5)
                conn = self._tls.wrap_socket(conn, server_side=True)
            with conn:
                self.requests.append(_read_request(conn))
                at_once = {None: head + body, "body": head}.get(self._trickle, b"")
                conn.sendall(at_once)
                for byte in (head + body)[len(at_once):]:
                    if self._stop.wait(self._interval):
                        return
                    conn.sendall(bytes([byte]))
        except OSError:
            return      # the client gave up, or refused the certificate

    def close(self) -> None:
        self._stop.set()
        self._server.close()


def _read_request(conn: socket.socket) -> bytes:
    """A request's head and body, all of it: closing on unread bytes would reset the
    connection, and the client might see that before the answer."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].lower()
    length = int(head.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0]) \
        if b"content-length:" in head else 0
    while len(data) < len(head) + 4 + length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


class Waiter(threading.Thread):
    """A thread doing one (blocking) GET over HTTP; records when it was sent and when
    it returned, and any error (reported by the test, not lost in the thread)."""

    def __init__(self, url: str, timeout: float = 60):
        super().__init__(daemon=True)
        self.url = url
        self.timeout = timeout
        self.response: requests.Response | None = None
        self.error: BaseException | None = None
        self.sent_at: float | None = None
        self.returned_at: float | None = None

    def run(self):
        self.sent_at = time.monotonic()
        try:
            self.response = requests.get(self.url, timeout=self.timeout)
        except BaseException as exc:
            self.error = exc
        finally:
            self.returned_at = time.monotonic()
