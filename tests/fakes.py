"""In-memory stand-ins for the ports (uws.usecases.ports), so the use cases can be tested
without HTTP, processes or a database."""
from __future__ import annotations

import copy
import dataclasses
import threading
from collections import Counter

from uws.domain import phases, timeutil
from uws.domain.errors import OverQuota
from uws.domain.model import Delivery, JobRef, ListQuery
from uws.domain.phases import Event, Phase
from uws.domain.services import Quota


class MemoryStore:
    """The :class:`uws.usecases.ports.JobStore` of the use cases, in a dict, with the SQL
    store's semantics: owner scoping, phase-conditional changes, quotas."""

    def __init__(self):
        self.jobs: dict = {}
        self.bytes: dict[str, int] = {}
        self._lock = threading.Lock()

    # -- creation and reading
    def insert_job(self, job, quota: Quota = Quota(), stored_bytes: int = 0, run=False):
        self._insert(job, quota, stored_bytes)
        return self.run_job(job.id, job.service, job.owner) if run else None

    def _insert(self, job, quota: Quota, stored_bytes: int) -> None:
        with self._lock:
            mine = [j for j in self._kept(job.service) if j.owner == job.owner]
            if quota.jobs and len(mine) + 1 > quota.jobs:
                raise OverQuota("jobs", quota.jobs)
            if quota.bytes and sum(self.bytes.get(j.id, 0) for j in mine) + stored_bytes \
                    > quota.bytes:
                raise OverQuota("bytes", quota.bytes)
            self.jobs[job.id] = copy.deepcopy(job)
            self.bytes[job.id] = stored_bytes

    def get_job(self, job_id, service, owner):
        job = self._find(job_id, service, owner)
        return copy.deepcopy(job) if job else None

    def owner_of(self, job_id, service):
        job = self._find(job_id, service, None)
        return job.owner if job else None

    def phase_of(self, job_id, service, owner):
        job = self._find(job_id, service, owner)
        return job.phase if job else None

    def phases_of(self, job_ids):
        return {i: self.jobs[i].phase for i in job_ids if i in self.jobs}

    def list_jobs(self, service, owner, q: ListQuery):
        refs = [JobRef(j.id, j.phase, j.run_id, j.owner, j.creation_time)
                for j in self._kept(service, q.phases or None)
                if (owner is None or j.owner == owner)
                and (q.after is None or j.creation_time > q.after)
                and (q.before is None or (j.creation_time, j.id) < q.before)]
        refs.sort(key=lambda r: (r.creation_time, r.id), reverse=True)
        end = None if q.limit is None else q.offset + q.limit
        return refs[q.offset:end]

    def iter_jobs(self, service, owner, q, chunk=1000):
        yield from self.list_jobs(service, owner, dataclasses.replace(q, limit=None))

    def count_jobs(self, service, owner, q):
        return len(self.list_jobs(service, owner, dataclasses.replace(q, limit=None,
                                                                      offset=0)))

    def job_counts(self, service=None, owner=None):
        with self._lock:
            return dict(Counter((j.service, j.owner, j.phase) for j in self.jobs.values()
                                if (service is None or j.service == service)
                                and (owner is None or j.owner == owner)))

    def stored_bytes(self, service, owner):
        return sum(self.bytes.get(j.id, 0) for j in self._kept(service) if j.owner == owner)

    def set_stored_bytes(self, job_id, size):
        if job_id in self.jobs:
            self.bytes[job_id] = size

    # -- changes
    def mark_queued(self, job_id, owner=None):
        return self._apply(job_id, Event.RUN, owner)

    def run_job(self, job_id, service, owner):
        """PHASE=RUN with no holds placed (the SQL store's holds have tests of their own),
        of the job of ``service`` and ``owner`` only, as the SQL store's."""
        if self._find(job_id, service, owner) is None:
            return None
        return phases.target(Event.RUN) if self._apply(job_id, Event.RUN, owner) else None

    def held_because(self, job_id):
        return None, None

    def mark_executing(self, job_id):
        return self._apply(job_id, Event.START, start_time=timeutil.now())

    def mark_aborted(self, job_id, owner=None, reason=None):
        return self._apply(job_id, Event.ABORT, owner, end_time=timeutil.now(), error=reason)

    def set_execution_duration(self, job_id, seconds):
        return self._set_while(job_id, phases.NOT_STARTED, execution_duration=seconds)

    def set_destruction(self, job_id, when, now):
        job = self.jobs.get(job_id)
        if job is not None and job.destruction is not None and job.destruction <= now:
            return False    # a time come is final (uws.store.transitions)
        return self._set_while(job_id, set(Phase) - {Phase.ARCHIVED}, destruction=when)

    def set_parameters(self, job_id, replace, params, run_id=None, then=None):
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None or job.phase is not Phase.PENDING:
                return False
            if then is not None:
                then()      # before the change: its error leaves the job as it was
            job.parameters = [p for p in job.parameters if p.name not in replace] + params
            if run_id is not None:
                job.run_id = run_id
            return True

    def set_callback(self, job_id, url):
        return self._set_while(job_id, {Phase.PENDING}, callback_url=url)

    def callback_of(self, job_id):
        job = self.jobs.get(job_id)
        if job is None or job.callback_url is None:
            return None
        return Delivery(job.callback_url)     # deliveries are the SQL store's

    def delete_job(self, job_id, service=None, owner=None):
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None or (service is not None and job.service != service) or (
                    owner is not None and job.owner != owner):
                return False
            del self.jobs[job_id]
            self.bytes.pop(job_id, None)
            return True

    def set_priority(self, job_id, priority, in_phases):
        return self._set_while(job_id, in_phases, priority=priority)

    def set_start_after(self, job_id, when):
        return self._set_while(job_id, {Phase.PENDING}, start_after=when)

    def priorities_of(self, job_ids, service, owner):
        return {i: j.priority for i in job_ids
                if (j := self._find(i, service, owner)) is not None}

    def queue_position(self, job_id, service):
        return 0

    def recent_run_seconds(self, service, limit=20):
        return []

    # -- helpers
    def _kept(self, service, in_phases=None):
        return [j for j in self.jobs.values() if j.service == service and (
            j.phase in in_phases if in_phases else j.phase is not Phase.ARCHIVED)]

    def _find(self, job_id, service, owner):
        job = self.jobs.get(job_id)
        if job is None or job.service != service or (owner is not None and job.owner != owner):
            return None
        return job

    def _apply(self, job_id, event, owner=None, **fields):
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None or (owner is not None and job.owner != owner) \
                    or not phases.allowed(event, job.phase):
                return False
            job.phase = phases.target(event)
            for name, value in fields.items():
                setattr(job, name, value)
            return True

    def _set_while(self, job_id, in_phases, **fields):
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None or job.phase not in in_phases:
                return False
            for name, value in fields.items():
                setattr(job, name, value)
            return True


class RecordingExecutor:
    """An executor that runs nothing and remembers what it was told."""

    def __init__(self):
        self.submitted: list[str] = []
        self.aborted: list[str] = []

    def start(self):
        pass

    def submit(self, job_id):
        self.submitted.append(job_id)

    def abort(self, job_id):
        self.aborted.append(job_id)

    def end_lost(self, job_id):
        pass

    def stop(self):
        pass


class NoWait:
    """A watch whose waits end at once, as if the time had passed."""

    def mark(self):
        return 0

    def wait(self, job_id, phase, timeout, since=None):
        return False

    def notify(self, job_id):
        pass
