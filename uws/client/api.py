"""``Client``: the UWS 1.1 operations on one job list, for any server."""
from __future__ import annotations

import datetime as dt
import hashlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import requests

from .batches import BatchOperations
from .documents import ErrorSummary, Job, JobRef, Parameter, Result, parse_job, parse_job_list
from .errors import ConnectionFailed, NotFound, ProtocolError, Timeout
from .events import EventOperations
from .http import Reply, Transport
from .urls import child_url, public_url, split_userinfo

Value = str | int | float | bool
Upload = str | Path | bytes | IO[bytes]
MAX_PAGES = 10_000      # of a job list: more is a server linking pages without end
# a result's file name, in bytes: file systems take 255, and "-2", "-3"... may follow
MAX_NAME_BYTES = 200
MAX_SUFFIX_BYTES = 16   # an extension kept when a name is shortened (".fits", ".vot.gz")


class Client(BatchOperations, EventOperations):
    """A UWS job list at ``url`` (e.g. ``https://host/tap/async``).

    Jobs are named by id or by absolute URL. Credentials: ``user``/``password`` (Basic),
    ``token`` (Bearer), ``user:password@`` in ``url``, or a ready ``requests`` session; they
    go to ``url``'s origin only. ``timeout`` bounds connecting and each answer.
    ``ca_bundle``: a file of the certificate authorities https servers are checked
    against, instead of requests' (``REQUESTS_CA_BUNDLE`` or certifi's).
    The URL is kept as given (a trailing slash, a query string): job ids and their
    resources go into its path, its query string goes with every request.
    Raises ValueError for a URL that is not http(s), or a timeout not above 0.

    This package's extensions, on its servers: batches (``create_batch``, ``batch``,
    ``batches``, ``run_batch``, ...: uws/client/batches.py) and job events (``events``,
    ``all_events``, ``follow_events``: uws/client/events.py).
    """

    def __init__(self, url: str, *, user: str | None = None, password: str | None = None,
                 token: str | None = None, session: requests.Session | None = None,
                 timeout: float = 30, ca_bundle: str | None = None):
        # userinfo is taken out here so that no URL the client builds or prints has it
        self.url, url_user, url_password = split_userinfo(url)
        if user is None and not token and url_user is not None:
            user, password = url_user, url_password
        self.http = Transport(self.url, session, user=user, password=password, token=token,
                              timeout=timeout, ca_bundle=ca_bundle)

    def job_url(self, job: str | Job | JobRef) -> str:
        if isinstance(job, Job | JobRef):
            return job.url
        return job if "://" in job else child_url(self.url, job)

    # -- reading ------------------------------------------------------------------------

    def jobs(self, phases: Iterable[str] = (), after: dt.datetime | str | None = None,
             last: int | None = None, page_size: int | None = None) -> Iterator[JobRef]:
        """The job list filtered as UWS 1.1 says (PHASE, AFTER, LAST), page after page when
        the server sends ``Link: rel="next"`` (``page_size``: this server's ``extend``),
        up to ``last`` jobs. More than MAX_PAGES pages raise ProtocolError."""
        params: list[tuple[str, str]] = [("PHASE", p.upper()) for p in phases]
        if after is not None:
            params.append(("AFTER", _time_text(after)))
        if last == 0:
            return
        params += _page_params(last, page_size)
        url = self.url
        seen: set[str] = set()
        count = 0
        for _ in range(MAX_PAGES):
            seen.add(url)
            reply = self.http.get(url, params=params if url == self.url else None)
            for ref in self._job_list(reply, first=url == self.url):
                if last is not None and count >= last:
                    return      # a server ignoring LAST, or paging on without end
                count += 1
                yield ref
            following = reply.link("next")
            if following is None or following in seen or (last is not None and count >= last):
                return
            url = following
        raise ProtocolError(f"{self.url}: more than {MAX_PAGES} pages of jobs")

    def _job_list(self, reply: Reply, first: bool) -> list[JobRef]:
        """The jobrefs of a page; the first page not being a job list is most often a
        URL that names something else (a server's root): say which URLs would do."""
        try:
            return parse_job_list(reply.body, reply.url, self.url)
        except ProtocolError as exc:
            if not first:
                raise
            raise ProtocolError(f"{self.url} is not a UWS job list ({exc}); use a job list's "
                                f"URL{_listed_urls(reply)}") from None

    def get(self, job: str | Job | JobRef, wait: int | None = None, phase: str | None = None) -> Job:
        """The job document; ``wait`` seconds of blocking (UWS 1.1 WAIT) while it stays in
        ``phase`` (or in any active phase)."""
        return self._get(self.job_url(job), wait, phase)

    def _get(self, url: str, wait: int | None = None, phase: str | None = None,
             within: float | None = None) -> Job:
        params = {}
        if wait is not None:
            params["WAIT"] = str(wait)
            if phase:
                params["PHASE"] = phase
        reply = self.http.get(url, params=params, block=max(wait or 0, 0), within=within)
        return parse_job(reply.body, url)

    def phase(self, job: str | Job | JobRef) -> str:
        return self.http.get(child_url(self.job_url(job), "phase")).text.strip().upper()

    def parameters(self, job: str | Job | JobRef) -> tuple[Parameter, ...]:
        return self.get(job).parameters

    def error(self, job: str | Job | JobRef) -> ErrorSummary | None:
        """The error summary (None unless the job ended in ERROR or was ABORTED with one)."""
        return self.get(job).error_summary

    def error_detail(self, job: str | Job | JobRef) -> str:
        """The text of ``{job}/error``: the detail behind the summary's message."""
        return self.http.get(child_url(self.job_url(job), "error")).text

    # -- changing -----------------------------------------------------------------------

    def create(self, parameters: Mapping[str, Value | list[Value]] | None = None, *,
               files: Mapping[str, Upload] | None = None, run: bool = False,
               run_id: str | None = None, execution_duration: int | None = None,
               destruction: dt.datetime | str | None = None) -> Job:
        """A new job (PENDING, or started with ``run``). ``files`` are uploads, each sent as
        the multipart part named for its parameter. ``run`` sends PHASE=RUN with the job,
        and again to ``{job}/phase`` when the server left the job PENDING (UWS 1.1 lets a
        server ignore PHASE at creation)."""
        data = _form(parameters or {})
        for name, value in (("RUNID", run_id), ("EXECUTIONDURATION", execution_duration),
                            ("DESTRUCTION", _time_text(destruction) if destruction else None)):
            if value is not None:
                data.append((name, str(value)))
        if run:
            data.append(("PHASE", "RUN"))
        with _Uploads(files or {}) as parts:
            reply = self.http.change("POST", self.url, data=data, files=parts or None)
        job = self._created(reply)
        return self.run(job) if run and job.phase == "PENDING" else job

    def _created(self, reply: Reply) -> Job:
        """The job a create POST made: at its Location, or (no Location) the job document
        the answer holds, at the URL its jobId has in this list."""
        if reply.location is not None:
            return self.get(reply.location)
        try:
            job_id = parse_job(reply.body, self.url).id
        except ProtocolError:
            raise ProtocolError(f"POST {self.url} gave neither a Location nor a job document") from None
        return parse_job(reply.body, self.job_url(job_id))

    def run(self, job: str | Job | JobRef) -> Job:
        return self._phase(job, "RUN")

    def abort(self, job: str | Job | JobRef) -> Job:
        return self._phase(job, "ABORT")

    def _phase(self, job, phase: str) -> Job:
        url = self.job_url(job)
        self.http.change("POST", child_url(url, "phase"), data={"PHASE": phase})
        return self.get(url)

    def delete(self, job: str | Job | JobRef) -> None:
        """Delete the job (DELETE; a 303, 200 or 204 answer is fine)."""
        self.http.change("DELETE", self.job_url(job))

    def set_parameters(self, job: str | Job | JobRef, parameters: Mapping[str, Value | list[Value]],
                       files: Mapping[str, Upload] | None = None) -> Job:
        """Change parameters of a PENDING job (``{job}/parameters``)."""
        url = self.job_url(job)
        with _Uploads(files or {}) as parts:
            self.http.change("POST", child_url(url, "parameters"), data=_form(parameters),
                             files=parts or None)
        return self.get(url)

    def set_execution_duration(self, job: str | Job | JobRef, seconds: int) -> Job:
        url = self.job_url(job)
        self.http.change("POST", child_url(url, "executionduration"),
                         data={"EXECUTIONDURATION": str(seconds)})
        return self.get(url)

    def set_destruction(self, job: str | Job | JobRef, when: dt.datetime | str) -> Job:
        url = self.job_url(job)
        self.http.change("POST", child_url(url, "destruction"), data={"DESTRUCTION": _time_text(when)})
        return self.get(url)

    # -- waiting ------------------------------------------------------------------------

    def wait(self, job: str | Job | JobRef, timeout: float | None = None, *,
             block: int = 30, on_update: Callable[[Job], None] | None = None,
             min_delay: float = 0.2, max_delay: float = 10.0) -> Job:
        """The job once in a final phase (COMPLETED, ERROR, ABORTED, ARCHIVED).

        UWS 1.1 servers block on WAIT (at most ``block`` seconds per request). A server that
        answers at once instead (UWS 1.0, or one ignoring WAIT) is polled with a delay
        growing from ``min_delay`` to ``max_delay``. Raises ``Timeout`` after ``timeout``
        seconds, ``on_update`` sees every job document fetched.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        current = self.get(job)
        delay = min_delay
        while True:
            if on_update:
                on_update(current)
            if current.is_final:
                return current
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise Timeout(f"job {current.id} still {current.phase} after {timeout:g} s",
                              current)
            asked = max(1, int(min(block, left if left is not None else block)))
            try:
                latest, blocked = self._next(current, asked, left)
            except ConnectionFailed:
                if deadline is not None and time.monotonic() >= deadline:
                    raise Timeout(f"job {current.id} still {current.phase} after {timeout:g} s",
                                  current) from None
                raise
            if latest.phase != current.phase:
                delay = min_delay
            elif not blocked and not latest.is_final:
                pause = delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic()))
                time.sleep(pause)
                delay = min(delay * 1.5, max_delay)
            current = latest

    def _next(self, current: Job, asked: int, left: float | None) -> tuple[Job, bool]:
        """The job again, with WAIT on UWS 1.1 servers; and whether the server blocked.
        A server may cut a WAIT short (ours at its wait_max), so only an answer well under
        half a second counts as not blocking: that server is then polled with a delay.
        The answer must come within ``left``, the wait's time left."""
        started = time.monotonic()
        if current.version == "1.1":
            latest = self._get(current.url, wait=asked, phase=current.phase, within=left)
        else:
            latest = self._get(current.url, within=left)
        return latest, time.monotonic() - started >= min(asked / 2, 0.5)

    # -- results ------------------------------------------------------------------------

    def results(self, job: str | Job | JobRef) -> tuple[Result, ...]:
        return self.get(job).results

    def download(self, result: Result, path: str | Path, resume: bool = False) -> Path:
        """Stream a result into ``path``; with ``resume``, a file holding the start of
        this very result (an earlier download that broke off) is completed with a Range
        request.  Nothing checks that it is the same result: only resume your own."""
        if result.href is None:
            raise ProtocolError(f"result {result.id} has no href")
        target = Path(path)
        self.http.download(result.href, target, resume)
        return target

    def download_all(self, job: str | Job | JobRef, directory: str | Path,
                     resume: bool = False) -> list[Path]:
        """Every result of the job into ``directory``, each as a file named for its id."""
        return self.save_results(self.results(job), directory, resume)

    def save_results(self, results: Iterable[Result], directory: str | Path,
                     resume: bool = False) -> list[Path]:
        """``results`` into ``directory``, in their order, each as a file of its own
        named for its id (see ``file_names``)."""
        found = list(results)
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        return [self.download(r, folder / name, resume) for r, name in zip(found, file_names(found))]

    def result(self, job: str | Job | JobRef, result_id: str) -> Result:
        for r in self.results(job):
            if r.id == result_id:
                return r
        raise NotFound(404, f"the job has no result {result_id!r}", self.job_url(job))


def _page_params(last: int | None, page_size: int | None) -> list[tuple[str, str]]:
    """LAST alone, as UWS 1.1 has it; with a page size, pages of that size (this
    package's ``extend``, which it refuses with LAST), at most ``last`` jobs in all: the
    client stops reading there, so a server that ignores ``extend`` still gives the
    ``last`` newest jobs."""
    if last is not None and page_size is not None:
        return [("extend", str(min(page_size, last)))]
    if last is not None:
        return [("LAST", str(last))]
    return [] if page_size is None else [("extend", str(page_size))]


def _listed_urls(reply: Reply, shown: int = 5) -> str:
    """", such as a service's: URL, URL" when a plain text answer lists http(s) URLs
    (this package's server root lists its services so), else a general hint."""
    found = []
    if reply.headers.get("Content-Type", "").startswith("text/plain"):
        for text in reply.text.splitlines():
            first = text.split("\t", 1)[0].strip()
            if first.startswith(("http://", "https://")) and " " not in first:
                found.append(public_url(first))
    if not found:
        return " (a service's URL, such as http://host:8700/sleep, or a TAP service's …/async)"
    more = ", …" if len(found) > shown else ""
    return ", such as a service's: " + ", ".join(found[:shown]) + more


def file_name(result: Result) -> str:
    """The result's id made a safe file name: letters, digits, ``-``, ``_`` and ``.``
    that the file system's encoding can write (anything else, a ``/`` or a control
    character, becomes ``_``), no leading dot (so no ``..``, no dot file), and at most
    MAX_NAME_BYTES bytes in that encoding: a longer one keeps its start and its
    extension around a hash of the whole id, which keeps shortened names apart."""
    name = "".join(c if _writable(c) else "_" for c in result.id).lstrip(".") or "result"
    if _size(name) <= MAX_NAME_BYTES:
        return name
    stem, dot, suffix = name.rpartition(".")
    if not dot or not stem or _size(suffix) > MAX_SUFFIX_BYTES:
        stem, dot, suffix = name, "", ""
    tag = "-" + hashlib.sha256(result.id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    room = MAX_NAME_BYTES - _size(tag + dot + suffix)
    kept = ""
    for c in stem:
        if _size(kept + c) > room:
            break
        kept += c
    return kept + tag + dot + suffix


def shortened(result: Result) -> bool:
    """Whether the result's file name (``file_name``) is short of its id's characters."""
    return _size("".join(c if _writable(c) else "_" for c in result.id)) > MAX_NAME_BYTES


def _writable(c: str) -> bool:
    if not (c.isalnum() or c in "-_."):
        return False
    try:
        c.encode(sys.getfilesystemencoding())
    except UnicodeEncodeError:
        return False
    return True


def _size(name: str) -> int:
    return len(name.encode(sys.getfilesystemencoding()))


def file_names(results: Iterable[Result]) -> list[str]:
    """A file name per result, none twice (ignoring case, for the file systems that
    do): ids that make the same name (``a/b`` and ``a_b``) get ``-2``, ``-3``… in order
    (``x.txt``, ``x-2.txt``)."""
    taken: set[str] = set()
    names = []
    for r in results:
        name, n = file_name(r), 1
        stem, dot, suffix = name.rpartition(".") if "." in name else (name, "", "")
        while (candidate := name if n == 1 else f"{stem}-{n}{dot}{suffix}").casefold() in taken:
            n += 1
        taken.add(candidate.casefold())
        names.append(candidate)
    return names


def _form(parameters: Mapping[str, Value | list[Value]]) -> list[tuple[str, str]]:
    data = []
    for name, value in parameters.items():
        for v in value if isinstance(value, list) else [value]:
            data.append((name, str(v).lower() if isinstance(v, bool) else str(v)))
    return data


def _time_text(value: dt.datetime | str) -> str:
    if isinstance(value, str):
        return value
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.isoformat(timespec="milliseconds") + "Z"


class _Uploads:
    """Upload parts for requests, opening (and then closing) the files named by path."""

    def __init__(self, files: Mapping[str, Upload]):
        self.files = files
        self.opened: list[IO[bytes]] = []

    def __enter__(self) -> dict:
        parts: dict[str, tuple[str, Any, str]] = {}
        for name, value in self.files.items():
            if isinstance(value, str | Path):
                handle = open(value, "rb")
                self.opened.append(handle)
                parts[name] = (Path(value).name, handle, "application/octet-stream")
            else:
                parts[name] = (name, value, "application/octet-stream")
        return parts

    def __exit__(self, *exc) -> None:
        for handle in self.opened:
            handle.close()
