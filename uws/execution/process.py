"""The local executor: each job in its own OS process and process group.

Worker threads claim QUEUED jobs (a conditional QUEUED -> EXECUTING update, so
several processes may share one database and a job still runs once), have the
executor's fork server fork the job's process (:mod:`.forkserver`; or start
``python -m uws.execution.child`` where it cannot) and follow its report lines.  A monitor
thread renews the leases of running jobs and kills every job whose phase is
no longer EXECUTING in the database: an ABORT made by any process, an
exceeded execution duration or a destruction ends the work within a second.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

from .. import timing
from ..files import make_private_dir
from ..model import ErrorSummary
from ..phases import Phase
from ..ports import Files, RunStore, Settings
from . import cgroups, lost
from .base import Executor
from .forkclient import ForkedJob, ForkServer, ForkServerDown
from .forkserver import REPORT_FD
from .reports import ReportReader
from .strays import kill_strays
from .task import job_environment, send_task, task_of

log = logging.getLogger(__name__)


def worker_name() -> str:
    """host:pid:nonce — lets a restarted server on this host spot its dead predecessors."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclasses.dataclass
class Running:
    job_id: str
    process: subprocess.Popen | ForkedJob
    killed: bool = False
    attempt: int = 1        # of the job (automatic retries)


class ProcessExecutor(Executor):
    def __init__(self, *, config: Settings, store: RunStore, files: Files, slots: int):
        self.config = config
        self.store = store
        self.files = files
        self.slots = max(1, slots)
        self.worker_id = worker_name()
        self._wake = threading.Condition()
        self._submitted = 0         # submits so far; guarded by _wake
        self._stopping = threading.Event()
        self._draining = threading.Event()     # finish what runs, claim nothing more
        self._lock = threading.Lock()
        self._running: dict[str, Running] = {}
        self._threads: list[threading.Thread] = []
        self.cgroups = cgroups.detect()     # None: supervisor and process tree only
        self.forks = ForkServer([s.runner.partition(":")[0]
                                 for s in config.services.values() if s.runner])

    # -- Executor interface ---------------------------------------------------------

    def start(self) -> None:
        self._spawn_thread(self.forks.warm, "uws-forkserver-start")
        for i in range(self.slots):
            self._spawn_thread(self._work_loop, f"uws-worker-{i}")
        self.start_monitor()

    def drain(self) -> None:
        """Claim no more jobs; the running ones go on to their end."""
        self._draining.set()

    def start_monitor(self) -> None:
        """Only watch the jobs run here (ABORT, deletion, leases, sizes): for a
        process whose jobs are started by something else (a Celery worker)."""
        self._spawn_thread(self._monitor_loop, "uws-monitor")

    def submit(self, job_id: str) -> None:
        with self._wake:
            self._submitted += 1
            self._wake.notify()

    def abort(self, job_id: str) -> None:
        with self._lock:
            running = self._running.get(job_id)
        if running is not None:
            self._kill(running)

    def stop(self) -> None:
        self._stopping.set()
        with self._wake:
            self._wake.notify_all()
        with self._lock:
            running = list(self._running.values())
        for r in running:
            self._kill(r)
        for t in self._threads:
            t.join(timeout=5)
        self.forks.stop()

    def problem(self) -> str | None:
        if self._stopping.is_set():
            return "the executor has stopped"
        if self._draining.is_set():
            return "the executor is draining: it finishes its jobs and takes no new ones"
        loops = [t for t in self._threads if t.name.startswith(("uws-worker-", "uws-monitor"))]
        if not loops:
            return "the executor has not started"
        dead = [t.name for t in loops if not t.is_alive()]
        if dead:
            return f"executor threads have stopped: {', '.join(dead)}"
        return None

    @property
    def running_ids(self) -> list[str]:
        with self._lock:
            return list(self._running)

    # -- threads ------------------------------------------------------------------------

    def _spawn_thread(self, target, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _work_loop(self) -> None:
        while not self._stopping.is_set():
            with self._wake:
                seen = self._submitted
            if not self.run_next():
                with self._wake:
                    # A submit during the claim (its job committed too late for it)
                    # means claim again now rather than after a whole poll interval.
                    if self._submitted == seen and not self._stopping.is_set():
                        self._wake.wait(timing.QUEUE_POLL)

    def run_next(self) -> bool:
        """Claim the next QUEUED job (fairly, see Store.claim_next) and run it to its
        end here; False when there was none to claim."""
        if self._stopping.is_set() or self._draining.is_set():
            return False
        try:
            job_id = self.store.claim_next(self.worker_id, list(self.config.services),
                                           timing.LEASE, self._running_cap)
        except Exception:
            log.exception("cannot claim a job")
            return False
        if job_id is None:
            return False
        try:
            self._execute(job_id)
        except Exception:
            log.exception("job %s: executor failure", job_id)
            self.store.mark_failed(job_id, ErrorSummary(
                "transient", "the executor failed to run the job"))
        return True

    def _running_cap(self, service: str, owner: str) -> int:
        return self.config.services[service].quota(owner).running

    def _monitor_loop(self) -> None:
        last_renewal = last_measure = time.monotonic()
        while not self._stopping.wait(timing.MONITOR):
            try:
                ids = self.running_ids
                if not ids:
                    continue
                if time.monotonic() - last_measure > timing.USAGE_CHECK:
                    self._stop_oversize(ids)
                    last_measure = time.monotonic()
                current = self.store.phases_of(ids)
                for job_id in ids:
                    if current.get(job_id) is not Phase.EXECUTING:
                        self.abort(job_id)
                if time.monotonic() - last_renewal > timing.LEASE / 3:
                    self.store.renew_leases(self.worker_id, ids, timing.LEASE)
                    last_renewal = time.monotonic()
            except Exception:
                log.exception("monitor pass failed")

    def _stop_oversize(self, ids: list[str]) -> None:
        """End in ERROR the running jobs that wrote more than their service allows
        (the pass below then kills them, as it does aborted ones)."""
        for job_id in ids:
            service = self.config.services.get(self.store.service_of(job_id) or "")
            excess = service and self._excess(job_id, service, self.files.usage(job_id))
            if excess:
                log.warning("job %s: %s; stopping it", job_id, excess)
                self.store.mark_failed(job_id, ErrorSummary("fatal", excess))

    def _excess(self, job_id: str, service, usage) -> str | None:
        """Why the job's files (their ``usage``) are over its service's limits; None
        when they are not."""
        if usage.written > service.max_result_bytes:
            return (f"the job wrote more than {service.max_result_bytes} bytes of files "
                    "(max_result_bytes)")
        if usage.logs > service.max_log_bytes:
            return (f"the job wrote more than {service.max_log_bytes} bytes to its standard "
                    "output and error (max_log_bytes)")
        return None

    # -- one job ---------------------------------------------------------------------------

    def _execute(self, job_id: str) -> None:
        service_name = self.store.service_of(job_id)
        job = self.store.get_job(job_id, service_name, None) if service_name else None
        if job is None or service_name is None:
            return
        service = self.config.services[service_name]
        try:
            process, read_fd = self._launch(job_id, service)
        except OSError:
            if self._forget_if_deleted(job_id):
                return      # deleted while starting: its directory went under us
            raise
        if self.cgroups is not None and not getattr(process, "in_cgroup", False):
            self.cgroups.enter(job_id, process.pid)     # before the job gets its task
        running = Running(job_id, process, attempt=job.attempt)
        with self._lock:
            self._running[job_id] = running
        if self._stopping.is_set():
            self._kill(running)     # stop() ran while this job was starting
        followed = completed = False
        try:
            task = task_of(job, service, self.files, self.config.max_upload_bytes)
            send_task(process, task)
            reader = ReportReader(job_id, store=self.store, files=self.files, service=service)
            followed = True     # follow() closes the channel
            held_open = reader.follow(read_fd, lambda: process.poll() is None)
            process.wait()
            lost_it = isinstance(process, ForkedJob) and process.lost
            self._end_leftovers(running, thorough=held_open or running.killed or lost_it)
            completed = self._finish(running, reader, service)
        finally:
            if not followed:
                os.close(read_fd)
            try:
                if not completed:
                    self._forget_if_deleted(job_id)
            finally:    # last, so a job no longer running has been tidied up
                with self._lock:
                    self._running.pop(job_id, None)

    def _launch(self, job_id: str, service) -> tuple[subprocess.Popen | ForkedJob, int]:
        """Start the job's child process; its process and the read end of its report pipe."""
        workdir = self.files.results_dir(job_id)
        logs = self.files.job_dir(job_id)
        make_private_dir(workdir)
        make_private_dir(logs / "tmp")
        read_fd, write_fd = os.pipe()
        try:
            with _private_file(logs / "stdout.log") as out, \
                    _private_file(logs / "stderr.log") as err:
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

    def _forget_if_deleted(self, job_id: str) -> bool:
        """A job deleted (by any process) while it started or ran may have had its
        directory made again here after the delete removed it: remove it now."""
        if self.store.service_of(job_id) is not None:
            return False
        self.files.remove(job_id)
        return True

    def _finish(self, running: Running, reader, service) -> bool:
        """Record how the job ended.  True when it recorded it COMPLETED: the job was
        there at that commit and nothing writes into its directory any more, so a
        delete since has removed the directory for good (no read to check for one)."""
        job_id, code = running.job_id, running.process.returncode
        usage = None
        try:
            if code != 0 and running.killed:
                if self._stopping.is_set():     # the server is stopping, not the job
                    lost.release(self.store, service, job_id,
                                 "the server stopped while the job was running")
                return False    # aborted, out of time, destroyed or oversize: phase already set
            if isinstance(running.process, ForkedJob) and running.process.lost:
                lost.release(self.store, service, job_id,
                             "the fork server that started the job died while it ran")
                return False
            usage = self.files.usage(job_id)     # final: the job has ended
            excess = self._excess(job_id, service, usage)
            message = excess or _failure(code or 0, reader)
            if message is None:
                return self.store.mark_completed(job_id)
            detail = _tail(self.files.job_dir(job_id) / "stderr.log") or None
            transient = not excess and (reader.transient or code in service.retry_exit_codes)
            if self._fail(running, service, ErrorSummary(
                    "transient" if transient else "fatal", message, detail)):
                usage = None    # its results went
            return False
        finally:
            self.store.set_stored_bytes(job_id, (usage or self.files.usage(job_id)).total)

    def _fail(self, running: Running, service, error: ErrorSummary) -> bool:
        """ERROR; or, for a transient error with attempts left, QUEUED again after its
        backoff (True).  This worker alone runs the job until then: the attempt's
        results go first, so the next attempt never loses its own."""
        if error.type == "transient" and running.attempt < service.max_attempts:
            self.files.remove_results(running.job_id)
            return lost.retry_or_fail(self.store, service, running.job_id, error)
        self.store.mark_failed(running.job_id, error)
        return False

    def _kill(self, running: Running) -> None:
        """End the job: TERM to its process group (its supervisor then kills every
        descendant), then after a short grace KILL to the group and to everything
        in the job's cgroup."""
        running.killed = True
        pgid = running.process.pid
        # Without a cgroup the supervisor's own sweep is what finds descendants that
        # left the group: let it finish (it takes milliseconds but for a fork storm).
        grace = timing.KILL_GRACE if self.cgroups is not None else timing.SUPERVISOR_GRACE
        try:
            os.killpg(pgid, signal.SIGTERM)
            running.process.wait(grace)
        except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
            pass
        if self.cgroups is not None:
            self.cgroups.kill(running.job_id)
        try:
            os.killpg(pgid, signal.SIGKILL)     # stragglers in the group
        except (ProcessLookupError, PermissionError):
            pass

    def _end_leftovers(self, running: Running, thorough: bool) -> None:
        """Nothing a job started outlives it: everything in its cgroup, what is left
        of its process group and, when some descendant is known to have stayed (it
        held the report channel open) or the job was killed, every process carrying
        its UWS_JOB_ID (its supervisor has killed its descendants already)."""
        if self.cgroups is not None:
            self.cgroups.remove(running.job_id)
        try:
            os.killpg(running.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if thorough:
            kill_strays(running.job_id)


def _failure(code: int, reader) -> str | None:
    """Why a job whose process ended by itself failed; None when it succeeded."""
    if code == 0:
        missing = reader.collect_outputs()
        if not missing:
            return None
        return f"the command did not write its declared output {', '.join(missing)}"
    return reader.error or (f"the job exited with status {code}" if code > 0
                            else f"the job was killed by signal {-code}")


def _private_file(path):
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")


def _tail(path, limit: int = 8192) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", errors="replace").strip()
    except OSError:
        return ""
