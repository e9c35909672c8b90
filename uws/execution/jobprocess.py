"""One job's OS processes: starting them, killing them, and leaving nothing behind.

A job starts as a process of its own, in a session and process group of its own:
forked by the executor's fork server (:mod:`.forkserver`) with the runner module
already imported, or, where that cannot be had, spawned as ``python -m
uws.execution.child``.  Where per-job cgroups are available (:mod:`.cgroups`) it is
in its own cgroup before it gets its task.  Its first process is the supervisor
(:mod:`.supervisor`), which kills what the work starts; the killing here is the
executor's side of the same guarantee.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import sys

from ..domain import timing
from ..domain.model import Claim
from ..usecases.ports import Files, Settings
from . import cgroups
from .forkclient import ForkedJob, ForkServer, ForkServerDown
from .forkserver import REPORT_FD
from .jobdirs import JobDirs
from .strays import kill_strays
from .task import job_environment

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Running:
    job_id: str
    process: subprocess.Popen | ForkedJob
    claim: Claim        # this attempt's: what its writes are fenced by
    killed: bool = False
    attempt: int = 1        # of the job (automatic retries)
    superseded: bool = False    # another worker took the job over: not ours to record


class JobProcesses:
    """Starts, kills and sweeps up the processes of the jobs of one executor."""

    def __init__(self, config: Settings, files: Files, slots: int):
        self.files = files
        self.dirs = JobDirs(files.root, keep=slots)
        self.cgroups = cgroups.detect()     # None: supervisor and process tree only
        self.forks = ForkServer([s.runner.partition(":")[0]
                                 for s in config.services.values() if s.runner])

    def launch(self, job_id: str, service) -> tuple[subprocess.Popen | ForkedJob, int]:
        """Start the job's process, in its cgroup if there is one, waiting for its task
        on stdin; the process and the read end of its report pipe."""
        process, read_fd = self._start(job_id, service)
        if self.cgroups is not None and not getattr(process, "in_cgroup", False):
            self.cgroups.enter(job_id, process.pid)     # before the job gets its task
        return process, read_fd

    def _start(self, job_id: str, service) -> tuple[subprocess.Popen | ForkedJob, int]:
        workdir = self.files.results_dir(job_id)
        logs = self.files.job_dir(job_id)
        self.dirs.make(logs)
        read_fd, write_fd = os.pipe()
        try:
            out, err = self.dirs.open_logs(logs)
            with out, err:
                module = service.runner.partition(":")[0] if service.runner else None
                forked = self.forks.serves(module) and self._fork(
                    job_id, workdir, logs / "tmp", [out.fileno(), err.fileno(), write_fd])
                if forked:
                    return forked, read_fd
                process = subprocess.Popen(
                    [sys.executable, "-m", "uws.execution.child"], stdin=subprocess.PIPE,
                    stdout=out, stderr=err, cwd=workdir, start_new_session=True,
                    pass_fds=(write_fd,), env=job_environment(job_id, write_fd, logs / "tmp"))
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        return process, read_fd

    def _fork(self, job_id: str, workdir, tmp, fds: list[int]) -> ForkedJob | None:
        """The job's process forked by the fork server (its task is to be written to
        its stdin, as to a spawned one); None if the fork server cannot be had."""
        group = self.cgroups.prepare(job_id) if self.cgroups is not None else None
        task_r, task_w = os.pipe()
        try:
            job = self.forks.fork(job_environment(job_id, REPORT_FD, tmp), str(workdir),
                                  [task_r, *fds], str(group) if group else None)
        except ForkServerDown as exc:
            log.warning("job %s: %s; starting it in a new interpreter", job_id, exc)
            os.close(task_w)
            return None
        except BaseException:
            os.close(task_w)
            raise
        finally:
            os.close(task_r)
        job.stdin = os.fdopen(task_w, "wb")
        return job

    def kill(self, running: Running) -> None:
        """End the job: TERM to its process group (its supervisor then kills every
        descendant), then after a short grace KILL to the group and to everything
        in the job's cgroup."""
        running.killed = True
        pgid = running.process.pid
        # Without a cgroup the supervisor's own sweep is what finds descendants that
        # left the group: let it finish (it takes milliseconds but for a fork storm).
        grace = timing.KILL_GRACE if self.cgroups is not None else timing.SUPERVISOR_GRACE
        _terminate(running, grace)
        if self.cgroups is not None:
            self.cgroups.kill(running.job_id)
        _kill_group(pgid)   # stragglers in the group

    def end_attempt(self, running: Running) -> None:
        """End this attempt of a job taken over by another worker: its own process
        group only (TERM, the supervisor's grace, KILL).  The job's cgroup and the
        processes carrying its UWS_JOB_ID are named by the job id, and so may be the
        new attempt's by now."""
        _terminate(running, timing.SUPERVISOR_GRACE)
        _kill_group(running.process.pid)

    def end_leftovers(self, running: Running, thorough: bool) -> None:
        """Nothing a job started outlives it: everything in its cgroup, what is left
        of its process group and, when some descendant is known to have stayed (it
        held the report channel open) or the job was killed, every process carrying
        its UWS_JOB_ID (its supervisor has killed its descendants already)."""
        if self.cgroups is not None:
            self.cgroups.remove(running.job_id)
        _kill_group(running.process.pid)
        if thorough:
            kill_strays(running.job_id)

    def end_lost(self, job_id: str) -> None:
        """Everything a job whose worker was lost left on this machine: its cgroup's
        processes, and every process carrying its UWS_JOB_ID."""
        if self.cgroups is not None:
            self.cgroups.remove(job_id)
        kill_strays(job_id)


def _terminate(running: Running, grace: float) -> None:
    """TERM to the job's process group, then up to ``grace`` for its first process
    (the supervisor, which kills every descendant) to end."""
    try:
        os.killpg(running.process.pid, signal.SIGTERM)
        running.process.wait(grace)
    except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
        pass


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
