"""The child side of one job: ``python -m uws.execution.child`` reads its task
as JSON on stdin and runs it in its own process group and working directory.

It talks back over the file descriptor named in ``UWS_REPORT_FD`` with one
line per message (the same convention a command runner uses):

    progress <percent> [message]        percent complete, 0..100
    result <name> <file> [mime-type]    a file in the working directory is a result
    error <message>                     the error summary, before a non-zero exit
    retry <message>                     the same, for a transient failure (Retryable)

Kept free of Flask and SQLAlchemy so a child starts in a few milliseconds.
"""
from __future__ import annotations

import importlib
import json
import os
import resource
import signal
import sys
import threading
import traceback

from ..domain.model import is_upload_value
from ..runner import Retryable
from .supervisor import PR_SET_PDEATHSIG, prctl, supervise

REPORT_FD_ENV = "UWS_REPORT_FD"


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (no orphans
    after a server is killed); survives exec, so a command runner inherits it."""
    prctl(PR_SET_PDEATHSIG, sig)


class Reporter:
    """Writes whole lines straight to the descriptor: a text file object over it would
    cost each job ~0.3 ms to set up (the io and codecs code it runs for the first time
    in a freshly forked process)."""

    def __init__(self, fd: int):
        self._fd = fd
        # a runner may report from several threads: one line at a time (a pipe takes
        # only writes up to PIPE_BUF whole)
        self._lock = threading.Lock()

    def send(self, *words) -> None:
        line = " ".join(str(w) for w in words)
        data = (line.replace("\n", " ").replace("\r", " ") + "\n").encode("utf-8", "replace")
        with self._lock:
            while data:
                data = data[os.write(self._fd, data):]


class ChildContext:
    """What a Python runner receives besides its parameters: the server's
    :class:`uws.runner.Context` (documented there)."""

    def __init__(self, task: dict, reporter: Reporter):
        from pathlib import Path
        self.job_id = task["job_id"]
        self.workdir = Path(task["workdir"])
        self._uploads = Path(task["uploads"])
        self._fetched = Path(task.get("fetched") or self.workdir.parent / "fetched")
        self._fetch = task.get("fetch") or {}
        self._values = {n: (v, b) for n, v, b in task.get("parameters", ())}
        self._reporter = reporter

    def progress(self, percent, message: str = "") -> None:
        """Report percent complete (0..100) and a short message."""
        self._reporter.send("progress", float(percent), message or "")

    def add_result(self, name: str, filename: str | None = None, mime_type: str = "") -> None:
        """Declare a file written in :attr:`workdir` as the result ``name``.

        ValueError at once, in the runner, for what the job could not show: a name
        with spaces, slashes or control characters, a file name with spaces, or a
        MIME type that is not ``type/subtype[; parameters]``."""
        from ..runner import check_result
        filename = filename or name
        check_result(name, filename, mime_type)
        self._reporter.send("result", name, filename, mime_type or "")

    def upload_path(self, name: str):
        """Where the uploaded file of parameter ``name`` is."""
        return self._uploads / name

    def open_parameter(self, name: str):
        """The file parameter ``name`` opened for reading (binary): its upload, or
        the content of its URL fetched with :meth:`fetch`."""
        value, by_reference = self._values.get(name, ("", False))
        if not by_reference:
            raise ValueError(f"{name} is not a file parameter with a value")
        if is_upload_value(value):
            return open(self.upload_path(name), "rb")
        return open(self.fetch(value, name), "rb")

    def fetch(self, url: str, filename: str | None = None):
        """Download ``url`` into the job's directory (``filename`` there, by default
        a fresh name) and return its path.  Only http(s); internal addresses are
        refused unless the service allow-lists the host (``fetch_hosts``); the size
        is capped; :class:`~uws.execution.fetch.FetchError` says why it failed."""
        import uuid

        from .fetch import fetch
        name = filename or f"url-{uuid.uuid4().hex[:12]}"
        if "/" in name or name.startswith("."):
            raise ValueError(f"fetch: {name!r} is not a plain file name")
        self._fetched.mkdir(mode=0o700, exist_ok=True)
        dest = self._fetched / name
        fetch(url, dest, allow_hosts=self._fetch.get("hosts", ()),
              max_bytes=self._fetch.get("max_bytes") or 100 * 1024 * 1024)
        return dest


def typed_parameters(task: dict) -> dict:
    from ..domain.model import Parameter
    from ..domain.parameters import ParamSpec, typed_values
    specs = [ParamSpec(**{**s, "choices": tuple(s["choices"])}) for s in task["specs"]]
    params = [Parameter(n, v, b) for n, v, b in task["parameters"]]
    return typed_values(specs, params)


def run_callable(task: dict, reporter: Reporter) -> int:
    module, _, name = task["runner"].partition(":")
    try:
        function = getattr(importlib.import_module(module), name)
        function(typed_parameters(task), ChildContext(task, reporter))
    except SystemExit as exc:
        if exc.code in (None, 0):   # sys.exit() or sys.exit(0): a normal end, as a return
            return 0
        reporter.send("error", f"the runner exited with status {exc.code}")
        return 1
    except BaseException as exc:   # the job fails; the parent records why
        word = "retry" if isinstance(exc, Retryable) else "error"
        reporter.send(word, str(exc) or type(exc).__name__)   # the traceback goes to /error
        traceback.print_exc()
        return 1
    return 0


def fetch_inputs(task: dict, reporter: Reporter) -> bool:
    """A command's URL file parameters, fetched to the local paths its command line
    names before it starts; False (the error reported) if one cannot be."""
    from pathlib import Path

    from .fetch import FetchError, fetch
    settings = task.get("fetch") or {}
    for name, url, path in task.get("downloads", ()):
        Path(path).parent.mkdir(mode=0o700, exist_ok=True)
        try:
            fetch(url, path, allow_hosts=settings.get("hosts", ()),
                  max_bytes=settings.get("max_bytes") or 100 * 1024 * 1024)
        except FetchError as exc:
            reporter.send("error", f"{name}: {exc}")
            return False
    return True


def run_task(task: dict, fd: int) -> int:
    reporter = Reporter(fd)
    if task.get("command"):
        if not fetch_inputs(task, reporter):
            return 1
        # Become the command: the report fd is inherited, nothing else of ours.
        os.execvp(task["command"][0], task["command"])
    return run_callable(task, reporter)


def _read_all(fd: int) -> bytes:
    """All of ``fd`` up to its end, read without a file object (less code run for
    the first time in a freshly forked job)."""
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def main() -> int:
    os.umask(0o077)     # what a job writes is private to the server's user
    die_with_parent(signal.SIGTERM)     # the supervisor cleans up, then dies
    task = json.loads(_read_all(sys.stdin.fileno()))
    fd = int(os.environ[REPORT_FD_ENV])
    os.chdir(task["workdir"])
    if task.get("max_file_bytes"):
        limit = task["max_file_bytes"]
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return supervise(lambda: run_task(task, fd), fd)


if __name__ == "__main__":
    sys.exit(main())
