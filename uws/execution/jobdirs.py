"""A job's directory, made before its process starts: ``results/``, ``tmp/`` and its
two logs.

Making them is inode allocation, which some filesystems make slow at times: ext4
without a journal skips every inode freed in the last minute or more, so after many
deletions (a destruction sweep, a DELETE storm) the five inodes of a job took 1–3 ms
of a job's start, where they took 0.1 ms otherwise.  So each executor keeps one
directory made ahead per slot, made while the previous job runs; a start renames one
into place, which allocates nothing.  A job whose directory exists already (its
uploads, an earlier attempt) has what it lacks made on the spot, as before.

Layout: ``jobs/.spare/`` (a name no job id or result path can take) holds one area
per executor, ``<uuid>/``, flock'ed by it while it lives, so that the next executor
to start removes the areas of dead ones (a server killed keeps its spares) whatever
host or pid namespace they ran in; ``jobs/.spare/.lock`` orders making an area
against sweeping.  A spare is checked before use: jobs run as the server's user and
can reach it, so one found holding anything but its four empty entries is removed.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
import stat
import threading
import uuid
from pathlib import Path

from ..files import make_private_dir

log = logging.getLogger(__name__)

SPARE = ".spare"
LOGS = ("stdout.log", "stderr.log")
AREAS = ("results", "tmp")
_LOCK = ".lock"


class JobDirs:
    """Directories made ahead for the jobs of one executor (at most ``keep`` ready)."""

    def __init__(self, jobs_root: Path, keep: int):
        self.spares = Path(jobs_root) / SPARE
        self.keep = keep
        self._ready: list[Path] = []
        self._making = 0            # spares being made, counted against keep
        self._closed = False
        self._lock = threading.Lock()
        self.area: Path | None = None
        self._area_fd = -1
        try:
            self.area, self._area_fd = self._open_area()
        except OSError as exc:      # jobs still start, making their directories
            log.warning("no spare job directories: %s", exc)

    def make(self, job_dir: Path) -> None:
        """``job_dir`` with results/ and tmp/ (0700) and empty logs, renamed from a
        spare when it does not exist yet, else completed where it lacks them."""
        spare = self._take()
        if spare is not None:
            try:
                if _rename(spare, job_dir):
                    return
                self._give_back(spare)      # the job's directory exists: the next job's
            except OSError as exc:
                log.warning("spare job directory %s not used: %s", spare.name, exc)
                _discard(spare)
        for area in AREAS:
            make_private_dir(job_dir / area)

    def refill(self) -> None:
        """Make spares until ``keep`` are ready (call it off a job's start path)."""
        while self._reserve():
            spare = None
            try:
                spare = self._make_spare()
            except OSError as exc:
                log.warning("cannot make a spare job directory: %s", exc)
            with self._lock:
                self._making -= 1
            if spare is None:
                return
            self._give_back(spare)

    def close(self) -> None:
        """Remove this executor's area and the spares in it (a stopping executor)."""
        with self._lock:
            self._closed = True
            spares, self._ready = self._ready, []
        for spare in spares:
            _discard(spare)
        if self.area is not None:
            with contextlib.suppress(OSError):  # a refill still running: the next sweep's
                os.rmdir(self.area)
            os.close(self._area_fd)
            self.area, self._area_fd = None, -1

    def _reserve(self) -> bool:
        with self._lock:
            if self._closed or self.area is None or len(self._ready) + self._making >= self.keep:
                return False
            self._making += 1
            return True

    def _take(self) -> Path | None:
        """A ready spare as it was made; the ones found altered are removed."""
        while True:
            with self._lock:
                if not self._ready:
                    return None
                spare = self._ready.pop()
            if _intact(spare):
                return spare
            log.warning("spare job directory %s was altered; removed", spare.name)
            _discard(spare)

    def _give_back(self, spare: Path) -> None:
        with self._lock:
            if not self._closed:
                self._ready.append(spare)
                return
        _discard(spare)

    def _make_spare(self) -> Path:
        assert self.area is not None
        spare = self.area / uuid.uuid4().hex
        os.mkdir(spare, 0o700)
        try:
            for area in AREAS:
                os.mkdir(spare / area, 0o700)
            for name in LOGS:
                os.close(os.open(spare / name,
                                 os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        except BaseException:
            _discard(spare)
            raise
        return spare

    def _open_area(self) -> tuple[Path, int]:
        """This executor's area, made and locked after the dead executors' are swept."""
        make_private_dir(self.spares)
        with _locked(self.spares / _LOCK):
            _sweep(self.spares)
            area = self.spares / uuid.uuid4().hex
            os.mkdir(area, 0o700)
            fd = os.open(area, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return area, fd


def _rename(spare: Path, job_dir: Path) -> bool:
    """Move ``spare`` to ``job_dir``; False where that exists (with content)."""
    try:
        os.rename(spare, job_dir)
        return True
    except FileNotFoundError:
        make_private_dir(job_dir.parent)    # a new jobs/<xx>/; ENOENT again: spare gone
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
            return False
        raise
    os.rename(spare, job_dir)
    return True


def _intact(spare: Path) -> bool:
    """Whether ``spare`` holds exactly its two empty private directories and two empty
    private files, none a link."""
    try:
        if not _is(spare, stat.S_ISDIR, 0o700) or sorted(os.listdir(spare)) != sorted(
                AREAS + LOGS):
            return False
        return (all(_is(spare / a, stat.S_ISDIR, 0o700) and not os.listdir(spare / a)
                    for a in AREAS)
                and all(_is(spare / n, stat.S_ISREG, 0o600, empty=True) for n in LOGS))
    except OSError:
        return False


def _is(path: Path, kind, mode: int, empty: bool = False) -> bool:
    st = os.lstat(path)
    return (kind(st.st_mode) and stat.S_IMODE(st.st_mode) == mode
            and (not empty or (st.st_size == 0 and st.st_nlink == 1)))


def _sweep(spares: Path) -> None:
    """Remove the areas no live executor holds locked (called under the area lock)."""
    for name in os.listdir(spares):
        if name == _LOCK:
            continue
        try:
            fd = os.open(spares / name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                         | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue                        # its executor lives
        finally:
            os.close(fd)
        _discard(spares / name)


@contextlib.contextmanager
def _locked(path: Path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _discard(path: Path) -> None:
    """Remove a spare or an area, whatever a job put in it (rmtree follows no link)."""
    shutil.rmtree(path, ignore_errors=True)
