"""fork() straight into a cgroup: clone3 with CLONE_INTO_CGROUP (Linux 5.7+).

Moving a process into a cgroup after it started (writing cgroup.procs) waits for
an RCU grace period: about 10 ms on a busy host, for every job.  A process cloned
into its cgroup is there from its first instruction, for a fraction of a millisecond.
Python has no binding for clone3, so it is called through ctypes, bracketed by the
interpreter's own fork hooks (PyOS_BeforeFork / PyOS_AfterFork_*), as os.fork does.
Only the fork server uses it, which is single-threaded.
"""
from __future__ import annotations

import ctypes
import os
import platform
import signal

CLONE_INTO_CGROUP = 0x200000000
#: the clone3 system call number, the same on the 64-bit architectures that have it
SYS_CLONE3 = {"x86_64": 435, "aarch64": 435}.get(platform.machine())


class _CloneArgs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size",
        "tls", "set_tid", "set_tid_size", "cgroup")]


def fork_into(cgroup_dir: str) -> int:
    """Like os.fork(), the child being born in the cgroup ``cgroup_dir``; OSError when
    that cannot be done (no clone3, no such cgroup, no right to it): nothing forked."""
    if SYS_CLONE3 is None:
        raise OSError("clone3 is not known on this architecture")
    fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    pid = -1
    try:
        args = _CloneArgs(flags=CLONE_INTO_CGROUP, exit_signal=signal.SIGCHLD, cgroup=fd)
        libc = ctypes.PyDLL(None, use_errno=True)      # PyDLL: the GIL stays held, as in os.fork
        api = ctypes.pythonapi
        api.PyOS_BeforeFork()
        pid = libc.syscall(ctypes.c_long(SYS_CLONE3), ctypes.byref(args),
                           ctypes.c_size_t(ctypes.sizeof(args)))
        if pid == 0:
            api.PyOS_AfterFork_Child()
            return 0
        err = ctypes.get_errno()
        api.PyOS_AfterFork_Parent()
    finally:
        if pid != 0:
            os.close(fd)
    if pid < 0:
        raise OSError(err, f"clone3 into {cgroup_dir}: {os.strerror(err)}")
    return pid
