"""Per-job directories under the data directory: uploads and results.

Every path handed out is checked to stay inside its job's directory, so no
name from a request can reach another file.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import stat
import sys
import uuid
from pathlib import Path

from ..domain.errors import NotFound, TooLarge
from ..domain.model import is_job_id

log = logging.getLogger(__name__)
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")
CHUNK = 1 << 16


@dataclasses.dataclass(frozen=True)
class Usage:
    """Bytes on disk of one job's directory, by what they are."""
    uploads: int = 0
    written: int = 0        # by the job: results, temporary files, fetched URLs, and
                            # anything else in its directory but uploads and logs
    logs: int = 0           # its stdout and stderr
    entries: int = 0        # files, folders and links among what the job wrote

    @property
    def total(self) -> int:
        return self.uploads + self.written + self.logs


WRITTEN = ("results", "tmp", "fetched")     # made by the server for what the job writes
LOGS = ("stdout.log", "stderr.log")


class JobFiles:
    def __init__(self, data_dir: Path, max_upload_bytes: int):
        self.root = Path(data_dir).resolve() / "jobs"
        self.max_upload_bytes = max_upload_bytes

    def job_dir(self, job_id: str) -> Path:
        if not is_job_id(job_id):
            raise NotFound(f"no job {job_id!r}")
        return self.root / job_id[:2] / job_id

    def results_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id) / "results"

    def upload_path(self, job_id: str, name: str) -> Path:
        return self._inside(self.job_dir(job_id) / "uploads", name)

    def result_path(self, job_id: str, relative: str) -> Path:
        return self._inside(self.results_dir(job_id), relative)

    def open_result(self, job_id: str, relative: str):
        """The result file opened for reading, with its os.stat_result; NotFound if
        it is gone or is not a regular file inside the job's result directory."""
        return self._open_below(job_id, "results", relative)

    def open_upload(self, job_id: str, name: str):
        return self._open_below(job_id, "uploads", name)

    def _open_below(self, job_id: str, area: str, name: str):
        self.job_dir(job_id)    # NotFound for what is not a job id
        _check_names(name)
        return _open_beneath(self.root, [job_id[:2], job_id, area, *name.split("/")])

    def stage_upload(self, job_id: str, name: str, stream) -> Path:
        """Copy an upload stream beside its final place; TooLarge past the limit.

        The caller installs it (:meth:`install_upload`) once the job has
        accepted the new value, so a refused update never replaces a file.
        """
        final = self.upload_path(job_id, name)
        make_private_dir(final.parent)
        staged = final.with_name(f".{final.name}.{uuid.uuid4().hex}")
        size = 0
        try:
            with os.fdopen(os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600),
                           "wb") as out:
                while chunk := stream.read(CHUNK):
                    size += len(chunk)
                    if size > self.max_upload_bytes:
                        raise TooLarge(f"upload {name} is larger than {self.max_upload_bytes} bytes")
                    out.write(chunk)
        except BaseException:
            staged.unlink(missing_ok=True)
            raise
        return staged

    def stage_copy(self, source_id: str, job_id: str, name: str) -> Path:
        """Stage a copy of another job's upload for ``job_id`` (REPEAT): a file of
        its own, so deleting either job leaves the other's intact."""
        opened, _ = self.open_upload(source_id, name)
        with opened:
            return self.stage_upload(job_id, name, opened)

    def install_upload(self, staged: Path, job_id: str, name: str) -> None:
        os.replace(staged, self.upload_path(job_id, name))

    def usage(self, job_id: str) -> Usage:
        top = self.job_dir(job_id)
        written = entries = 0
        for name in _names(top):    # all the job could write: ../x counts as results/x
            if name in ("uploads", *LOGS):
                continue
            size, count = tree_size(top / name)
            written += size
            entries += count + (name not in WRITTEN)    # the server made those
        return Usage(uploads=tree_size(top / "uploads")[0], written=written,
                     logs=sum(tree_size(top / name)[0] for name in LOGS), entries=entries)

    def remove(self, job_id: str) -> bool:
        """Remove the job's directory; False (logged) if some of it is left."""
        return _remove_tree(self.job_dir(job_id))

    def remove_results(self, job_id: str) -> bool:
        return _remove_tree(self.results_dir(job_id))

    def purge_discarded(self) -> None:
        """Remove the results set aside and never removed (their process died first)."""
        trash = self.root / ".discarded"
        for name in _names(trash):
            _remove_tree(trash / name)

    def set_aside_results(self, job_id: str) -> SetAside:
        """Take the job's results out of its directory at once: a rename, quick
        enough under a database lock, where removing a job's many files is not.
        They go to a folder beside the jobs', where no job's usage counts them."""
        results = self.results_dir(job_id)
        try:
            info = os.lstat(results)
            if stat.S_ISDIR(info.st_mode) and not _names(results):
                return SetAside(None, results)      # empty
            trash = self.root / ".discarded"
            make_private_dir(trash)
            aside = trash / f"{job_id}-{uuid.uuid4().hex}"
            os.rename(results, aside)
        except FileNotFoundError:
            return SetAside(None, results)
        except OSError as exc:
            log.warning("cannot set aside %s (%s): removing it in place", results, exc)
            _remove_tree(results)
            return SetAside(None, results)
        return SetAside(aside, results)

    @staticmethod
    def _inside(base: Path, name: str) -> Path:
        _check_names(name)
        path = (base / name).resolve()
        if base.resolve() not in path.parents:
            raise NotFound(f"no file {name!r}")
        return path


class SetAside:
    """A job's results moved out of its directory: then removed, or put back."""

    def __init__(self, moved: Path | None, home: Path):
        self.moved = moved
        self.home = home

    def remove(self) -> None:
        if self.moved is not None:
            _remove_tree(self.moved)
            self.moved = None

    def restore(self) -> None:
        """Back where they were (their job was not queued again after all)."""
        if self.moved is not None:
            try:
                os.rename(self.moved, self.home)
            except OSError as exc:
                log.warning("cannot put back %s (%s); removed", self.home, exc)
                _remove_tree(self.moved)
            self.moved = None


def _names(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def tree_size(path: Path) -> tuple[int, int]:
    """(bytes, entries) of the files under ``path``: links are not followed and count as
    entries, a sparse file counts its length (as a download of it would), and the
    folders below ``path`` count as entries too (each is an inode)."""
    try:
        info = os.lstat(path)
    except OSError:
        return 0, 0
    if not stat.S_ISDIR(info.st_mode):
        return max(info.st_size, info.st_blocks * 512), 0
    total, count, pending = 0, 0, [path]
    while pending:
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue        # removed while we looked
                    count += 1
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(Path(entry.path))
                    else:
                        total += max(info.st_size, info.st_blocks * 512)
        except OSError:
            continue
    return total, count


def make_private_dir(path: Path) -> None:
    """mkdir -p where each directory made is 0700 (os.makedirs gives the parents
    the umask's default)."""
    path = Path(path)
    if path.is_dir():
        return
    make_private_dir(path.parent)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass


def _remove_tree(path: Path) -> bool:
    """rmtree that tolerates what is already gone but reports anything else, so a
    caller can keep the job's record (and retry) rather than orphan its files.  A
    file or a link where a job's folder belongs (a job can make one) is removed
    itself: a link is never followed."""
    if os.path.islink(path) or not os.path.isdir(path):
        return _unlink(path)
    failures = []

    def _failed(_function, failed_path, error):
        exc = error[1] if isinstance(error, tuple) else error     # onerror / onexc
        if not isinstance(exc, FileNotFoundError):
            failures.append((failed_path, exc))

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=_failed)
    else:
        shutil.rmtree(path, onerror=_failed)
    for failed_path, exc in failures:
        log.warning("cannot remove %s: %s", failed_path, exc)
    return not failures


def _unlink(path: Path) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot remove %s: %s", path, exc)
        return False
    return True


def _check_names(name: str) -> None:
    """NotFound for a relative name with a part that is not a plain file name
    (empty, ".", "..", hidden, or with characters of its own)."""
    if not all(_SAFE_NAME.fullmatch(part) for part in name.split("/")):
        raise NotFound(f"no file {name!r}")


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted by a job must not hang the request.
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_beneath(top: Path, parts: list[str]):
    """Open ``top/parts[0]/.../parts[-1]`` for reading, each part relative to the
    directory opened before it and none of them a symlink: (binary file,
    os.stat_result), or NotFound.

    Jobs write into these directories while the server reads them, so a check of
    a path followed by its open could be raced by swapping a directory for a
    symlink.  Opening one part at a time, each with O_NOFOLLOW below the directory
    descriptor held, leaves no path to swap: what is opened lies inside ``top``
    (the server's own directory; a symlink there is the administrator's).  A file
    with another name elsewhere (a hard link, ``st_nlink > 1``) is refused like a
    symlink: a job could link any file of the server's user into its results.
    """
    missing = NotFound(f"no file {parts[-1]!r}")
    try:
        dir_fd = open_dir_beneath(top, parts[:-1])
    except OSError:
        raise missing from None
    try:
        fd = os.open(parts[-1], _FILE, dir_fd=dir_fd)
    except OSError:
        raise missing from None
    finally:
        os.close(dir_fd)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or opened.st_nlink != 1:
            raise missing
        return os.fdopen(fd, "rb"), opened
    except OSError:
        os.close(fd)
        raise missing from None
    except BaseException:
        os.close(fd)
        raise


def open_dir_beneath(top: Path, parts) -> int:
    """The descriptor of ``top/parts[0]/...``, each part opened relative to the one
    before it, none of them a symlink (see :func:`_open_beneath`); OSError else."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            below = os.open(part, _DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd
