"""A warm process per executor that forks each job: ``python -m uws.execution.forkserver``.

Starting a job used to mean starting a Python interpreter (tens of milliseconds).
The fork server is started once, with a clean spawn (never forked from the
multi-threaded server), imports :mod:`uws.execution.child` and the services'
runner modules, and then forks one job process per request.  The forked process
is set up exactly as a spawned one: a session and process group of its own, the
job's environment only, its working directory, stdin/stdout/stderr and the report
channel as its only open descriptors, then :func:`uws.execution.child.main`
(umask, die-with-parent, the task read from stdin, rlimits, the supervisor).
A command runner still execs its program from there.

The executor talks to it over a ``SOCK_SEQPACKET`` socket pair: a request carries
the job's descriptors (``SCM_RIGHTS``); the fork server answers with the pid and,
when it has reaped the job, its wait status.  Exit statuses come from the fork
server, not from a pidfd: only a process's parent can collect its status, and a
pidfd could tell the executor *that* a job ended but not *how*.

Lifetimes: the fork server exits when the executor's end of the socket closes
(its server died or stopped); each job has PR_SET_PDEATHSIG on the fork server,
so its supervisor then kills all it started.  A job that crashes is a process of
its own and cannot take the fork server down; if the fork server dies anyway, the
executor sees its jobs as lost (:mod:`.lost`) and starts a new one.
"""
from __future__ import annotations

import ctypes
import fcntl
import functools
import gc
import importlib
import json
import os
import signal
import socket
import sys
import threading

from .clone import fork_into
from .supervisor import exit_after, set_handler

MAX_MESSAGE = 1 << 20
#: the fork server's own UWS_JOB_ID: room that a forked job overwrites with its id
#: (see _show_job_id)
JOB_ID_ROOM = "-" * 200
#: the descriptors a request carries, in this order: stdin (the task), stdout,
#: stderr, the report channel's write end (fd 3 in the job)
JOB_FDS = 4
REPORT_FD = 3
#: imported before any runner module: the child, and what it would import in every
#: job (typed parameters, the runner's Context, URL fetching): ~10 ms each otherwise
PRELOADED = ("uws.execution.child", "uws.domain.services", "uws.runner", "uws.execution.fetch")


def _threads() -> int:
    """Threads of this process, native ones too (a library such as OpenBLAS may start
    some at import, which Python's threading module does not see)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def main(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[0]))
    os.set_inheritable(sock.fileno(), False)
    failed = _import_runners(argv[1:])
    global _job_id_room, _own_environment
    _job_id_room = _find_job_id_room()
    _own_environment = dict(os.environ)     # never changed here
    # What is imported now is shared with every job until written to: keep the jobs'
    # garbage collector off it (its passes would touch, so copy, every object's page).
    gc.freeze()
    _send(sock, {"ready": True, "failed": failed, "threads": _threads()})
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # the server decides when we stop
    import select
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    while True:
        try:
            ready = dict(poller.poll())
        except InterruptedError:
            continue
        if wake_r in ready:
            _drain(wake_r)
        _reap(sock)
        if sock.fileno() in ready:
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, JOB_FDS)
            except InterruptedError:
                continue
            if not data:
                return 0    # the executor is gone: our jobs get their SIGTERM
            _serve(sock, json.loads(data), fds)


def _import_runners(modules: list[str]) -> dict[str, str]:
    """Import uws.execution.child, what it imports while a job runs, and each runner
    module; those that failed, with why (the job then imports it itself and fails
    with the same error, as when spawned)."""
    failed = {}
    for name in [*PRELOADED, *modules]:
        try:
            importlib.import_module(name)
        except BaseException as exc:    # noqa: B036 - a runner module may do anything
            failed[name] = f"{type(exc).__name__}: {exc}"
    return failed


def _serve(sock: socket.socket, request: dict, fds: list[int]) -> None:
    try:
        if len(fds) != JOB_FDS:
            raise ValueError(f"{len(fds)} descriptors, not {JOB_FDS}")
        sys.stdout.flush()
        sys.stderr.flush()
        server = os.getpid()
        pid, in_cgroup = _fork(request.get("cgroup"))
        if pid == 0:
            _be_the_job(request, fds, server)
        reply = {"started": request["id"], "pid": pid, "in_cgroup": in_cgroup}
    except Exception as exc:
        reply = {"failed": request["id"], "error": f"{type(exc).__name__}: {exc}"}
    finally:
        for fd in fds:
            os.close(fd)
    _send(sock, reply)


def _fork(cgroup: str | None) -> tuple[int, bool]:
    """fork(), into the job's cgroup if it has one and clone3 can; whether it did (if
    not, the executor moves the job there, the slow way, before it sends the task)."""
    if cgroup:
        try:
            return fork_into(cgroup), True
        except OSError:
            pass
    return os.fork(), False


def _be_the_job(request: dict, fds: list[int], server: int) -> None:
    """In the forked process: become a job process like a spawned one, run it, exit."""
    exit_after(functools.partial(_job_process, request, fds, server))


def _job_process(request: dict, fds: list[int], server: int) -> int:
    # the module imported in main(), not an import statement: that runs the import
    # machinery, for the first time in this process, in every job
    child = sys.modules["uws.execution.child"]
    os.setsid()
    child.die_with_parent(signal.SIGTERM)   # child.main sets it again; no gap before it
    if os.getppid() != server:
        os._exit(1)                     # the fork server died in between
    signal.set_wakeup_fd(-1)
    set_handler(signal.SIGCHLD, signal.SIG_DFL)
    set_handler(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate([_dup_high(fd) for fd in fds]):
        os.dup2(fd, target)     # inheritable: a command runner keeps them over exec
    os.closerange(JOB_FDS, os.sysconf("SC_OPEN_MAX"))   # nothing else of ours
    os.chdir(request["cwd"])
    _show_job_id(request["env"].get("UWS_JOB_ID", ""))
    _replace_environment(request["env"])
    sys.path[0] = request["cwd"]        # as for ``python -m`` started there
    sys.argv = [child.__file__ or "child"]
    return child.main()


def _show_job_id(job_id: str) -> None:
    """Make /proc/<pid>/environ of this process carry UWS_JOB_ID=<job id>, as a spawned
    job's does: a restarted server finds a job's processes by it (:mod:`.strays`).

    That file shows the environment this process was *exec'd* with, not os.environ:
    the fork server was started with UWS_JOB_ID set to :data:`JOB_ID_ROOM`, whose
    bytes (still where exec put them; getenv points there) are overwritten in place."""
    raw = job_id.encode()
    if _job_id_room and len(raw) < len(JOB_ID_ROOM):
        ctypes.memmove(_job_id_room, raw + b"\0", len(raw) + 1)


def _find_job_id_room() -> int | None:
    """Where getenv finds UWS_JOB_ID's value: looked up once, in the fork server (the
    address is the same in each job it forks)."""
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_void_p
    return libc.getenv(b"UWS_JOB_ID")


_job_id_room: int | None = None     # set by main()


def _replace_environment(env: dict[str, str]) -> None:
    """os.environ becomes ``env``, changing only what differs from the fork server's
    own (a job's already: its names, most values), compared with a plain copy of it:
    reading os.environ itself runs its mapping code on every name."""
    for name in _own_environment.keys() - env.keys():
        del os.environ[name]
    for name, value in env.items():
        if _own_environment.get(name) != value:
            os.environ[name] = value


_own_environment: dict[str, str] = {}     # set by main()


def _dup_high(fd: int) -> int:
    return fcntl.fcntl(fd, fcntl.F_DUPFD, 10)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exit": pid, "status": status})


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _send(sock: socket.socket, message: dict) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:
        os._exit(0)     # the executor is gone


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
