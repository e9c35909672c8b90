"""The child side of one job: ``python -m uws.execution.child`` reads its task
as JSON on stdin and runs it in its own process group and working directory.

It talks back over the file descriptor named in ``UWS_REPORT_FD`` with one
line per message (the same convention a command runner uses):

    progress <percent> [message]        percent complete, 0..100
    result <name> <file> [mime-type]    a file in the working directory is a result
    error <message>                     the error summary, before a non-zero exit

Kept free of Flask and SQLAlchemy so a child starts in a few milliseconds.
"""
from __future__ import annotations

import ctypes
import importlib
import json
import os
import signal
import sys
import traceback

REPORT_FD_ENV = "UWS_REPORT_FD"
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (no orphans after a
    server is killed); survives exec, so a command runner inherits it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class Reporter:
    def __init__(self, fd: int):
        self._out = os.fdopen(fd, "w", buffering=1, encoding="utf-8", errors="replace")

    def send(self, *words) -> None:
        line = " ".join(str(w) for w in words)
        self._out.write(line.replace("\n", " ").replace("\r", " ") + "\n")


class ChildContext:
    """What a Python runner receives besides its parameters."""

    def __init__(self, task: dict, reporter: Reporter):
        from pathlib import Path
        self.job_id = task["job_id"]
        self.workdir = Path(task["workdir"])
        self._uploads = Path(task["uploads"])
        self._reporter = reporter

    def progress(self, percent, message: str = "") -> None:
        """Report percent complete (0..100) and a short message."""
        self._reporter.send("progress", float(percent), message or "")

    def add_result(self, name: str, filename: str | None = None, mime_type: str = "") -> None:
        """Declare a file written in :attr:`workdir` as the result ``name``.

        ValueError at once, in the runner, for what the job could not show: a name
        with spaces, slashes or control characters, a file name with spaces, or a
        MIME type that is not ``type/subtype[; parameters]``."""
        from ..model import valid_mime_type, valid_result_id
        filename = filename or name
        if not valid_result_id(name):
            raise ValueError(f"result name {name!r}: no spaces, slashes or control characters")
        if any(c.isspace() for c in filename):
            raise ValueError(f"result file {filename!r}: no spaces")
        if mime_type and not valid_mime_type(mime_type):
            raise ValueError(f"result MIME type {mime_type!r}: not type/subtype[; parameters]")
        self._reporter.send("result", name, filename, mime_type or "")

    def upload_path(self, name: str):
        """Where the uploaded file of parameter ``name`` is."""
        return self._uploads / name


def typed_parameters(task: dict) -> dict:
    from ..services import ParamSpec, Service, typed_values
    from ..model import Parameter
    specs = tuple(ParamSpec(**{**s, "choices": tuple(s["choices"])}) for s in task["specs"])
    service = Service(name=task["service"], parameters=specs)
    params = [Parameter(n, v, b) for n, v, b in task["parameters"]]
    return typed_values(service, params)


def run_callable(task: dict, reporter: Reporter) -> int:
    module, _, name = task["runner"].partition(":")
    try:
        function = getattr(importlib.import_module(module), name)
        function(typed_parameters(task), ChildContext(task, reporter))
    except BaseException as exc:   # the job fails; the parent records why
        reporter.send("error", str(exc) or type(exc).__name__)   # the traceback goes to /error
        traceback.print_exc()
        return 1
    return 0


def main() -> int:
    die_with_parent()
    task = json.loads(sys.stdin.read())
    fd = int(os.environ[REPORT_FD_ENV])
    os.chdir(task["workdir"])
    if task.get("command"):
        # Become the command: same pid and process group, report fd inherited.
        os.execvp(task["command"][0], task["command"])
    return run_callable(task, Reporter(fd))


if __name__ == "__main__":
    sys.exit(main())
