"""A job's directory, made before its process starts: ``results/``, ``tmp/`` and its
two logs.

Making them is inode allocation, which some filesystems make slow at times: ext4
without a journal skips every inode freed in the last minute or more, so after many
deletions (a destruction sweep, a DELETE storm) the five inodes of a job took 1–3 ms
of a job's start, where they took 0.1 ms otherwise.  So each executor keeps one
directory made ahead per slot, in ``jobs/.spare/`` (a name no job id or result path
can take), made while the previous job runs; a start renames one into place, which
allocates nothing.  A job whose directory exists already (its uploads, an earlier
attempt) has what it lacks made on the spot, as before.
"""
from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import uuid
from pathlib import Path

from ..files import make_private_dir

log = logging.getLogger(__name__)

SPARE = ".spare"
LOGS = ("stdout.log", "stderr.log")
AREAS = ("results", "tmp")


class JobDirs:
    """Directories made ahead for the jobs of one executor (at most ``keep`` ready)."""

    def __init__(self, jobs_root: Path, keep: int):
        self.spares = Path(jobs_root) / SPARE
        self.keep = keep
        # host:pid: what a later process on this host recognises as left by a dead one
        self._prefix = f"{socket.gethostname()}:{os.getpid()}:"
        self._ready: list[Path] = []
        self._lock = threading.Lock()
        self._sweep_dead()

    def make(self, job_dir: Path) -> None:
        """``job_dir`` with results/ and tmp/ (0700) and empty logs, renamed from a
        spare when it does not exist yet, else completed where it lacks them."""
        spare = self._take()
        if spare is not None and self._rename(spare, job_dir):
            return
        if spare is not None:
            self._give_back(spare)
        for area in AREAS:
            make_private_dir(job_dir / area)

    def refill(self) -> None:
        """Make spares until ``keep`` are ready (call it off a job's start path)."""
        while True:
            with self._lock:
                if len(self._ready) >= self.keep:
                    return
            try:
                spare = self._make_spare()
            except OSError as exc:
                log.warning("cannot make a spare job directory: %s", exc)
                return
            self._give_back(spare)

    def close(self) -> None:
        """Remove the spares still ready (a stopping executor)."""
        with self._lock:
            spares, self._ready = self._ready, []
        for spare in spares:
            _remove_spare(spare)

    def _take(self) -> Path | None:
        with self._lock:
            return self._ready.pop() if self._ready else None

    def _give_back(self, spare: Path) -> None:
        with self._lock:
            self._ready.append(spare)

    def _make_spare(self) -> Path:
        make_private_dir(self.spares)
        spare = self.spares / f"{self._prefix}{uuid.uuid4().hex}"
        os.mkdir(spare, 0o700)
        for area in AREAS:
            os.mkdir(spare / area, 0o700)
        for name in LOGS:
            os.close(os.open(spare / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                             0o600))
        return spare

    @staticmethod
    def _rename(spare: Path, job_dir: Path) -> bool:
        """Move ``spare`` to ``job_dir``; False where that exists (with content)."""
        for _ in range(2):
            try:
                os.rename(spare, job_dir)
                return True
            except FileNotFoundError:
                make_private_dir(job_dir.parent)    # a new jobs/<xx>/
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                    return False
                raise
        return False

    def _sweep_dead(self) -> None:
        """Remove the spares of dead processes of this host (a server killed keeps
        its spares); those of live processes, or other hosts, are theirs."""
        try:
            names = os.listdir(self.spares)
        except OSError:
            return
        host = socket.gethostname()
        for name in names:
            owner_host, _, rest = name.partition(":")
            pid = rest.partition(":")[0]
            if owner_host == host and pid.isdigit() and not _alive(int(pid)):
                _remove_spare(self.spares / name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_spare(spare: Path) -> None:
    """A spare holds two empty directories and two empty files, nothing more."""
    for name in LOGS:
        _quietly(os.unlink, spare / name)
    for area in AREAS:
        _quietly(os.rmdir, spare / area)
    _quietly(os.rmdir, spare)


def _quietly(call, path: Path) -> None:
    try:
        call(path)
    except OSError:
        pass
