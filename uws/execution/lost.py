"""What happens to a job whose work was interrupted (worker lost, server stopped)
or failed transiently: run it again after a backoff while its service's
``max_attempts`` allow, else end it in ERROR."""
from __future__ import annotations

import datetime as dt

from ..model import ErrorSummary
from ..ports import RunStore
from ..queueing import backoff_seconds
from ..services import Service


def release(store: RunStore, service: Service | None, job_id: str, message: str, *,
            started: dt.datetime | None = None) -> bool:
    """A lost worker's job: queued again while attempts remain (at once and without
    limit for a ``retry = true`` service that declares no ``max_attempts``), else
    ERROR (transient: trying again later may well succeed).  True if re-queued.
    ``started``: the attempt's start time, for a worker releasing its own (see
    RunStore)."""
    if service is not None and service.retry and service.max_attempts == 1:
        return store.requeue(job_id, started=started)
    return retry_or_fail(store, service, job_id, ErrorSummary("transient", message),
                         started=started)


def retry_or_fail(store: RunStore, service: Service | None, job_id: str,
                  error: ErrorSummary, *, started: dt.datetime | None = None) -> bool:
    """Queue the EXECUTING job again after its backoff, keeping ``error`` as its
    attempt's, while its service's ``max_attempts`` allow; else end it in ERROR
    with ``error``.  True if re-queued."""
    if service is not None and service.max_attempts > 1 and store.retry_later(
            job_id, error, service.max_attempts,
            lambda attempt: backoff_seconds(attempt, service.retry_backoff,
                                            service.retry_backoff_max), started=started):
        return True
    store.mark_failed(job_id, error, started=started)
    return False
