"""Batches (this package's extension, README "Batches"): many jobs made by one request.

Read as JSON (``Accept: application/json``); each job of a batch is an ordinary job of
the list, so every other operation of the client applies to it.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import jsonfields as f
from .errors import ProtocolError
from .http import Reply, Transport
from .urls import child_url, resolved

JSON = {"Accept": "application/json"}
BODY_TYPES = {".csv": "text/csv", ".json": "application/json"}
#: the statuses a batch stays in once every job has ended
FINAL_STATUSES = frozenset({"completed", "failed", "partially failed", "aborted"})
MAX_PAGES = 10_000
PAGE = 1000             # the server's largest page


@dataclasses.dataclass(frozen=True)
class BatchJob:
    id: str
    url: str
    phase: str
    run_id: str | None = None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class Batch:
    id: str
    url: str
    status: str                 # pending, processing, completed, failed, partially failed, aborted
    percent_complete: float
    job_count: int
    phases: Mapping[str, int]
    run_id: str | None = None
    owner_id: str | None = None
    creation_time: dt.datetime | None = None
    jobs: tuple[BatchJob, ...] = ()     # all of them, or none when read for its progress
    callback: Mapping[str, Any] | None = None

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES


@dataclasses.dataclass(frozen=True)
class BatchRef:
    id: str
    url: str
    job_count: int
    run_id: str | None = None
    owner_id: str | None = None
    creation_time: dt.datetime | None = None


BatchName = str | Batch | BatchRef
Rows = Sequence[Mapping[str, Any]]


class BatchOperations:
    """The batch operations of a Client (its job list at ``url``, its ``http``)."""

    url: str
    http: Transport

    def batch_url(self, batch: BatchName) -> str:
        if isinstance(batch, Batch | BatchRef):
            return batch.url
        return batch if "://" in batch else child_url(self.url, "batches", batch)

    def create_batch(self, jobs: str | Path | Rows, *, run: bool = False, run_id: str | None = None,
                     callback: str | None = None) -> Batch:
        """A batch of one job per row: ``jobs`` is a CSV or JSON file (by its suffix,
        ``.csv`` or ``.json``) or a list of parameter mappings. ``run`` queues every job."""
        params = [(name, value) for name, value in (("PHASE", "RUN" if run else None),
                                                   ("RUNID", run_id), ("CALLBACK", callback))
                  if value is not None]
        url = child_url(self.url, "batches")
        if isinstance(jobs, str | Path):
            path = Path(jobs)
            kind = BODY_TYPES.get(path.suffix.lower())
            if kind is None:
                raise ValueError(f"{path}: a batch file is .csv or .json")
            with open(path, "rb") as body:
                reply = self.http.change("POST", url, params=params, data=body,
                                         headers={"Content-Type": kind})
        else:
            reply = self.http.change("POST", url, params=params, data=json.dumps(list(jobs)),
                                     headers={"Content-Type": "application/json"})
        return self.batch(_location(reply, url))

    def batch(self, batch: BatchName, all_jobs: bool = True) -> Batch:
        """The batch, with every job (pages followed) or, without ``all_jobs``, only its
        progress (one job's page, dropped)."""
        url = self.batch_url(batch)
        reply = self.http.get(url, params={"limit": str(PAGE if all_jobs else 1)}, headers=JSON)
        found = parse_batch(reply)
        if not all_jobs:
            return dataclasses.replace(found, jobs=())
        jobs = list(found.jobs)
        for page in _following(self.http, reply):
            jobs += parse_batch(page).jobs
        return dataclasses.replace(found, jobs=tuple(jobs))

    def batches(self) -> Iterator[BatchRef]:
        """The caller's batches, newest first, every page."""
        reply = self.http.get(child_url(self.url, "batches"), params={"limit": str(PAGE)},
                              headers=JSON)
        yield from parse_batch_list(reply)
        for page in _following(self.http, reply):
            yield from parse_batch_list(page)

    def run_batch(self, batch: BatchName) -> Batch:
        return self._control(batch, {"PHASE": "RUN"})

    def abort_batch(self, batch: BatchName) -> Batch:
        return self._control(batch, {"PHASE": "ABORT"})

    def repeat_batch(self, batch: BatchName) -> Batch:
        """A new batch of copies of the ERROR and ABORTED jobs (the server answers 403,
        Forbidden, when there is none)."""
        return self._control(batch, {"ACTION": "REPEAT"})

    def delete_batch(self, batch: BatchName) -> None:
        """Delete the batch and all its jobs."""
        self.http.change("DELETE", self.batch_url(batch))

    def _control(self, batch: BatchName, form: dict[str, str]) -> Batch:
        url = self.batch_url(batch)
        return self.batch(_location(self.http.change("POST", url, data=form), url))


def _location(reply: Reply, url: str) -> str:
    if reply.location is None:
        raise ProtocolError(f"POST {url} did not name the batch (no Location): a server "
                            "without this package's batches?")
    return reply.location


def _following(http: Transport, reply: Reply) -> Iterator[Reply]:
    seen = {reply.url}
    for _ in range(MAX_PAGES):
        following = reply.link("next")
        if following is None or following in seen:
            return
        seen.add(following)
        reply = http.get(following, headers=JSON)
        yield reply
    raise ProtocolError(f"{reply.url}: more than {MAX_PAGES} pages")


def parse_batch(reply: Reply) -> Batch:
    where = reply.url
    data = f.document(reply.body, f"{where} (a batch)")
    phases = f.mapping(data, "phases", where) or {}
    counts: dict[str, int] = {}
    for phase in phases:
        counts[str(phase)] = f.integer(phases, phase, f"{where}: phases") or 0
    page = f.mapping(data, "jobs", where) or {}
    jobs = tuple(BatchJob(id=f.text(j, "jobId", where) or "",
                          url=resolved(where, f.text(j, "href", where) or ""),
                          phase=(f.text(j, "phase", where) or "").upper(),
                          run_id=f.text(j, "runId", where, optional=True),
                          error=f.text(j, "error", where, optional=True))
                 for j in f.items(page, "items", f"{where}: jobs"))
    batch_id = f.text(data, "batchId", where) or ""
    return Batch(id=batch_id, url=resolved(where, f.text(data, "href", where) or where),
                 status=f.text(data, "status", where) or "",
                 percent_complete=f.number(data, "percentComplete", where) or 0.0,
                 job_count=f.integer(data, "jobCount", where) or 0, phases=counts,
                 run_id=f.text(data, "runId", where, optional=True),
                 owner_id=f.text(data, "ownerId", where, optional=True),
                 creation_time=f.time(data, "creationTime"), jobs=jobs,
                 callback=f.mapping(data, "callback", where, optional=True))


def parse_batch_list(reply: Reply) -> list[BatchRef]:
    where = reply.url
    data = f.document(reply.body, f"{where} (a list of batches)")
    return [BatchRef(id=f.text(b, "batchId", where) or "",
                     url=resolved(where, f.text(b, "href", where) or ""),
                     job_count=f.integer(b, "jobCount", where) or 0,
                     run_id=f.text(b, "runId", where, optional=True),
                     owner_id=f.text(b, "ownerId", where, optional=True),
                     creation_time=f.time(b, "creationTime"))
            for b in f.items(data, "batches", where)]
