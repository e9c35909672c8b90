"""What a job's child process receives: its environment (nothing of the server's
but what the runner contract documents) and its task, as JSON on stdin."""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
from pathlib import Path

from .child import REPORT_FD_ENV

#: The whole environment of a job (README, "Execution"): nothing else of the server's.
PASSED_ON = ("PATH", "LANG", "LC_ALL", "PYTHONPATH")


def job_environment(job_id: str, report_fd: int, tmp) -> dict[str, str]:
    env = {name: os.environ[name] for name in PASSED_ON if os.environ.get(name)}
    env.pop("PYTHONPATH", None)
    if path := _python_path():
        env["PYTHONPATH"] = path
    env.setdefault("PATH", os.defpath)
    env.setdefault("LANG", "C.UTF-8")
    env.update(HOME=str(tmp), TMPDIR=str(tmp), UWS_JOB_ID=job_id,
               **{REPORT_FD_ENV: str(report_fd)})
    return env


_resolved: dict[tuple, str] = {}     # (sys.path, cwd) -> _python_path(): one per job otherwise


def _python_path() -> str:
    """The server's module search path beyond the interpreter's own, made absolute:
    a job imports what the server imported (its runner was checked at start), from
    wherever the server was started, though it runs in its own directory."""
    key = (tuple(sys.path), os.getcwd())
    found = _resolved.get(key)
    if found is None:
        if len(_resolved) > 100:
            _resolved.clear()
        found = _resolved[key] = _resolve_python_path()
    return found


def _resolve_python_path() -> str:
    own = [Path(prefix).resolve() for prefix in {sys.prefix, sys.base_prefix}]
    entries = (Path(entry or os.curdir).resolve() for entry in sys.path)
    extra = [str(e) for e in entries if not any(e.is_relative_to(p) for p in own)]
    return os.pathsep.join(dict.fromkeys(extra))


def task_of(job, service, files, max_bytes: int) -> dict:
    params = [(p.name, p.value, p.by_reference) for p in job.parameters]
    fetched = files.job_dir(job.id) / "fetched"
    task = {"job_id": job.id, "service": service.name,
            "workdir": str(files.results_dir(job.id)),
            "uploads": str(files.job_dir(job.id) / "uploads"), "parameters": params,
            "fetched": str(fetched),
            "fetch": {"hosts": list(service.fetch_hosts), "max_bytes": max_bytes},
            # no single file may outgrow the larger limit (RLIMIT_FSIZE): the monitor
            # then need not catch one huge write in time
            "max_file_bytes": max(service.max_result_bytes, service.max_log_bytes) + 1,
            "specs": _spec_rows(service.parameters)}
    if service.command:
        # A file reaches a command as a local path: an upload's, or where the
        # child fetches a URL to before the command starts (never the URL itself).
        values: dict[str, list[str]] = {}
        downloads = []
        for p in job.parameters:
            if p.is_upload:
                value = str(files.upload_path(job.id, p.name))
            elif p.by_reference:
                value = str(fetched / p.name)
                downloads.append((p.name, p.value, value))
            else:
                value = p.value
            values.setdefault(p.name, []).append(value)
        task["command"] = service.command_line(values)
        task["downloads"] = downloads
    else:
        task["runner"] = service.runner
    return task


@functools.lru_cache(maxsize=256)
def _spec_rows(specs: tuple) -> tuple[dict, ...]:
    """A service's parameter declarations as the child reads them: the same for each
    of its jobs, and dataclasses.asdict is a good part of building a task."""
    return tuple(dataclasses.asdict(s) for s in specs)


def send_task(process, task: dict) -> None:
    """Write the task to the job process's stdin (a Popen's or a ForkedJob's) and close it."""
    try:
        assert process.stdin is not None        # started with stdin=PIPE
        process.stdin.write(json.dumps(task).encode())
        process.stdin.close()
    except BrokenPipeError:
        pass        # the child died at once; its exit status tells why
