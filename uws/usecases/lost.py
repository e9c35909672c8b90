"""What happens to a job whose work was interrupted (worker lost, server stopped)
or failed transiently: run it again after a backoff while its service's
``max_attempts`` allow, else end it in ERROR."""
from __future__ import annotations

from collections.abc import Callable

from ..domain.model import Claim, ErrorSummary
from ..domain.queueing import backoff_seconds
from ..domain.services import Service
from .ports import RunStore


def release(store: RunStore, service: Service | None, job_id: str, message: str, *,
            claim: Claim | None = None) -> bool:
    """A lost worker's job: queued again while attempts remain (at once and without
    limit for a ``retry = true`` service that declares no ``max_attempts``), else
    ERROR (transient: trying again later may well succeed).  True if re-queued.
    ``claim``: a worker's own, for the attempt it releases (see RunStore)."""
    if service is not None and service.retry and service.max_attempts == 1:
        return store.requeue(job_id, claim=claim)
    return retry_or_fail(store, service, job_id, ErrorSummary("transient", message),
                         claim=claim)


def retry_or_fail(store: RunStore, service: Service | None, job_id: str,
                  error: ErrorSummary, *, claim: Claim | None = None,
                  then: Callable[[], object] | None = None) -> bool:
    """Queue the EXECUTING job again after its backoff, keeping ``error`` as its
    attempt's, while its service's ``max_attempts`` allow; else end it in ERROR
    with ``error``.  True if re-queued (``then`` ran before it was)."""
    if service is not None and service.max_attempts > 1 and store.retry_later(
            job_id, error, service.max_attempts,
            lambda attempt: backoff_seconds(attempt, service.retry_backoff,
                                            service.retry_backoff_max),
            claim=claim, then=then):
        return True
    store.mark_failed(job_id, error, claim=claim)
    return False
