"""One cgroup v2 per job, where the server may make them: a job cannot leave it.

The jobs' cgroups are made under ``uws-jobs/`` in the server's own cgroup v2
directory (``/proc/self/cgroup`` names it, ``/proc/self/mountinfo`` where the
v2 hierarchy is mounted), which must be writable by the server's user: root,
or a subtree delegated to it (systemd ``Delegate=yes``).  The executor moves
each job's first process into ``uws-jobs/<job id>`` before the job starts, so
all it ever starts is in there, whatever ``setsid``, double forks or ``env -i``
it uses; ending the job writes ``cgroup.kill`` (or, on kernels before 5.14,
kills each pid in ``cgroup.procs`` until it is empty) and removes the directory.

Where no such directory can be made, :func:`detect` returns None and jobs are
ended by their supervisor and process tree instead (:mod:`.supervisor`).
"""
from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)
BASE_NAME = "uws-jobs"


def _v2_mount() -> Path | None:
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split()[:1] == ["cgroup2"]:
                    return Path(left.split()[4])
    except OSError:
        pass
    return None


def _own_path() -> str | None:
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


def detect() -> JobCgroups | None:
    """Per-job cgroups under this process's cgroup, or None (with the reason logged)."""
    mount, own = _v2_mount(), _own_path()
    if mount is None or own is None:
        log.info("no cgroup v2 hierarchy: jobs are ended through their process tree")
        return None
    base = mount / own.lstrip("/") / BASE_NAME
    try:
        base.mkdir(mode=0o755, exist_ok=True)
        probe = base / f"probe-{os.getpid()}"
        probe.mkdir(exist_ok=True)
        probe.rmdir()
    except OSError as exc:
        log.info("cannot make cgroups under %s (%s): jobs are ended through their "
                 "process tree", base.parent, exc.strerror or exc)
        return None
    groups = JobCgroups(base)
    groups.prune()
    log.info("jobs run in cgroups of their own under %s", base)
    return groups


class JobCgroups:
    def __init__(self, base: Path):
        self.base = base

    def path(self, job_id: str) -> Path:
        return self.base / job_id

    def prepare(self, job_id: str) -> Path | None:
        """Make the job's cgroup, for its first process to be born in; None if it cannot
        be (:meth:`enter` then says why)."""
        group = self.path(job_id)
        try:
            group.mkdir(exist_ok=True)
        except OSError:
            return None
        return group

    def enter(self, job_id: str, pid: int) -> bool:
        """Move process ``pid`` (which has not started the job yet) into the job's cgroup."""
        group = self.path(job_id)
        try:
            group.mkdir(exist_ok=True)
            (group / "cgroup.procs").write_text(str(pid))
            return True
        except OSError as exc:
            log.warning("job %s: cannot use cgroup %s (%s); ending it through its process "
                        "tree", job_id, group, exc.strerror or exc)
            return False

    def kill(self, job_id: str) -> None:
        """SIGKILL every process in the job's cgroup (none may escape it)."""
        group = self.path(job_id)
        try:
            (group / "cgroup.kill").write_text("1")
            return
        except FileNotFoundError:
            if not group.exists():
                return
        except OSError:
            pass
        for _ in range(100):         # kernels before 5.14 have no cgroup.kill
            pids = self.pids(job_id)
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.01)

    def pids(self, job_id: str) -> list[int]:
        try:
            return [int(p) for p in (self.path(job_id) / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def prune(self, min_age: float = 10.0) -> None:
        """Remove the empty cgroups of jobs whose server was killed before it could
        (never a non-empty one: rmdir refuses; and only ones older than ``min_age``,
        so as not to race another server putting its job's first process in)."""
        for group in self.base.iterdir():
            try:
                # cgroupfs stamps times from the kernel's coarse clock, which need not agree
                # with time.time() to the millisecond: min_age 0 means "whatever its stamp".
                young = min_age > 0 and time.time() - group.stat().st_mtime < min_age
                if (group.is_dir() and not young
                        and not (group / "cgroup.procs").read_text().strip()):
                    group.rmdir()
            except OSError as exc:
                log.debug("cgroup %s not pruned: %s", group, exc)

    def remove(self, job_id: str, timeout: float = 2.0) -> None:
        """Kill what is left in the job's cgroup, then remove it once it is empty."""
        group = self.path(job_id)
        self.kill(job_id)
        deadline = time.monotonic() + timeout
        while True:
            try:
                group.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:     # EBUSY until the killed processes are gone
                if time.monotonic() > deadline:
                    log.warning("job %s: cgroup %s is not empty; left", job_id, group)
                    return
                self.kill(job_id)
                time.sleep(0.01)
