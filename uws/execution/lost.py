"""What happens to a job whose work was interrupted (worker lost, server stopped)."""
from __future__ import annotations

from ..model import ErrorSummary
from ..ports import RunStore
from ..services import Service


def release(store: RunStore, service: Service | None, job_id: str, message: str) -> bool:
    """Queue the job again if its service is safe to retry, else end it in ERROR
    (transient: trying again later may well succeed).  True if re-queued."""
    if service is not None and service.retry:
        return store.requeue(job_id)
    store.mark_failed(job_id, ErrorSummary("transient", message))
    return False
