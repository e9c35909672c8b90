"""The first process of every job: it runs the work in a child and outlives it.

It is a Linux *child subreaper*: whatever the work starts and leaves behind,
even after ``setsid`` or a double fork and with its environment wiped
(``setsid env -i ...``), is re-parented to it rather than to init.  When the
work ends, or when the supervisor is told to stop (SIGTERM: ABORT, execution
duration, destruction, the server's death), it kills every descendant it has,
then exits with the work's own status.

This is what ends a job's processes where per-job cgroups are not available
(see :mod:`uws.execution.cgroups`), and a second line of defence where they are.
It can still be escaped by a process that kills the supervisor itself with
SIGKILL: only a cgroup cannot be left.
"""
from __future__ import annotations

import _signal
import ctypes
import os
import signal
import sys
import time
from pathlib import Path

from .strays import kill_pids

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _Stop(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _libc_prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


#: looked up once, at import (in the fork server): a CDLL made per call builds a class
#: each time, ~0.25 ms in a freshly forked job
_PRCTL = _libc_prctl()


def prctl(option: int, value: int) -> bool:
    return _PRCTL is not None and _PRCTL(option, value, 0, 0, 0) == 0


def set_handler(signum: int, handler) -> None:
    """signal.signal without its enum conversions: in a freshly forked job those run
    enough library code (copy-on-write faults) to cost ~60 µs a call."""
    _signal.signal(signum, int(handler) if isinstance(handler, int) else handler)


def supervise(work, report_fd: int) -> int:
    """Run ``work()`` (returning an exit status) in a child process; return its
    status once nothing it started is left (a signal death is passed on)."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    pid = os.fork()
    if pid == 0:
        _be_the_work(work)
    os.close(report_fd)     # only the work and its descendants hold the channel
    for signum in STOP_SIGNALS:
        set_handler(signum, _raise_stop)
    try:
        status = _wait_for(pid)
        _ignore_stop_signals()      # inside the try: a TERM just now still cleans up
    except _Stop as stop:
        _ignore_stop_signals()
        kill_descendants()
        _die_by(stop.signum)
    kill_descendants()
    if os.WIFSIGNALED(status):
        _die_by(os.WTERMSIG(status))
    return os.waitstatus_to_exitcode(status)


def _be_the_work(work) -> None:
    def work_alone() -> int:
        for signum in STOP_SIGNALS:
            set_handler(signum, signal.SIG_DFL)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)     # dies with the supervisor
        return work()
    exit_after(work_alone)


def exit_after(work) -> None:
    """In a forked process: run ``work``, then leave with its exit code (1 for an
    exception, whose traceback goes to stderr) without returning to the caller's
    code, once stdout and stderr are flushed."""
    code = 1
    try:
        code = work()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _raise_stop(signum, _frame):
    raise _Stop(signum)


def _ignore_stop_signals() -> None:
    for signum in STOP_SIGNALS:
        set_handler(signum, signal.SIG_IGN)


def _wait_for(pid: int) -> int:
    """Reap adopted orphans as they end until the work itself ends; its wait status."""
    while True:
        ended, status = os.waitpid(-1, 0)
        if ended == pid:
            return status


def _die_by(signum: int) -> None:
    if signum not in (signal.SIGKILL, signal.SIGSTOP):     # those cannot be handled
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    time.sleep(1)
    os._exit(128 + signum)


def kill_descendants(rounds: int = 200) -> None:
    """SIGKILL every process below this one until none is left (a process forking
    while we look is caught next round: its orphan comes back to us)."""
    me = os.getpid()
    for _ in range(rounds):
        # No child at all (as their subreaper, orphans are ours): none below us either,
        # and the /proc scan (milliseconds on a busy host) is not needed.
        if not _reap():
            return
        pids = descendants(me)
        kill_pids(pids)
        if not _reap() and not pids:
            return
        time.sleep(0.005)


def _reap() -> bool:
    """Collect ended children without blocking; False once there are none at all."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def descendants(root: int) -> list[int]:
    """The pids below ``root`` in the process tree, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = _parent_of(entry)
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _parent_of(entry: Path) -> int | None:
    try:
        stat = (entry / "stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None
