"""The contract of a Python runner, for service authors.

A service's ``runner = "package.module:function"`` names a :data:`Runner`: it is
called in the job's own process as ``function(params, ctx)``, with ``params``
the job's parameters typed as the service declares them (int, float, bool,
datetime, str; a list for ``multiple``; for a ``file`` parameter the value as
given) and ``ctx`` a :class:`Context`.  Returning ends the job COMPLETED;
raising ends it in ERROR with the exception's text as the error summary, except
:class:`Retryable`, which runs the job again after a backoff while its service's
``max_attempts`` allow.

Type a runner against :class:`Context`, and test it without a server with
:class:`LocalContext`::

    from uws.runner import Context, LocalContext

    def cutout(params: dict, ctx: Context) -> None:
        ctx.progress(10, "reading")
        ...
        ctx.add_result("cutout", "cutout.bin", "application/octet-stream")

    def test_cutout(tmp_path):
        ctx = LocalContext(tmp_path, uploads={"IMAGE": tmp_path / "in.bin"})
        cutout({"SIZE": 4}, ctx)
        assert ctx.results == [("cutout", "cutout.bin", "application/octet-stream")]

This module imports little beyond the standard library, so a job starts fast.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol


class Context(Protocol):
    """What a runner receives besides its parameters."""

    #: the job's id
    job_id: str
    #: the job's working directory (also the current directory); result files go here
    workdir: Path

    def progress(self, percent: float, message: str = "") -> None:
        """Report percent complete (0..100) and a short message (shown in jobInfo)."""

    def add_result(self, name: str, filename: str | None = None, mime_type: str = "") -> None:
        """Declare the file ``filename`` (default: ``name``) of :attr:`workdir` as the
        result ``name``.  ValueError for a name with spaces, slashes or control
        characters, or a MIME type that is not ``type/subtype[; parameters]``."""

    def upload_path(self, name: str) -> Path:
        """Where the uploaded file of the file parameter ``name`` is."""

    def open_parameter(self, name: str) -> IO[bytes]:
        """The file parameter ``name`` opened for reading: its upload, or its URL's
        content fetched safely (see :meth:`fetch`)."""

    def fetch(self, url: str, filename: str | None = None) -> Path:
        """Download an http(s) URL into the job's directory and return the path.
        Internal addresses are refused unless the service lists the host in
        ``fetch_hosts``; the size is capped; ``uws.execution.fetch.FetchError``
        says why a fetch failed."""


class Retryable(Exception):
    """Raise it for a transient failure (a service briefly unavailable): the job
    is queued again, keeping its id, after the service's ``retry_backoff``, until
    its ``max_attempts`` are used up; then it ends in ERROR with this text."""


#: ``function(params, ctx)``, as named by a service's ``runner``
Runner = Callable[[dict[str, Any], Context], None]


def check_result(name: str, filename: str, mime_type: str) -> None:
    """ValueError for a result the job could not show (see :meth:`Context.add_result`)."""
    from .domain.model import valid_mime_type, valid_result_id
    if not valid_result_id(name):
        raise ValueError(f"result name {name!r}: no spaces, slashes or control characters")
    if any(c.isspace() for c in filename):
        raise ValueError(f"result file {filename!r}: no spaces")
    if mime_type and not valid_mime_type(mime_type):
        raise ValueError(f"result MIME type {mime_type!r}: not type/subtype[; parameters]")


class LocalContext:
    """A :class:`Context` for testing a runner outside the server: it records the
    progress and results reported, and reads uploads from the paths given."""

    def __init__(self, workdir: Path, uploads: dict[str, Path] | None = None,
                 job_id: str = "0" * 32):
        self.job_id = job_id
        self.workdir = Path(workdir)
        self.uploads = dict(uploads or {})
        self.reported: list[tuple[float, str]] = []
        self.results: list[tuple[str, str, str]] = []

    def progress(self, percent: float, message: str = "") -> None:
        self.reported.append((float(percent), message))

    def add_result(self, name: str, filename: str | None = None, mime_type: str = "") -> None:
        filename = filename or name
        check_result(name, filename, mime_type)
        self.results.append((name, filename, mime_type))

    def upload_path(self, name: str) -> Path:
        return self.uploads[name]

    def open_parameter(self, name: str) -> IO[bytes]:
        return open(self.uploads[name], "rb")

    def fetch(self, url: str, filename: str | None = None) -> Path:
        raise NotImplementedError("LocalContext does not fetch URLs; pass the file as an "
                                  "upload instead")
