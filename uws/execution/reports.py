"""The parent side of the report channel: turns a child's report lines into
progress and results in the store (see uws.execution.child for the format)."""
from __future__ import annotations

import logging
import mimetypes
import os
import select
import time
from collections.abc import Callable

from ..domain import timing
from ..domain.errors import NotFound
from ..domain.model import Claim, Result, valid_mime_type, valid_result_id
from ..domain.services import Service
from ..usecases.ports import Files, RunStore

log = logging.getLogger(__name__)
MAX_LINE = 4096


class ReportReader:
    def __init__(self, job_id: str, *, store: RunStore, files: Files, service: Service,
                 claim: Claim | None = None):
        self.job_id = job_id
        self.claim = claim      # the attempt's, which the store fences its writes by
        self.store = store
        self.files = files
        self.service = service
        self.error: str | None = None
        self.transient = False      # the runner raised uws.runner.Retryable
        self._last_write = 0.0
        self._pending: tuple[float, str] | None = None
        # Results are held back as progress is: the job's end records them with its
        # phase (one commit, not one more per result); one held PROGRESS_WRITE, or
        # until the channel goes quiet, is recorded on its own while the job runs.
        self._results: list[Result] = []
        self._results_since = 0.0
        self._names: set[str] = set()      # of the results reported, for max_results
        self.too_many: str | None = None    # why the job fails if it reported too many

    def follow(self, fd: int, running: Callable[[], bool]) -> bool:
        """Read report lines while the child runs, then what it left in the channel.

        The child's exit ends the reading, not the end of the channel: descendants
        that inherited it (``cmd &``) may hold it open long after.  False when the
        channel was seen to close, True when some descendant may still hold it.
        A report held back by the throttle is written when the
        channel goes quiet, so the latest progress never waits for the next line.
        """
        os.set_blocking(fd, False)
        lines = _LineBuffer(self.handle)
        poller = select.poll()      # not select(): a busy server's descriptors pass 1023
        poller.register(fd, select.POLLIN)
        try:
            while True:
                ready = poller.poll(timing.PROGRESS_WRITE * 1000)
                if ready and not lines.feed(_read(fd)):
                    return False                # every writer closed it
                if not ready:
                    self._flush_progress()
                    self.flush_results()
                if not running():
                    return lines.feed(_read(fd))   # what the child wrote before exiting
        finally:
            os.close(fd)
            lines.close()
            self._flush_progress()

    def handle(self, line: str) -> None:
        word, _, rest = line.partition(" ")
        if word == "progress":
            self._progress(rest)
        elif word == "result":
            parts = rest.split(maxsplit=2)      # the MIME type may hold spaces
            if len(parts) >= 2:
                self.add_result(parts[0], parts[1], parts[2] if len(parts) > 2 else "")
        elif word in ("error", "retry"):
            self.error = rest[:2000] or self.error
            self.transient = word == "retry"
        if self._results and time.monotonic() - self._results_since >= timing.PROGRESS_WRITE:
            self.flush_results()    # held long enough, whatever the job says meanwhile

    def _progress(self, rest: str) -> None:
        number, _, message = rest.partition(" ")
        try:
            percent = max(0.0, min(100.0, float(number)))
        except ValueError:
            return
        self._pending = (percent, message[:500])
        if time.monotonic() - self._last_write >= timing.PROGRESS_WRITE:
            self._flush_progress()

    def _flush_progress(self) -> None:
        if self._pending is not None:
            self.store.set_progress(self.job_id, *self._pending, claim=self.claim)
            self._pending = None
            self._last_write = time.monotonic()

    def add_result(self, name: str, filename: str, mime_type: str = "") -> bool:
        """Record a result; False (logged) for one that cannot be shown or has no file."""
        if not valid_result_id(name):
            log.warning("job %s: result name %r cannot be shown; ignored", self.job_id, name)
            return False
        if mime_type and not valid_mime_type(mime_type):
            log.warning("job %s: result %r: MIME type %r ignored", self.job_id, name, mime_type)
            mime_type = ""
        try:
            opened, info = self.files.open_result(self.job_id, filename)
        except NotFound:
            log.warning("job %s: result %r is not a regular file of its own inside its "
                        "directory (missing, a link, or outside); ignored", self.job_id, filename)
            return False
        opened.close()
        if name not in self._names and len(self._names) >= self.service.max_results:
            if self.too_many is None:
                log.warning("job %s: more than %d results; the rest ignored", self.job_id,
                            self.service.max_results)
                self.too_many = (f"the job reported more than {self.service.max_results} "
                                 "results (max_results)")
            return False
        self._names.add(name)
        mime = mime_type or guessed_type(filename)
        if not self._results:
            self._results_since = time.monotonic()
        self._results.append(Result(name, filename, mime, info.st_size))
        return True

    def held_results(self) -> list[Result]:
        """The results reported and not yet recorded, in order."""
        return list(self._results)

    def results_recorded(self) -> None:
        """The held results were recorded (with the job's end): hold them no more."""
        self._results.clear()

    def flush_results(self) -> None:
        """Record the held results now, each as it would have been when reported."""
        while self._results:
            self.store.add_result(self.job_id, self._results[0], claim=self.claim)
            self._results.pop(0)    # once recorded: a failed write leaves it held

    def collect_outputs(self) -> list[str]:
        """A command's declared output files become results; the files of those
        not marked optional that it did not write."""
        return [out.file for out in self.service.outputs
                if not self.add_result(out.name, out.file, out.mime_type) and not out.optional]


#: Types a result's file name may give it.  Others, and every type a browser could
#: run script in (HTML, SVG, XML, JavaScript), are served as application/octet-stream
#: unless the job declared them.
SAFE_GUESSES = frozenset({
    "text/plain", "text/csv", "text/tab-separated-values", "application/json",
    "application/pdf", "application/zip", "application/gzip", "application/x-tar",
    "application/fits", "image/fits", "image/png", "image/jpeg", "image/gif", "image/webp",
    "image/tiff", "audio/mpeg", "audio/wav", "audio/x-wav", "video/mp4",
})


def guessed_type(filename: str) -> str:
    guess, encoding = mimetypes.guess_type(filename, strict=False)
    if encoding is None and guess in SAFE_GUESSES:
        return guess
    return "application/octet-stream"


def _read(fd: int) -> bytes | None:
    """All that is waiting in the channel: b"" at its end, None if nothing is."""
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return b"".join(chunks) if chunks else None
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        if len(chunks) >= 16:       # bounded: 1 MiB at a time
            return b"".join(chunks)


class _LineBuffer:
    """Splits the byte stream into lines of at most MAX_LINE bytes (a child writing
    an endless line cannot grow our memory)."""

    def __init__(self, handle: Callable[[str], None]):
        self._handle = handle
        self._partial = b""

    def feed(self, data: bytes | None) -> bool:
        """Handle the complete lines in ``data``; False at the end of the channel."""
        if data is None:
            return True
        if not data:
            return False
        *complete, self._partial = (self._partial + data).split(b"\n")
        for raw in complete:
            self._emit(raw)
        if len(self._partial) > MAX_LINE:
            self._emit(self._partial)
            self._partial = b""
        return True

    def close(self) -> None:
        if self._partial:
            self._emit(self._partial)
            self._partial = b""

    def _emit(self, raw: bytes) -> None:
        self._handle(raw[:MAX_LINE].decode("utf-8", errors="replace").strip())
