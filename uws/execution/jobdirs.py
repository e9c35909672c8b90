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
per executor, ``<uuid>/``, whose ``.owner`` file the executor holds locked while it
lives, so that the next executor to start removes the areas of dead ones (a server
killed keeps its spares) whatever host or pid namespace they ran in.  The locks are
open-file-description locks: they reach an NFS server, and two executors of one
process exclude each other.  ``jobs/.spare/.lock`` orders making an area against
sweeping.  Jobs run as the server's user and can reach all this, so a spare is
checked before use (one found altered is removed) and a job's logs are opened
through no link.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
import stat
import struct
import threading
import uuid
from pathlib import Path
from typing import BinaryIO

from .files import make_private_dir, open_dir_beneath

log = logging.getLogger(__name__)

SPARE = ".spare"
LOGS = ("stdout.log", "stderr.log")
AREAS = ("results", "tmp")
LOCK = ".lock"          # in jobs/.spare/
OWNER = ".owner"        # in each area
CLOSE_WAIT = 10.0       # seconds close() waits for a make or refill in progress

# struct flock of 64-bit Linux: l_type, l_whence, l_start, l_len, l_pid (+ padding)
_WHOLE_FILE = struct.pack("@hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
_SPARE_KINDS = {**{a: (True, False) for a in AREAS}, **{n: (False, True) for n in LOGS}}


class JobDirs:
    """Directories made ahead for the jobs of one executor (at most ``keep`` ready)."""

    def __init__(self, jobs_root: Path, keep: int):
        self.root = Path(jobs_root)
        self.spares = self.root / SPARE
        self.keep = keep
        self._ready: list[Path] = []
        self._making = 0        # refills under way, counted against keep
        self._busy = 0          # makes and refills holding a spare: close() waits for them
        self._closed = False
        self._cond = threading.Condition()
        self.area: Path | None = None
        self._owner_fd = -1
        try:
            self.area, self._owner_fd = _open_area(self.spares)
        except OSError as exc:      # jobs still start, making their directories
            log.warning("no spare job directories: %s", exc)

    def make(self, job_dir: Path) -> None:
        """``job_dir`` with results/ and tmp/ (0700) and empty logs, renamed from a
        spare when it does not exist yet, else completed where it lacks them."""
        spare = self._take()
        if spare is not None:
            back = None
            try:
                if _rename(spare, job_dir):
                    return
                back = spare                # the job's directory exists: the next job's
            except OSError as exc:
                log.warning("spare job directory %s not used: %s", spare.name, exc)
                if exc.errno == errno.EXDEV:
                    self._stop_sparing("jobs/<xx>/ is on another filesystem")
                _discard(spare)
            finally:
                self._release(back)
        for area in AREAS:
            make_private_dir(job_dir / area)

    def refill(self) -> None:
        """Make spares until ``keep`` are ready; best effort, off a job's start path."""
        while (area := self._reserve()) is not None:
            spare = None
            try:
                spare = _make_spare(area)
            except Exception as exc:    # a job must not fail for want of a spare
                log.warning("cannot make a spare job directory: %s", exc)
                if not os.path.isdir(area):
                    self._stop_sparing(f"{area} is gone")
            finally:
                kept = self._release(spare, refilled=True)
            if not kept:
                return

    def open_logs(self, job_dir: Path) -> tuple[BinaryIO, BinaryIO]:
        """The job's stdout.log and stderr.log, empty and private, opened for writing
        through no link: a job could have put a symlink, a FIFO or a hard link to any
        file of the server's user in their place for its retry."""
        dir_fd = open_dir_beneath(self.root, job_dir.relative_to(self.root).parts)
        opened: list[int] = []
        try:
            for name in LOGS:
                opened.append(_fresh_file(name, dir_fd))
        except BaseException:
            for fd in opened:
                os.close(fd)
            raise
        finally:
            os.close(dir_fd)
        return os.fdopen(opened[0], "wb"), os.fdopen(opened[1], "wb")

    def close(self) -> None:
        """Remove this executor's area and the spares in it (a stopping executor)."""
        with self._cond:
            self._closed = True
            idle = self._cond.wait_for(lambda: self._busy == 0, timeout=CLOSE_WAIT)
            spares, self._ready = self._ready, []
            area, fd, self.area = self.area, self._owner_fd, None
            if idle:
                self._owner_fd = -1
        for spare in spares:
            _discard(spare)
        if not idle:    # a hung filesystem: the area stays held until this process ends
            log.warning("a spare job directory is still in use; %s left", area)
            return
        if fd >= 0:
            os.close(fd)    # before .owner goes: NFS keeps a file open as .nfsXXXX
        if area is not None:
            _discard(area)

    def _stop_sparing(self, why: str) -> None:
        with self._cond:
            if self.keep == 0:
                return
            self.keep = 0
            spares, self._ready = self._ready, []
        log.warning("no more spare job directories: %s", why)
        for spare in spares:
            _discard(spare)

    def _reserve(self) -> Path | None:
        with self._cond:
            if self._closed or self.area is None or (
                    len(self._ready) + self._making >= self.keep):
                return None
            self._making += 1
            self._busy += 1
            return self.area

    def _take(self) -> Path | None:
        """A ready spare as it was made (the ones found altered are removed), counted
        busy until :meth:`_release`."""
        while True:
            with self._cond:
                if self._closed or not self._ready:
                    return None
                spare = self._ready.pop()
                self._busy += 1
            if _intact(spare):
                return spare
            log.warning("spare job directory %s gone or altered; removed", spare.name)
            _discard(spare)
            self._release(None)

    def _release(self, spare: Path | None, refilled: bool = False) -> bool:
        """End a make or a refill, keeping ``spare`` ready if there is room for it;
        whether it was kept."""
        with self._cond:
            self._busy -= 1
            self._making -= refilled
            kept = spare is not None and not self._closed and len(self._ready) + \
                self._making < self.keep
            if spare is not None and kept:
                self._ready.append(spare)
            self._cond.notify_all()
        if spare is not None and not kept:
            _discard(spare)
        return kept


def _open_area(spares: Path) -> tuple[Path, int]:
    """A new area, its owner file locked, made after the dead executors' are swept."""
    if not hasattr(fcntl, "F_OFD_SETLK"):
        raise OSError(errno.ENOTSUP, "no open file description locks on this system")
    make_private_dir(spares)
    with _holding(spares / LOCK):
        _sweep(spares)
        area = spares / uuid.uuid4().hex
        os.mkdir(area, 0o700)
        try:
            fd = os.open(area / OWNER, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                         0o600)
            try:
                _lock(fd, wait=False)
            except BaseException:
                os.close(fd)
                raise
        except BaseException:
            _discard(area)
            raise
    return area, fd


def _sweep(spares: Path) -> None:
    """Remove the areas no live executor holds (called holding ``.lock``: an area
    without its owner file is one whose maker died making it)."""
    for name in os.listdir(spares):
        if name == LOCK:
            continue
        area = spares / name
        try:
            fd = os.open(area / OWNER, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            if os.path.isdir(area) and not os.path.islink(area):
                _discard(area)
            continue
        except OSError:
            continue
        try:
            _lock(fd, wait=False)
        except OSError as exc:      # EAGAIN/EACCES: its executor lives
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                log.warning("spare area %s left: %s", name, exc)
            os.close(fd)
            continue
        os.close(fd)    # first (NFS); no other sweep runs while .lock is held
        _discard(area)


def _lock(fd: int, wait: bool) -> None:
    """Lock the whole file, held by this open file description (not by the process)."""
    fcntl.fcntl(fd, fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK, _WHOLE_FILE)


@contextlib.contextmanager
def _holding(path: Path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        _lock(fd, wait=True)
        yield
    finally:
        os.close(fd)


def _make_spare(area: Path) -> Path:
    spare = area / uuid.uuid4().hex
    os.mkdir(spare, 0o700)
    try:
        for name in AREAS:
            os.mkdir(spare / name, 0o700)
        for name in LOGS:
            os.close(os.open(spare / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                             0o600))
    except BaseException:
        _discard(spare)
        raise
    return spare


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
    """Whether ``spare`` holds just its two directories and two files, none a link,
    and nothing in results/ (that would be served as the next job's).  The logs are
    checked again where they are opened (:func:`_fresh_file`); what a job may have
    left in tmp/ is scratch the next job owns.  Two directory reads, no stat."""
    try:
        with os.scandir(spare) as entries:
            kinds = {e.name: (e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False))
                     for e in entries}
        return (kinds == _SPARE_KINDS and not os.path.islink(spare)
                and not os.listdir(spare / "results"))
    except OSError:
        return False


def _fresh_file(name: str, dir_fd: int) -> int:
    """``name`` in ``dir_fd`` opened for writing, empty and 0600: the regular file
    there truncated, anything else there (a link, a FIFO, a file linked elsewhere)
    replaced by a new file."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except FileNotFoundError:
        return _new_file(name, dir_fd)
    except OSError:         # ELOOP: a symlink; ENXIO: a FIFO nobody reads
        fd = -1
    if fd >= 0:
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                os.set_blocking(fd, True)
                os.ftruncate(fd, 0)
                os.fchmod(fd, 0o600)
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    os.unlink(name, dir_fd=dir_fd)
    return _new_file(name, dir_fd)


def _new_file(name: str, dir_fd: int) -> int:
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                   0o600, dir_fd=dir_fd)


def _discard(path: Path) -> None:
    """Remove a spare or an area, whatever a job put in it (rmtree follows no link)."""
    shutil.rmtree(path, ignore_errors=True)
