"""Administrative holds, as use cases.  No HTTP and no SQL in here.

An administrator holds a whole service, or one owner in it: while a hold applies,
PHASE=RUN moves that owner's PENDING jobs to HELD instead of QUEUED.  Releasing
the hold queues them again, in their claim order.  Jobs also wait HELD when their
owner runs as many jobs as its service allows (``max_running_per_owner``); those
are released by the store as slots free, not here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..domain import timeutil
from ..domain.errors import BadRequest, Forbidden, NotFound
from ..domain.model import EVERYONE, Caller, Hold, fits_xml

if TYPE_CHECKING:
    from .jobs import Jobs

MAX_REASON = 1024
MAX_OWNER = 255


class Holds:
    """Holds of the services of one server, for administrators only: each method
    raises NotFound (no such service), Forbidden (not an administrator) or
    BadRequest (a value out of bounds)."""

    def __init__(self, jobs: Jobs):
        self.jobs = jobs

    def of_service(self, service: str, caller: Caller) -> list[Hold]:
        self.check(service, caller)
        return self.jobs.store.holds(service)

    def hold(self, service: str, owner: str | None, reason: str, caller: Caller) -> Hold:
        """Hold the service (``owner`` None or "*") or one owner in it; restating a
        hold replaces its reason."""
        self.check(service, caller)
        if len(reason) > MAX_REASON or not fits_xml(reason):
            raise BadRequest(f"REASON: at most {MAX_REASON} characters, and no control "
                             "characters")
        hold = Hold(service, _owner(owner), caller.owner, timeutil.now(), reason.strip())
        self.jobs.store.place_hold(hold)
        return hold

    def release(self, service: str, owner: str | None, caller: Caller) -> list[str]:
        """Lift a hold; the ids of the jobs queued again (handed to the executor).
        Raises NotFound if there is no such hold."""
        self.check(service, caller)
        who = _owner(owner)
        released = self.jobs.store.release_hold(service, who)
        if released is None:
            target = "the service" if who == EVERYONE else f"owner {who!r}"
            raise NotFound(f"no hold on {target} in {service!r}")
        for job_id in released:
            self.jobs.executor.submit(job_id)
        return released

    def check(self, service: str, caller: Caller) -> None:
        """NotFound for no such service, Forbidden unless ``caller`` is an administrator."""
        self.jobs.service(service)
        if not caller.admin:
            raise Forbidden("only administrators may see and change holds")


def _owner(owner: str | None) -> str:
    """The owner a hold names: EVERYONE when none is given."""
    owner = (owner or "").strip()
    if not owner:
        return EVERYONE
    if len(owner) > MAX_OWNER or not fits_xml(owner):
        raise BadRequest(f"OWNER: at most {MAX_OWNER} characters, and no control characters")
    return owner
