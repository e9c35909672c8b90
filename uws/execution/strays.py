"""Find and end a job's processes that outlived their server (Linux /proc).

Every job process carries ``UWS_JOB_ID`` in its environment, inherited by
anything it starts, so a restarted server can find exactly those processes
without trusting recycled pids.
"""
from __future__ import annotations

import os
import signal
from pathlib import Path


def job_pids(job_id: str) -> list[int]:
    needle = f"UWS_JOB_ID={job_id}".encode()
    pids = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids


def kill_strays(job_id: str) -> int:
    pids = job_pids(job_id)
    kill_pids(pids)
    return len(pids)


def kill_pids(pids) -> None:
    """SIGKILL each of ``pids``; one already gone (or no longer ours) is no error."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
