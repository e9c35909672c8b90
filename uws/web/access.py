"""Who may use a route, bound to each view by a decorator (not guessed from the names
of its arguments, which a new route could spell differently and so skip the check).

Authentication itself runs before every request (``app._admit``); these decide
what an identified or anonymous caller may reach.
"""
from __future__ import annotations

import functools

from . import identity
from .http import jobs_api

#: The attribute a guarded view carries, naming what it checks ("service" or "job").
MARK = "uws_access"


def service_view(view):
    """Guard a view whose first argument is a service name: an anonymous caller of a
    service that needs an identity gets 401 (an unknown name is left to the view's 404)."""
    @functools.wraps(view)
    def guarded(service: str, *args, **kwargs):
        _require_identity(service)
        return view(service, *args, **kwargs)
    setattr(guarded, MARK, "service")
    return guarded


def job_view(view):
    """Guard a view of one job (arguments service, job_id): as :func:`service_view`,
    then 404 for no such job and 403 for another owner's, before the body is read."""
    @functools.wraps(view)
    def guarded(service: str, job_id: str, *args, **kwargs):
        if _require_identity(service):
            jobs_api().check_access(service, job_id, identity.current_caller())
        return view(service, job_id, *args, **kwargs)
    setattr(guarded, MARK, "job")
    return guarded


def job_use_case_view(view):
    """As :func:`job_view`, for a view whose one use case answers the same 404 and 403
    itself, scoped to the caller in the same query (``Jobs.get``, ``Jobs.wait``,
    ``Jobs.delete``): a separate check would read the job twice on the busiest routes.
    Only for views that read no request body, which the guard's early check protects."""
    @functools.wraps(view)
    def guarded(service: str, job_id: str, *args, **kwargs):
        _require_identity(service)
        return view(service, job_id, *args, **kwargs)
    setattr(guarded, MARK, "job")
    return guarded


def public_view(view):
    """Guard a view of a service's public description (VOSI): every caller may read it,
    also anonymous ones of a service that needs an identity (registries and monitors
    call without credentials); 404 for an unknown service.  Nothing of any job is
    reachable through it."""
    @functools.wraps(view)
    def guarded(service: str, *args, **kwargs):
        jobs_api().service(service)     # NotFound for an unknown name
        return view(service, *args, **kwargs)
    setattr(guarded, MARK, "public")
    return guarded


def _require_identity(name: str) -> bool:
    """401 for an anonymous caller the service refuses; whether the service exists."""
    service = jobs_api().config.services.get(name)
    if service is None:
        return False
    identity.require_identity(service)
    return True


def access_of(view) -> str | None:
    """What a view checks ("service", "job", "public"), or None if it is not guarded."""
    return getattr(view, MARK, None)
