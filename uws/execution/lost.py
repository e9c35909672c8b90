"""What happens to a job whose work was interrupted (worker lost, server stopped)."""
from __future__ import annotations

from ..phases import Event


def release(store, service, job_id: str, message: str) -> bool:
    """Queue the job again if its service is safe to retry, else end it in ERROR
    (transient: trying again later may well succeed).  True if re-queued."""
    if service is not None and service.retry:
        return store.transition(job_id, Event.REQUEUE, start_time=None, lease_owner=None,
                                lease_expires=None, deadline=None, progress=None,
                                progress_message=None)
    store.transition(job_id, Event.FAIL, error_type="transient", error_message=message)
    return False
