"""Use cases of batches: many jobs created by one request, followed and changed
together.  No HTTP and no SQL in here.

Each job of a batch is an ordinary job: its parameters are validated exactly as a
single creation's (:func:`uws.domain.services.collect`), it counts against the same quotas,
and it is deleted by the same use case (:meth:`uws.usecases.jobs.Jobs.delete`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Protocol

from ..domain import timeutil
from ..domain.batchmodel import REPEATED, Batch, BatchJob, Progress, is_batch_id
from ..domain.errors import BadRequest, Forbidden, NotFound, OverQuota, TooLarge
from ..domain.model import ANONYMOUS, Caller, Delivery, Job, Parameter, new_job_id
from ..domain.parameters import ParameterError
from ..domain.phases import Phase
from ..domain.services import Quota, Service, collect
from . import creating
from .jobs import Jobs

#: One job's parameters: (name, value) pairs, as a single creation's form gives them.
Row = Sequence[tuple[str, str]]


class BatchStorage(Protocol):
    """What the batch use cases read and change (uws.store.batches.BatchStore)."""

    def insert_batch(self, batch: Batch, jobs: Sequence[Job], quota: Quota = ...) -> None: ...
    def get_batch(self, batch_id: str, service: str, owner: str | None) -> Batch | None: ...
    def batch_owner(self, batch_id: str, service: str) -> str | None: ...
    def list_batches(self, service: str, owner: str | None, offset: int,
                     limit: int) -> list[Batch]: ...
    def count_batches(self, service: str, owner: str | None) -> int: ...
    def progress(self, batch_id: str) -> Progress: ...
    def batch_callback(self, batch_id: str) -> Delivery | None: ...
    def batch_jobs(self, batch_id: str, offset: int, limit: int) -> list[BatchJob]: ...
    def parameter_sets(self, batch_id: str,
                       in_phases: Iterable[Phase]) -> list[list[Parameter]]: ...
    def mark_queued(self, batch_id: str) -> list[str]: ...
    def mark_aborted(self, batch_id: str) -> list[str]: ...
    def delete_batch(self, batch_id: str) -> list[str]: ...


@dataclasses.dataclass
class BatchControl:
    """What a batch creation asks besides its parameter sets."""
    run: bool = False               # PHASE=RUN: queue every job at once
    run_id: str | None = None       # the batch's RUNID, also each job's
    callback: str | None = None     # CALLBACK: POSTed the batch when its last job ends


class Batches:
    """Create, read, run, abort, repeat and delete batches; raises the
    :mod:`uws.domain.errors` exceptions that the web layer maps to statuses."""

    def __init__(self, jobs: Jobs, store: BatchStorage):
        self.jobs = jobs
        self.store = store

    # -- creation -----------------------------------------------------------------------

    def create(self, service_name: str, rows: Sequence[Row], control: BatchControl,
               caller: Caller = ANONYMOUS) -> str:
        """One PENDING job per row (QUEUED with ``control.run``), all stored in one
        transaction or none; the batch's id.  Raises NotFound (no such service),
        BadRequest (a bad row, naming it and its parameter, or a refused CALLBACK), TooLarge (more rows than
        ``max_batch_jobs``), Forbidden (the owner's jobs quota)."""
        service = self.jobs.service(service_name)
        if not rows:
            raise BadRequest("a batch needs at least one job")
        if len(rows) > service.max_batch_jobs:
            raise TooLarge(f"a batch of {service.name!r} has at most "
                           f"{service.max_batch_jobs} jobs, not {len(rows)}")
        creating.checked_run_id(control.run_id)
        callback = None if control.callback is None else \
            creating.checked_callback(service, control.callback)
        sets = [_parameters(service, number, row) for number, row in enumerate(rows, 1)]
        quota = service.quota(caller.owner)
        self.jobs.check_quota(service, caller.owner, quota, new_jobs=len(sets))
        now = timeutil.now()
        batch = Batch(new_job_id(), service.name, caller.owner, now, len(sets), control.run_id,
                      callback)
        # Sorted ids: with one creation time, (creation_time, id) is the rows' order.
        ids = sorted(new_job_id() for _ in sets)
        jobs = [creating.new_job(service, caller.owner, now, id=job_id, run_id=control.run_id,
                                 parameters=params)
                for job_id, params in zip(ids, sets)]
        try:
            self.store.insert_batch(batch, jobs, quota)
        except OverQuota as exc:
            raise creating.over_quota(service, exc) from None
        if control.run:
            self._submit(self.store.mark_queued(batch.id))
        return batch.id

    # -- reading --------------------------------------------------------------------------

    def get(self, service: str, batch_id: str, caller: Caller = ANONYMOUS) -> Batch:
        """The batch.  Raises NotFound (no such service or batch), Forbidden
        (another owner's batch)."""
        self.jobs.service(service)
        batch = self.store.get_batch(batch_id, service, caller.scope) \
            if is_batch_id(batch_id) else None
        if batch is not None:
            return batch
        if is_batch_id(batch_id) and self.store.batch_owner(batch_id, service) is not None:
            raise Forbidden(f"batch {batch_id} belongs to another owner")
        raise NotFound(f"no batch {batch_id!r} in {service!r}")

    def progress(self, batch: Batch) -> Progress:
        return self.store.progress(batch.id)

    def callback(self, batch: Batch) -> Delivery | None:
        """What became of the batch's callback; None when it named none."""
        return self.store.batch_callback(batch.id)

    def report(self, batch: Batch, start: int, limit: int) -> list[BatchJob]:
        """A page of the batch's jobs in creation order."""
        return self.store.batch_jobs(batch.id, start, limit)

    def list(self, service: str, start: int, limit: int,
             caller: Caller = ANONYMOUS) -> tuple[list[Batch], int]:
        """A page of the caller's batches (an administrator's: everyone's), newest
        first, and how many there are.  Raises NotFound (no such service)."""
        self.jobs.service(service)
        return (self.store.list_batches(service, caller.scope, start, limit),
                self.store.count_batches(service, caller.scope))

    # -- changes ----------------------------------------------------------------------------

    def run(self, service: str, batch_id: str, caller: Caller = ANONYMOUS) -> int:
        """PHASE=RUN of the batch's PENDING and HELD jobs, each as a single RUN (held
        while a hold applies); how many were queued."""
        batch = self.get(service, batch_id, caller)
        return self._submit(self.store.mark_queued(batch.id))

    def abort(self, service: str, batch_id: str, caller: Caller = ANONYMOUS) -> int:
        """PHASE=ABORT: abort the batch's unfinished jobs, killing their work; how many."""
        batch = self.get(service, batch_id, caller)
        aborted = self.store.mark_aborted(batch.id)
        for job_id in aborted:
            self.jobs.executor.abort(job_id)
        return len(aborted)

    def repeat(self, service: str, batch_id: str, caller: Caller = ANONYMOUS) -> str:
        """ACTION=REPEAT: a new batch of copies of the failed (ERROR) and aborted jobs'
        parameter sets, in their order, naming the same callback; its id.  Raises
        Forbidden when there is none."""
        batch = self.get(service, batch_id, caller)
        sets = self.store.parameter_sets(batch.id, REPEATED)
        if not sets:
            raise Forbidden(f"batch {batch.id} has no failed or aborted job to repeat")
        rows = [[(p.name, p.value) for p in params] for params in sets]
        return self.create(service, rows, BatchControl(run_id=batch.run_id,
                                                       callback=batch.callback_url), caller)

    def delete(self, service: str, batch_id: str, caller: Caller = ANONYMOUS) -> None:
        """Delete the batch and its jobs in one transaction, then finish each job as
        DELETE of a job does (its work killed, its files removed)."""
        batch = self.get(service, batch_id, caller)
        for job_id in self.store.delete_batch(batch.id):
            self.jobs.forget(job_id)

    def _submit(self, job_ids: Sequence[str]) -> int:
        for job_id in job_ids:
            self.jobs.executor.submit(job_id)
        return len(job_ids)


def _parameters(service: Service, number: int, row: Row) -> list[Parameter]:
    """The validated parameters of row ``number`` (from 1); no uploads in a batch."""
    try:
        values = collect(service, row, {}, creating=True)
    except ParameterError as exc:
        raise BadRequest(f"row {number}: {exc}") from None
    return [Parameter(v.name, v.value, v.by_reference) for v in values]
