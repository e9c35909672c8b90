"""What every way of making a job shares (a creation, a REPEAT, a batch's rows): the
new job's defaults, the checks of its control values, the staging of its uploads
and the answer past a quota.  No HTTP and no SQL in here."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

from ..domain import timeutil
from ..domain.errors import BadRequest, Forbidden, OverQuota
from ..domain.model import Job, Parameter, check_run_id, new_job_id
from ..domain.phases import Phase
from ..domain.services import Service
from . import callbacks
from .ports import Files


def new_job(service: Service, owner: str, now: dt.datetime, **fields) -> Job:
    """A PENDING job of ``service`` with its defaults (execution duration, destruction,
    priority), ``fields`` overriding them."""
    defaults = dict(id=new_job_id(), execution_duration=service.execution_duration,
                    destruction=default_destruction(service, now),
                    priority=service.priority_default)
    return Job(**{**defaults, **fields}, service=service.name, owner=owner,
               phase=Phase.PENDING, creation_time=now)


def default_destruction(service: Service, now: dt.datetime) -> dt.datetime | None:
    return timeutil.add_seconds(now, service.lifetime) if service.lifetime else None


def checked_run_id(run_id: str | None) -> None:
    """BadRequest for a RUNID that cannot be kept (None: none given)."""
    if run_id is None:
        return
    try:
        check_run_id(run_id)
    except ValueError as exc:
        raise BadRequest(f"RUNID: {exc}") from None


def checked_callback(service: Service, url: str) -> str:
    """The CALLBACK URL as kept; BadRequest unless ``service`` accepts it."""
    try:
        return callbacks.check_url(url, service.callback_hosts)
    except callbacks.CallbackError as exc:
        raise BadRequest(str(exc)) from None


def over_quota(service: Service, exc: OverQuota) -> Forbidden:
    """The answer to an owner past one of the service's quotas."""
    if exc.what == "bytes":
        return Forbidden(f"your jobs in {service.name!r} would keep more than {exc.limit} "
                         "bytes of files, its limit; delete some first")
    return Forbidden(f"you already have {exc.limit} jobs in {service.name!r}, its limit; "
                     "delete some first")


class Uploads:
    """Uploaded files on their way into a job: staged beside its directory first,
    installed once the job's record may be kept, discarded otherwise."""

    def __init__(self, files: Files):
        self.files = files

    def stage(self, job_id: str, values):
        """Parameters for ``values``, and their uploads staged as {name: path}."""
        params, staged = [], {}
        try:
            for v in values:
                if v.upload is not None:
                    staged[v.name] = self.files.stage_upload(job_id, v.name, v.upload.stream)
                    params.append(Parameter.upload(v.name))
                else:
                    params.append(Parameter(v.name, v.value, v.by_reference))
        except BaseException:
            self.discard(staged)
            raise
        return params, staged

    def install(self, job_id: str, staged: dict[str, Path]) -> None:
        for name, path in staged.items():
            self.files.install_upload(path, job_id, name)

    @staticmethod
    def discard(staged: dict[str, Path]) -> None:
        for path in staged.values():
            path.unlink(missing_ok=True)

    @staticmethod
    def size(staged: dict[str, Path]) -> int:
        return sum(path.stat().st_size for path in staged.values())
