"""Use cases: what a client can do to jobs.  No HTTP and no SQL in here."""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any, NoReturn

from ..domain import estimates, numbers, phases, queueing, timeutil
from ..domain.errors import BadRequest, Forbidden, NotFound, OverQuota
from ..domain.model import ANONYMOUS, Caller, Job, ListQuery, held_text, is_job_id
from ..domain.parameters import ParameterError
from ..domain.phases import Phase
from ..domain.services import Service, collect
from . import creating
from .ports import Executor, Files, JobStore, Settings, Watch


@dataclasses.dataclass
class Control:
    """The UWS job-control values of a creation request (UWS 1.1 §2.1.11)."""
    run: bool = False
    run_id: str | None = None
    execution_duration: str | None = None
    destruction: str | None = None
    priority: str | None = None         # PRIORITY (our extension)
    start_after: str | None = None      # STARTAFTER (our extension)
    callback: str | None = None     # a URL to POST the job to when it ends (uws.usecases.callbacks)


class Jobs:
    """The use cases of UWS 1.1 §2.2 for one server: each method checks the
    service, the caller's access and the job's phase, and raises a
    :mod:`uws.domain.errors` exception (NotFound 404, Forbidden 403, BadRequest 400,
    TooLarge 413) that the web layer maps to its status."""

    def __init__(self, *, config: Settings, store: JobStore, files: Files, executor: Executor,
                 watch: Watch):
        self.config = config
        self.store = store
        self.files = files
        self.executor = executor
        self.watch = watch
        self.uploads = creating.Uploads(files)
        self._typical = estimates.TypicalRunTimes(store)

    # -- lookup -------------------------------------------------------------------

    def service(self, name: str) -> Service:
        """The service mounted at ``/name``.  Raises NotFound."""
        try:
            return self.config.services[name]
        except KeyError:
            raise NotFound(f"no service {name!r}") from None

    def get(self, service: str, job_id: str, caller: Caller = ANONYMOUS) -> Job:
        """The job, with a fresh quote while it is active.  Raises NotFound (no such
        service or job), Forbidden (another owner's job)."""
        self._could_exist(service, job_id)
        job = self.store.get_job(job_id, service, caller.scope)
        if job is None:
            self._missing(service, job_id)
        if job.phase in phases.ACTIVE:
            job.quote = self._quote(job)
        elif job.phase is Phase.HELD:
            kind, reason = self.store.held_because(job.id)
            cap = self.service(service).quota(job.owner).running
            job.held = held_text(kind, reason, cap)
        return job

    def _quote(self, job: Job):
        typical = self._typical.get(job.service)
        if typical is None and job.progress is None:
            return None     # nothing to estimate from: spare the queue query
        ahead = 0
        if job.phase is Phase.QUEUED and typical is not None:
            ahead = self.store.queue_position(job.id, job.service)
        return estimates.quote(job, timeutil.now(), typical, ahead, self.config.slots)

    def check_access(self, service: str, job_id: str, caller: Caller = ANONYMOUS) -> None:
        """404 for no such job, 403 for another owner's, before a request is read further."""
        self._phase(service, job_id, caller)

    def _phase(self, service: str, job_id: str, caller: Caller) -> Phase:
        """The job's phase, with the same 404/403 answers as get() but one small read."""
        self._could_exist(service, job_id)
        phase = self.store.phase_of(job_id, service, caller.scope)
        if phase is None:
            self._missing(service, job_id)
        return phase

    def _could_exist(self, service: str, job_id: str) -> None:
        """404, without a read, for a service not served here (its jobs may still be
        stored) or an id no job can have."""
        self.service(service)
        if not is_job_id(job_id):
            raise NotFound(f"no job {job_id!r} in {service!r}")

    def _missing(self, service: str, job_id: str) -> NoReturn:
        if self.store.owner_of(job_id, service) is None:
            raise NotFound(f"no job {job_id!r} in {service!r}")
        raise Forbidden(f"job {job_id} belongs to another owner")

    def list(self, service: str, q: ListQuery, caller: Caller = ANONYMOUS):
        """The caller's jobs (an administrator's: everyone's) matching ``q``, newest
        first; an iterator when unpaged.  Raises NotFound (no such service)."""
        self.service(service)
        if q.limit is None and not q.offset:
            return self.store.iter_jobs(service, caller.scope, q)
        return self.store.list_jobs(service, caller.scope, q)

    def count(self, service: str, q: ListQuery, caller: Caller = ANONYMOUS) -> int:
        """How many jobs :meth:`list` would give.  Raises NotFound."""
        self.service(service)
        return self.store.count_jobs(service, caller.scope, q)

    # -- creation -----------------------------------------------------------------

    def create(self, service_name: str, pairs, uploads: dict, control: Control,
               caller: Caller = ANONYMOUS) -> str:
        """A new PENDING job (QUEUED with ``control.run``); its id.  Raises NotFound
        (no such service), BadRequest (a parameter or control value), TooLarge (an
        upload past the limit), Forbidden (the owner's quota); nothing is kept then."""
        service = self.service(service_name)
        try:
            values = collect(service, pairs, uploads, creating=True)
        except ParameterError as exc:
            raise BadRequest(str(exc)) from None
        creating.checked_run_id(control.run_id)
        schedule = self.schedule(service.name, control.priority, control.start_after, caller)
        callback_url = None if control.callback is None else \
            creating.checked_callback(service, control.callback)
        quota = service.quota(caller.owner)
        if any(v.upload is not None for v in values):
            self.check_quota(service, caller.owner, quota)     # before writing them
        job = creating.new_job(service, caller.owner, timeutil.now(), run_id=control.run_id,
                               callback_url=callback_url, start_after=schedule.start_after)
        if schedule.priority is not None:
            job.priority = schedule.priority
        if control.execution_duration is not None:
            job.execution_duration = service.clamp_duration(
                parse_duration(control.execution_duration))
        if control.destruction is not None:
            job.destruction = self._granted_destruction(service, job, control.destruction)
        try:
            job.parameters, staged = self.uploads.stage(job.id, values)
        except BaseException:
            self.files.remove(job.id)
            raise
        self._keep(service, job, staged, quota, run=control.run)
        return job.id

    def repeat(self, service_name: str, job_id: str, caller: Caller = ANONYMOUS,
               run: bool = False) -> str:
        """ACTION=REPEAT: a new PENDING job of the caller's (QUEUED or HELD with
        ``run``) with the job's parameters, RUNID, PRIORITY, CALLBACK and uploads,
        copied; its id.  Raises NotFound, Forbidden (another owner's job, the caller's
        quota), TooLarge (an upload past today's limit), BadRequest (a callback the
        service no longer accepts)."""
        source = self.get(service_name, job_id, caller)
        service = self.service(service_name)
        try:
            priority = queueing.check_priority(source.priority, service.priority_min,
                                               service.priority_max, caller.admin)
        except BadRequest:      # set by an administrator, beyond what the caller may ask
            priority = service.priority_default
        callback_url = None if source.callback_url is None else \
            creating.checked_callback(service, source.callback_url)
        quota = service.quota(caller.owner)
        if any(p.is_upload for p in source.parameters):
            self.check_quota(service, caller.owner, quota)     # before copying them
        job = creating.new_job(service, caller.owner, timeutil.now(), run_id=source.run_id,
                               priority=priority, callback_url=callback_url,
                               execution_duration=service.clamp_duration(
                                   source.execution_duration),
                               parameters=list(source.parameters))
        staged: dict = {}
        try:
            for p in source.parameters:
                if p.is_upload:
                    staged[p.name] = self.files.stage_copy(source.id, job.id, p.name)
        except BaseException:
            self.files.remove(job.id)
            raise
        self._keep(service, job, staged, quota, run=run)
        return job.id

    def _keep(self, service: Service, job: Job, staged: dict, quota, run: bool) -> None:
        """Install a new job's staged uploads and store it, PHASE=RUN in the same
        transaction with ``run``; on failure nothing is kept."""
        try:
            stored = self.uploads.size(staged)
            self.uploads.install(job.id, staged)       # the job is not visible yet
            moved = self.store.insert_job(job, quota, stored, run=run)
        except OverQuota as exc:
            self.files.remove(job.id)
            raise creating.over_quota(service, exc) from None
        except BaseException:
            self.files.remove(job.id)
            raise
        if moved is Phase.QUEUED:
            self.executor.submit(job.id)

    def check_quota(self, service: Service, owner: str, quota, adding: int = 0,
                    new_jobs: int = 1) -> None:
        """403 early, before uploads are staged or copied, when the owner's
        ``new_jobs`` (a batch's, or one) would pass a limit; :meth:`Store.insert_job`
        (and the batch store) enforce them exactly."""
        if quota.jobs and (self.store.count_jobs(service.name, owner, ListQuery())
                           + new_jobs > quota.jobs):
            raise creating.over_quota(service, OverQuota("jobs", quota.jobs))
        if quota.bytes and self.store.stored_bytes(service.name, owner) + adding > quota.bytes:
            raise creating.over_quota(service, OverQuota("bytes", quota.bytes))

    # -- phase changes --------------------------------------------------------------

    def run(self, service: str, job_id: str, caller: Caller = ANONYMOUS) -> None:
        """PHASE=RUN: queue a PENDING job, or hold it HELD while an administrative
        hold applies to its owner (a no-op when it already runs or is held).
        Raises NotFound, Forbidden (another owner's job, or one that has finished)."""
        # The store finds the job by id, service and owner, so a move is this caller's
        # own; no move is answered below (404, 403 or a no-op) from a read after it.
        self._could_exist(service, job_id)
        owner = caller.owner if caller.scope is not None else self.store.owner_of(job_id, service)
        moved = self.store.run_job(job_id, service, owner) if owner is not None else None
        if moved is Phase.QUEUED:
            self.executor.submit(job_id)
        if moved is not None:
            return
        phase = self._phase(service, job_id, caller)
        if phase in (Phase.QUEUED, Phase.EXECUTING, Phase.SUSPENDED, Phase.HELD):
            return      # already running, or held: RUN again is a no-op
        raise Forbidden(f"cannot run a job that is {phase.value}")

    def abort(self, service: str, job_id: str, caller: Caller = ANONYMOUS) -> None:
        """PHASE=ABORT: end an unfinished job, killing its work (a no-op when it is
        ABORTED already).  Raises NotFound, Forbidden (another owner's job, or one
        that has finished otherwise)."""
        self._phase(service, job_id, caller)
        if self.store.mark_aborted(job_id, caller.scope):
            self.executor.abort(job_id)
            return
        phase = self._phase(service, job_id, caller)
        if phase is Phase.ABORTED:
            return      # aborting twice is harmless
        raise Forbidden(f"cannot abort a job that is already {phase.value}")

    def delete(self, service: str, job_id: str, caller: Caller = ANONYMOUS) -> None:
        """Forget the job.  Work still running is killed: here at once, and in any
        other process by its executor's monitor, which sees the job gone.  Raises
        NotFound, Forbidden (another owner's job)."""
        self._could_exist(service, job_id)
        if not self.store.delete_job(job_id, service, caller.scope):
            self._missing(service, job_id)
        self.forget(job_id)

    def forget(self, job_id: str) -> None:
        """What is left to do once a job's row is deleted: kill its work here (other
        processes' monitors see the row gone) and remove its files."""
        self.executor.abort(job_id)
        self.files.remove(job_id)

    # -- other job properties -------------------------------------------------------

    def set_execution_duration(self, service: str, job_id: str, text: str,
                               caller: Caller = ANONYMOUS) -> None:
        """Set the execution duration (clamped to the service's maximum) before the
        job starts.  Raises NotFound, BadRequest (not a number of seconds), Forbidden
        (another owner's job, or one that has started)."""
        self._phase(service, job_id, caller)
        seconds = self.service(service).clamp_duration(parse_duration(text))
        if not self.store.set_execution_duration(job_id, seconds):
            phase = self._phase(service, job_id, caller)
            raise Forbidden(f"cannot change the execution duration of a job that is {phase.value}")

    def set_destruction(self, service: str, job_id: str, text: str,
                        caller: Caller = ANONYMOUS) -> None:
        """Set the destruction time (no later than the service allows).  Raises
        NotFound, BadRequest (not an ISO 8601 time, or in the past), Forbidden
        (another owner's job, an archived one, or one whose destruction time has
        come: it is destroyed at the next sweep, whatever is asked now)."""
        job = self.get(service, job_id, caller)
        when = self._granted_destruction(self.service(service), job, text)
        if not self.store.set_destruction(job_id, when, timeutil.now()):
            if self.get(service, job_id, caller).phase is Phase.ARCHIVED:
                raise Forbidden("cannot change the destruction time of an archived job")
            raise Forbidden("the job's destruction time has come: it cannot be changed")

    def _granted_destruction(self, service: Service, job: Job, text: str):
        try:
            when = timeutil.parse_time(text)
        except ValueError as exc:
            raise BadRequest(f"DESTRUCTION: {exc}") from None
        if when <= timeutil.now():
            raise BadRequest("DESTRUCTION: must be in the future")
        if service.max_lifetime:
            when = min(when, timeutil.add_seconds(job.creation_time, service.max_lifetime))
        return when

    def check_callback(self, service: str, url: str) -> None:
        """BadRequest unless ``service`` accepts ``url`` as a CALLBACK."""
        creating.checked_callback(self.service(service), url)

    def set_callback(self, service: str, job_id: str, url: str,
                     caller: Caller = ANONYMOUS) -> None:
        """CALLBACK: the URL to POST the job to when it ends, while PENDING.  Raises
        NotFound, BadRequest (a URL the service refuses), Forbidden (another owner's
        job, or one no longer PENDING)."""
        self._phase(service, job_id, caller)
        checked = creating.checked_callback(self.service(service), url)
        if not self.store.set_callback(job_id, checked):
            phase = self._phase(service, job_id, caller)
            raise Forbidden(f"the callback cannot change once a job is {phase.value}")

    def update_parameters(self, service_name: str, job_id: str, pairs, uploads: dict,
                          caller: Caller = ANONYMOUS, run_id: str | None = None) -> None:
        """Replace (or, for multi-valued names, add) parameters while PENDING;
        RUNID may change with them (taplint does this).  Raises NotFound,
        BadRequest, TooLarge, Forbidden (another owner's job, one no longer
        PENDING, or an upload past the owner's bytes quota)."""
        service = self.service(service_name)
        phase = self._phase(service_name, job_id, caller)
        if phase is not Phase.PENDING:
            raise Forbidden(f"parameters cannot change once a job is {phase.value}")
        creating.checked_run_id(run_id)
        try:
            values = collect(service, pairs, uploads, creating=False)
        except ParameterError as exc:
            raise BadRequest(str(exc)) from None
        if not values and run_id is None:
            return
        try:
            params, staged = self.uploads.stage(job_id, values)
        except FileNotFoundError:   # the job's folder removed by a deletion meanwhile?
            self._unless_deleted_meanwhile(service_name, job_id, caller)
            raise
        replace = {v.name for v in values if not service.spec(v.name).multiple}
        try:
            if staged:
                self.check_quota(service, caller.owner, service.quota(caller.owner),
                                 adding=self.uploads.size(staged))
            # the files go in under the job's lock, with the change or not at all: a
            # RUN waits for them, and a refused change replaces no file
            changed = self.store.set_parameters(
                job_id, replace, params, run_id, then=lambda: self.uploads.install(job_id, staged))
        except BaseException as exc:
            self.uploads.discard(staged)
            if isinstance(exc, FileNotFoundError):
                self._unless_deleted_meanwhile(service_name, job_id, caller)
            raise
        if not changed:
            self.uploads.discard(staged)
            phase = self._unless_deleted_meanwhile(service_name, job_id, caller)
            raise Forbidden(f"parameters cannot change once a job is {phase.value}")
        if staged:
            self.store.set_stored_bytes(job_id, self.files.usage(job_id).total)

    def _unless_deleted_meanwhile(self, service: str, job_id: str, caller: Caller) -> Phase:
        """The job's phase; NotFound if a deletion took it during a change, its folder
        (which staging may have made again) removed."""
        try:
            return self._phase(service, job_id, caller)
        except NotFound:
            self.files.remove(job_id)
            raise

    # -- when and in which order the job starts ------------------------------------

    def schedule(self, service_name: str, priority: str | None, start_after: str | None,
                 caller: Caller = ANONYMOUS) -> queueing.Schedule:
        """PRIORITY and STARTAFTER texts checked for the caller, before anything
        changes.  Raises NotFound, BadRequest (not an integer, out of the service's
        bounds for an owner, not a time)."""
        service = self.service(service_name)
        level = None
        if priority is not None:
            level = queueing.check_priority(queueing.parse_priority(priority),
                                            service.priority_min, service.priority_max,
                                            caller.admin)
        when = None if start_after is None else queueing.parse_start_after(start_after)
        return queueing.Schedule(level, when)

    def priorities(self, service: str, job_ids, caller: Caller = ANONYMOUS) -> dict[str, int]:
        """The priorities of the caller's jobs among ``job_ids`` (a page of a list)."""
        return self.store.priorities_of(job_ids, service, caller.scope)

    def reschedule(self, service: str, job_id: str, schedule: queueing.Schedule,
                   caller: Caller = ANONYMOUS) -> None:
        """Apply a checked :meth:`schedule`: while PENDING, or for an administrator
        a priority also while QUEUED or HELD.  Raises NotFound, Forbidden."""
        self._phase(service, job_id, caller)
        if schedule.priority is not None:
            allowed = _ADMIN_PRIORITY_PHASES if caller.admin else {Phase.PENDING}
            if not self.store.set_priority(job_id, schedule.priority, allowed):
                phase = self._phase(service, job_id, caller)
                raise Forbidden(f"cannot change the priority of a job that is {phase.value}")
        if schedule.start_after is not None:
            if not self.store.set_start_after(job_id, schedule.start_after):
                phase = self._phase(service, job_id, caller)
                raise Forbidden(f"cannot change the start time of a job that is {phase.value}")

    # -- blocking GET -----------------------------------------------------------------

    def wait(self, service: str, job_id: str, seconds: int, phase: Phase | None,
             caller: Caller = ANONYMOUS) -> Job:
        """The job once it has left ``phase`` (by default its current active phase),
        or after ``seconds`` (capped by ``wait_max``); at once when it is finished.
        Raises NotFound, Forbidden."""
        since = self.watch.mark()       # a change after it but before wait() still counts
        job = self.get(service, job_id, caller)
        if not _waits_on(job, phase):
            return job
        deadline = time.monotonic() + self.wait_seconds(seconds)
        waited = job.phase
        while job.phase is waited and (left := deadline - time.monotonic()) > 0:
            # A notice need not be a phase change (PostgreSQL also delivers this
            # process's own notices, later): read again, and wait on if unchanged.
            woken = self.watch.wait(job_id, waited, left, since)
            since = self.watch.mark()
            job = self.get(service, job_id, caller)
            if not woken:       # timed out, or too many waiting: answer now
                break
        return job

    def wait_seconds(self, seconds: int) -> int:
        """How long a WAIT of ``seconds`` (-1: the longest) may last: up to ``wait_max``."""
        limit = self.config.wait_max
        return limit if seconds < 0 else min(seconds, limit)

    def watch_job(self, service: str, job_id: str, phase: Phase | None,
                  wake: Callable[[], None], caller: Caller = ANONYMOUS) -> tuple[Job, Any]:
        """:meth:`wait` holding no thread: the job, and a subscription
        (:meth:`PhaseWatch.subscribe`) that calls ``wake`` once the job leaves the phase
        waited for, or None when the job is the answer now.  The caller keeps the
        deadline, cancels the subscription at it, and calls this again once woken
        (a notice need not be a phase change).  Raises NotFound, Forbidden."""
        since = self.watch.mark()
        job = self.get(service, job_id, caller)
        if not _waits_on(job, phase):
            return job, None
        return job, self.watch.subscribe(job_id, job.phase, wake, since)


def _waits_on(job: Job, phase: Phase | None) -> bool:
    """Whether a WAIT (with PHASE=``phase``, or without: None) waits on ``job``: while it
    is active, and in the phase named."""
    return job.phase in phases.ACTIVE and (phase is None or job.phase is phase)


#: Where an administrator may still change a job's priority: before it starts.
_ADMIN_PRIORITY_PHASES = frozenset({Phase.PENDING, Phase.QUEUED, Phase.HELD})


#: The longest execution duration a job is given (what the store keeps: 68 years).
MAX_DURATION = 2**31 - 1


def parse_duration(text: str) -> int:
    """Execution duration in whole seconds (fractions round up); BadRequest otherwise."""
    try:
        value = numbers.decimal(text)
    except ValueError:
        raise BadRequest(f"EXECUTIONDURATION: not a number of seconds: {text!r}") from None
    if value < 0:
        raise BadRequest("EXECUTIONDURATION: must be a non-negative number of seconds")
    # the service clamps it to its maximum; beyond what the store keeps (68 years,
    # or 1e999 read as infinity) it is the longest there is
    return math.ceil(value) if value <= MAX_DURATION else MAX_DURATION
