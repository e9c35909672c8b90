"""System-side use cases run on a schedule: execution-duration deadlines,
destruction, jobs whose worker was lost, quota-held jobs with a slot free, and
the statistics' samples.

Each sweep is idempotent and decided by conditional updates, so any number of
processes may run them against one database at once.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import socket
from typing import TYPE_CHECKING, Protocol

from ..domain import timeutil
from ..domain.model import Claim, ErrorSummary
from . import lost
from . import stats as stats_mod
from .ports import Executor, Files, RunStore, Settings

if TYPE_CHECKING:
    import datetime as dt

log = logging.getLogger(__name__)
PRUNE_CHUNK = 1000      # events deleted per transaction
PRUNE_CHUNKS = 100      # transactions per run, at most (the next run goes on)


class StatsSamples(Protocol):
    """The statistics' writes (:class:`uws.store.stats.StatsStore`)."""

    def sample_phases(self, now: dt.datetime) -> bool: ...
    def prune(self, before: dt.datetime) -> None: ...


class Sweeps:
    def __init__(self, *, config: Settings, store: RunStore, files: Files, executor: Executor,
                 stats: StatsSamples | None = None):
        self.config = config
        self.store = store
        self.files = files
        self.executor = executor
        self.stats = stats

    def sample_statistics(self) -> None:
        """Record the job counts of this time bucket (once, whichever process comes
        first), and forget the statistics older than the longest window."""
        if self.stats is not None:
            now = timeutil.now()
            self.stats.sample_phases(now)
            self.stats.prune(timeutil.add_seconds(now, -stats_mod.KEEP_SECONDS))

    def checkpoint(self) -> None:
        """Keep the database's housekeeping out of the requests' commits (SQLite's
        WAL checkpoint)."""
        self.store.checkpoint()

    def enforce_deadlines(self) -> None:
        """Abort EXECUTING jobs past their execution duration (UWS 1.1 §2.1.4)."""
        for job_id in self.store.overdue_ids(timeutil.now()):
            if self.store.mark_aborted(job_id, reason=ErrorSummary(
                    "transient", "the execution duration was exceeded")):
                self.executor.abort(job_id)

    def destroy_expired(self) -> None:
        """At destruction time: forget the job, or archive it (UWS 1.1 §2.1.5)."""
        for job_id, service_name in self.store.expired(timeutil.now()):
            service = self.config.services.get(service_name)
            if service is not None and service.archive:
                self._archive(job_id)
            else:
                self._destroy(job_id)

    # Files go first in both: the record is changed only once they are gone, so
    # a crash or a failed removal leaves a job the next sweep finishes, never
    # files no record points to (archived jobs are not swept again).

    def _archive(self, job_id: str) -> None:
        self._cut_short(job_id)
        if self.files.remove_results(job_id):
            self.store.archive(job_id)

    def _destroy(self, job_id: str) -> None:
        self._cut_short(job_id)
        if self.files.remove(job_id):
            self.store.delete_job(job_id)

    def _cut_short(self, job_id: str) -> None:
        """End a job still pending or running at its destruction time, saying why
        (an archived job keeps the reason)."""
        if self.store.mark_aborted(job_id, reason=ErrorSummary(
                "transient", "the job reached its destruction time")):
            self.executor.abort(job_id)

    def release_held(self) -> None:
        """Queue again the quota-held jobs of owners under their running cap: the cap
        was raised, or a running job's end freed a slot its process did not release
        (it died first; see uws.store.holds)."""
        for job_id in self.store.release_stragglers(list(self.config.services),
                                                    self._running_cap):
            self.executor.submit(job_id)

    def _running_cap(self, service: str, owner: str) -> int:
        return self.config.services[service].quota(owner).running

    def prune_events(self) -> int:
        """Forget events older than ``event_retention``, in bounded chunks (each its own
        short transaction); how many went."""
        before = timeutil.now() - dt.timedelta(seconds=self.config.event_retention)
        pruned = 0
        for _ in range(PRUNE_CHUNKS):
            n = self.store.prune_events(before, PRUNE_CHUNK)
            pruned += n
            if n < PRUNE_CHUNK:
                break
        return pruned

    def recover_lost(self) -> None:
        """EXECUTING jobs whose lease expired lost their worker."""
        for claim, service_name in self.store.lost_leases(timeutil.now()):
            self._recover(claim, service_name)

    def recover_dead_local_workers(self) -> None:
        """Leases held by processes of this host that no longer exist are lost at
        once, without waiting for them to expire (at start-up, and with the lease
        sweep: a Celery worker beside this front end may be killed)."""
        prefix = f"{socket.gethostname()}:"
        for claim, service_name in self.store.leases_of(prefix):
            if not _alive(claim.worker):
                self._recover(claim, service_name)

    def _recover(self, claim: Claim, service_name: str) -> None:
        """End what the lost attempt left on this machine, and queue the job again or
        fail it, unless another sweep (another front end's) recovered it first and a
        worker has it now: the release is fenced by the lost claim, and the processes
        are only killed after a look that it is still the job's."""
        job_id = claim.job_id
        if not claim.holds(self.store.lease_states([job_id]).get(job_id)):
            return
        self.executor.end_lost(job_id)
        service = self.config.services.get(service_name)
        if lost.release(self.store, service, job_id, "the worker running this job was lost",
                        claim=claim):
            self.executor.submit(job_id)
        log.warning("job %s: its worker was lost", job_id)


def _alive(lease_owner: str) -> bool:
    try:
        pid = int(lease_owner.split(":")[1])
    except (IndexError, ValueError):
        return True     # not ours to judge
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """A killed server not yet reaped by its parent still answers kill(pid, 0)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False
