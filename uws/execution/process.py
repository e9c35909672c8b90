"""The local executor: each job in its own OS process and process group.

Worker threads claim QUEUED jobs (a conditional QUEUED -> EXECUTING update, so
several processes may share one database and a job still runs once), have the
executor's fork server fork the job's process (:mod:`.jobprocess`, which also kills
a job and what it started), follow its report lines (:mod:`.reports`) and record how
it ended (:mod:`.outcome`).  A monitor thread renews the leases of running jobs and
kills every job whose phase is no longer EXECUTING in the database: an ABORT made by
any process, an exceeded execution duration or a destruction ends the work within a
second.  A job taken over by another worker (this one was stopped past its lease, and
a sweep queued the job again) is no longer this worker's: it ends its own attempt's
processes and records nothing of it.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from ..domain import timing
from ..domain.model import Claim, ErrorSummary, LeaseState
from ..domain.phases import Phase
from ..usecases.ports import Files, RunStore, Settings
from .base import Executor
from .forkclient import ForkedJob
from .jobprocess import JobProcesses, Running
from .outcome import Outcomes, excess
from .reports import ReportReader
from .task import send_task, task_of

log = logging.getLogger(__name__)


def worker_name() -> str:
    """host:pid:nonce — lets a restarted server on this host spot its dead predecessors."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


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
        self.processes = JobProcesses(config, files, self.slots)
        self.outcomes = Outcomes(store, files)

    # -- Executor interface ---------------------------------------------------------

    def start(self) -> None:
        if self.config.fork_server_at_start:
            self._spawn_thread(self.processes.forks.warm, "uws-forkserver-start")
        self._spawn_thread(self.files.purge_discarded, "uws-purge-discarded")
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
            self.processes.kill(running)

    def stop(self) -> None:
        self._stopping.set()
        with self._wake:
            self._wake.notify_all()
        with self._lock:
            running = list(self._running.values())
        for r in running:
            self.processes.kill(r)
        for t in self._threads:
            t.join(timeout=5)
        self.processes.forks.stop()
        self.processes.dirs.close()

    def end_lost(self, job_id: str) -> None:
        self.processes.end_lost(job_id)

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
        """Claim the next QUEUED job (fairly, see Store.claim) and run it to its
        end here; False when there was none to claim."""
        if self._stopping.is_set() or self._draining.is_set():
            return False
        try:
            claim = self.store.claim(self.worker_id, list(self.config.services),
                                     timing.LEASE, self._running_cap)
        except Exception:
            log.exception("cannot claim a job")
            return False
        if claim is None:
            return False
        try:
            self._execute(claim)
        except Exception:
            log.exception("job %s: executor failure", claim.job_id)
            self.store.mark_failed(claim.job_id, ErrorSummary(
                "transient", "the executor failed to run the job"), claim=claim)
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
                self._stop_unowned(ids)
                if time.monotonic() - last_renewal > timing.LEASE / 3:
                    renewed = self.store.renew_leases(self.worker_id, ids, timing.LEASE)
                    last_renewal = time.monotonic()
                    # Not renewed: ended, or taken over since the look above (a worker
                    # resumed after a pause past its lease): stop it now.
                    self._stop_unowned([i for i in ids if i not in renewed])
            except Exception:
                log.exception("monitor pass failed")

    def _stop_unowned(self, ids: list[str]) -> None:
        """Kill the jobs run here that this worker no longer runs: taken over by
        another worker (this attempt only), or no longer EXECUTING (aborted, deleted,
        out of time, destroyed)."""
        leases = self.store.lease_states(ids)
        for job_id in ids:
            with self._lock:
                running = self._running.get(job_id)
            if running is None:
                continue
            if superseded(leases.get(job_id), running.claim):
                self._end_superseded(running)
            elif job_id not in leases or leases[job_id][0] is not Phase.EXECUTING:
                self.abort(job_id)

    def _end_superseded(self, running: Running) -> None:
        # An attempt whose process has ended is its own thread's to settle (its own
        # retry may have queued the job again).
        if not running.superseded and running.process.poll() is None:
            self._forsake(running)
            self.processes.end_attempt(running)

    def _forsake(self, running: Running) -> None:
        """Mark the attempt as no longer this worker's (once): its end is not recorded."""
        running.superseded = True
        log.warning("job %s: another attempt has taken it over (this worker's lease "
                    "expired); attempt %d here ends unrecorded", running.job_id,
                    running.attempt)

    def _running_claim(self, job_id: str) -> Claim | None:
        """The claim of the job's attempt run here (None: none is)."""
        with self._lock:
            running = self._running.get(job_id)
        return running.claim if running is not None else None

    def _check_superseded(self, running: Running) -> bool:
        if not running.superseded and superseded(
                self.store.lease_states([running.job_id]).get(running.job_id),
                running.claim):
            self._forsake(running)
        return running.superseded

    def _stop_oversize(self, ids: list[str]) -> None:
        """End in ERROR the running jobs that wrote more than their service allows
        (the pass below then kills them, as it does aborted ones)."""
        for job_id in ids:
            service = self.config.services.get(self.store.service_of(job_id) or "")
            over = service and excess(service, self.files.usage(job_id))
            if over:
                log.warning("job %s: %s; stopping it", job_id, over)
                claim = self._running_claim(job_id)
                if claim is not None:   # else it has just ended
                    self.store.mark_failed(job_id, ErrorSummary("fatal", over), claim=claim)

    # -- one job ---------------------------------------------------------------------------

    def _execute(self, claim: Claim) -> None:
        job_id = claim.job_id
        service_name = self.store.service_of(job_id)
        job = self.store.get_job(job_id, service_name, None) if service_name else None
        if job is None or service_name is None:
            return
        service = self.config.services[service_name]
        with self._lock:
            older = self._running.get(job_id)
        if older is not None:   # this worker's own attempt, queued again since: over
            self._end_superseded(older)
        # What an earlier attempt left (its worker lost, or this one's superseded
        # attempt) is not this one's to report.
        self.files.set_aside_results(job_id).remove()
        try:
            process, read_fd = self.processes.launch(job_id, service)
        except OSError:
            if self._forget_if_deleted(job_id):
                return      # deleted while starting: its directory went under us
            raise
        running = Running(job_id, process, claim, attempt=job.attempt)
        with self._lock:
            self._running[job_id] = running
        if self._stopping.is_set():
            self.processes.kill(running)    # stop() ran while this job was starting
        followed = completed = False
        reader: ReportReader | None = None
        try:
            task = task_of(job, service, self.files, self.config.max_upload_bytes)
            send_task(process, task)
            self.processes.dirs.refill()    # the next job's directory, while this one runs
            reader = _AttemptReports(lambda: self._check_superseded(running), job_id,
                                     store=self.store, files=self.files, service=service,
                                     claim=claim)
            followed = True     # follow() closes the channel
            held_open = reader.follow(read_fd, lambda: process.poll() is None)
            process.wait()
            if self._check_superseded(running):
                # The job's cgroup and UWS_JOB_ID may be the new attempt's: spare them.
                self.processes.end_attempt(running)
                return
            lost_it = isinstance(process, ForkedJob) and process.lost
            self.processes.end_leftovers(running,
                                         thorough=held_open or running.killed or lost_it)
            completed = self.outcomes.record(running, reader, service, self._stopping)
        finally:
            if not followed:
                os.close(read_fd)
            recorded = completed or running.superseded    # nothing left to record
            if reader is not None and not recorded:
                _keep_results(reader)      # an exception above: what it reported stays
            try:
                if not recorded:
                    self._forget_if_deleted(job_id)
            finally:    # last, so a job no longer running has been tidied up
                with self._lock:
                    if self._running.get(job_id) is running:    # not a newer attempt
                        del self._running[job_id]

    def _forget_if_deleted(self, job_id: str) -> bool:
        """A job deleted (by any process) while it started or ran may have had its
        directory made again here after the delete removed it: remove it now."""
        if self.store.service_of(job_id) is not None:
            return False
        self.files.remove(job_id)
        return True


def superseded(lease: LeaseState | None, claim: Claim) -> bool:
    """Whether a job's (phase, lease owner, start time) say the attempt of ``claim``
    no longer holds it: a sweep found its lease expired and queued it again, or
    another attempt (another worker's, or this worker's own) has claimed it since."""
    if lease is None:
        return False        # deleted: handled as an ABORT is
    if lease[0] is Phase.EXECUTING:
        return not claim.holds(lease)
    return lease[0] in (Phase.QUEUED, Phase.HELD, Phase.PENDING)


class _AttemptReports(ReportReader):
    """One attempt's reports: its results are recorded only while the job is still
    this attempt's (a job taken over gets the new attempt's results, not these)."""

    def __init__(self, superseded: Callable[[], bool], *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._superseded = superseded

    def flush_results(self) -> None:
        if self.held_results() and not self._superseded():
            super().flush_results()


def _keep_results(reader: ReportReader) -> None:
    """Record the results a job reported and its end did not (best effort: this runs
    while an exception may be on its way to ending the job in ERROR)."""
    try:
        reader.flush_results()
    except Exception:
        log.exception("job %s: its results could not be recorded", reader.job_id)
