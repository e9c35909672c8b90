"""The executor's side of the fork server (:mod:`uws.execution.forkserver`).

:class:`ForkServer` starts the fork server (again, after it died) and asks it for
job processes; :class:`ForkedJob` is what the executor holds of one: a pid, a pipe
to send its task on, and its exit status once the fork server reports it.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import IO

from .forkserver import JOB_ID_ROOM, MAX_MESSAGE, REPORT_FD
from .task import job_environment

log = logging.getLogger(__name__)
#: how long the fork server may take to import the runner modules and say it is ready
READY_TIMEOUT = 60.0
#: how long a fork may take before the fork server is taken for stuck
FORK_TIMEOUT = 10.0


class ForkServerDown(Exception):
    """The fork server is not running (died, or could not start)."""


class ForkedJob:
    """A job process forked by the fork server: the part of a Popen the executor uses."""

    def __init__(self, pid: int, in_cgroup: bool = False):
        self.pid = pid
        self.in_cgroup = in_cgroup      # born in the job's cgroup
        self.stdin: IO[bytes] | None = None     # the task pipe, set by the executor
        self.returncode: int | None = None
        self.lost = False           # the fork server died before reporting its end
        self._ended = threading.Event()

    def poll(self) -> int | None:
        return self.returncode if self._ended.is_set() else None

    def wait(self, timeout: float | None = None) -> int | None:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"job process {self.pid}", timeout or 0)
        return self.returncode

    def end(self, status: int | None) -> None:
        """Its wait status; None: unknown, for the fork server died."""
        if status is None:
            self.lost = True
            self.returncode = -signal.SIGKILL
        else:
            self.returncode = os.waitstatus_to_exitcode(status)
        self._ended.set()


class _Connection:
    """One running fork server: its process, socket and the reader of its messages."""

    def __init__(self, modules: list[str]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # a job's environment (nothing of the server's), with room for each forked
        # job's id where /proc shows it
        env = job_environment(JOB_ID_ROOM, REPORT_FD, "/")
        try:
            # spawned, not forked from this multi-threaded process; a session of its own
            # (a terminal's Ctrl-C is the server's to handle)
            self.process = subprocess.Popen(
                [sys.executable, "-m", "uws.execution.forkserver", str(theirs.fileno()),
                 *modules], pass_fds=(theirs.fileno(),), cwd="/", env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
        finally:
            theirs.close()
        self.sock = ours
        self._lock = threading.Lock()
        self._next_id = 0
        self._pending: dict[int, list] = {}         # request id -> [Event, reply]
        self._jobs: dict[int, ForkedJob] = {}       # pid -> job
        self.alive = True
        self.ready = self._read_ready()
        threading.Thread(target=self._read_loop, name="uws-forkserver-reader",
                         daemon=True).start()

    def _read_ready(self) -> dict:
        self.sock.settimeout(READY_TIMEOUT)
        try:
            data = self.sock.recv(MAX_MESSAGE)
        except OSError as exc:
            self.close()
            raise ForkServerDown(f"the fork server did not start: {exc}") from exc
        finally:
            self.sock.settimeout(None)
        if not data:
            self.close()
            raise ForkServerDown("the fork server exited at once")
        return json.loads(data)

    def fork(self, env: dict[str, str], cwd: str, fds: list[int],
             cgroup: str | None) -> ForkedJob:
        waiter: list = [threading.Event(), None]
        with self._lock:
            if not self.alive:
                raise ForkServerDown("the fork server died")
            self._next_id += 1
            request_id = self._next_id
            self._pending[request_id] = waiter
        try:
            message = json.dumps({"id": request_id, "env": env, "cwd": cwd,
                                  "cgroup": cgroup}).encode()
            socket.send_fds(self.sock, [message], fds)
        except OSError as exc:
            self._pending.pop(request_id, None)
            raise ForkServerDown(f"cannot reach the fork server: {exc}") from exc
        if not waiter[0].wait(FORK_TIMEOUT):
            self.close()    # stuck: its jobs are lost, a new one is started
            raise ForkServerDown("the fork server did not answer")
        reply = waiter[1]
        if reply is None:
            raise ForkServerDown("the fork server died")
        if "failed" in reply:
            raise OSError(f"the fork server could not fork the job: {reply['error']}")
        return reply["job"]

    def _read_loop(self) -> None:
        try:
            while data := self.sock.recv(MAX_MESSAGE):
                self._handle(json.loads(data))
        except OSError:
            pass
        self._died()

    def _handle(self, message: dict) -> None:
        with self._lock:
            if "exit" in message:
                job = self._jobs.pop(message["exit"], None)
                if job is not None:
                    job.end(message["status"])
                return
            waiter = self._pending.pop(message.get("started") or message["failed"], None)
            if "started" in message:
                # registered before the next message, which may be its exit
                message["job"] = self._jobs[message["pid"]] = ForkedJob(
                    message["pid"], message.get("in_cgroup", False))
        if waiter is not None:
            waiter[1] = message
            waiter[0].set()

    def _died(self) -> None:
        with self._lock:
            self.alive = False
            jobs, self._jobs = list(self._jobs.values()), {}
            pending, self._pending = list(self._pending.values()), {}
        for job in jobs:
            job.end(None)
        for waiter in pending:
            waiter[0].set()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()

    def close(self) -> None:
        """End it: closing the socket makes it exit, and its jobs get their SIGTERM."""
        self.alive = False
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class ForkServer:
    """The executor's fork server, started on first use and again after it died."""

    def __init__(self, modules: list[str]):
        self.modules = sorted(set(modules))
        self.failed: dict[str, str] = {}     # modules it could not import, with why
        self.unusable: str | None = None     # why jobs are spawned instead, if they are
        self._lock = threading.Lock()
        self._conn: _Connection | None = None

    def serves(self, module: str | None) -> bool:
        """Whether a job of a runner in ``module`` (None: a command) is forked here."""
        return self.unusable is None and (module is None or module not in self.failed)

    def fork(self, env: dict[str, str], cwd: str, fds: list[int],
             cgroup: str | None = None) -> ForkedJob:
        """A job process with these descriptors (see forkserver.JOB_FDS), born in the
        cgroup directory ``cgroup`` where it can be (``ForkedJob.in_cgroup``)."""
        conn = self._connection()
        try:
            return conn.fork(env, cwd, fds, cgroup)
        except ForkServerDown:
            conn = self._connection()     # once more, on a new fork server
            return conn.fork(env, cwd, fds, cgroup)

    def _connection(self) -> _Connection:
        with self._lock:
            if self.unusable is not None:
                raise ForkServerDown(self.unusable)
            if self._conn is None or not self._conn.alive:
                if self._conn is not None:
                    log.warning("the fork server died; starting a new one (its jobs are lost)")
                try:
                    self._conn = _Connection(self.modules)
                except (ForkServerDown, OSError) as exc:    # not a death: it never started
                    self.unusable = f"the fork server cannot start ({exc})"
                    log.warning("%s; every job is started by a new interpreter", self.unusable)
                    raise ForkServerDown(self.unusable) from exc
                self._check(self._conn.ready)
                if self.unusable is not None:       # judged unfit: never fork from it
                    self._conn.close()
                    self._conn = None
                    raise ForkServerDown(self.unusable)
            return self._conn

    def _check(self, ready: dict) -> None:
        for module, why in ready.get("failed", {}).items():
            if module not in self.failed:
                log.warning("the fork server cannot import %s (%s): its jobs are started "
                            "by a new interpreter each", module, why)
        self.failed = dict(ready.get("failed", {}))
        if "uws.execution.child" in self.failed or ready.get("threads", 1) != 1:
            # forking a process with threads is not safe: spawn every job instead
            self.unusable = "the fork server cannot be used: " + (
                self.failed.get("uws.execution.child") or "a runner module started threads")
            log.warning("%s; every job is started by a new interpreter", self.unusable)

    def warm(self) -> None:
        """Start the fork server now rather than at the first job."""
        try:
            self._connection()
        except ForkServerDown as exc:
            log.warning("%s", exc)

    def stop(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    @property
    def pid(self) -> int | None:
        conn = self._conn
        return conn.process.pid if conn is not None and conn.alive else None

