"""A job's directory is ready before its process starts, made ahead of time where it
can be (uws.execution.jobdirs), and exactly as private as one made on the spot."""
from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
import threading

import pytest

from uws.errors import NotFound
from uws.execution.jobdirs import SPARE, JobDirs
from uws.execution.jobprocess import _private_file
from uws.files import JobFiles

from uwshelp import create, job_id, run_to_end

JOB = "cd" * 16


def layout(job_dir) -> dict[str, tuple[str, int, int]]:
    """What a job directory holds: name -> (kind, mode, size)."""
    found = {}
    for name in sorted(os.listdir(job_dir)):
        st = os.lstat(job_dir / name)
        found[name] = ("dir" if stat.S_ISDIR(st.st_mode) else "file",
                       stat.S_IMODE(st.st_mode), 0 if stat.S_ISDIR(st.st_mode) else st.st_size)
    return found


EXPECTED = {"results": ("dir", 0o700, 0), "stderr.log": ("file", 0o600, 0),
            "stdout.log": ("file", 0o600, 0), "tmp": ("dir", 0o700, 0)}


def jobs(tmp_path) -> JobFiles:
    return JobFiles(tmp_path / "data", max_upload_bytes=1000)


def spares(files) -> list:
    """The spares on disk, in every executor's area."""
    return sorted(p for area in (files.root / SPARE).iterdir() if area.is_dir()
                  for p in area.iterdir())


def ready(tmp_path, keep=1) -> tuple[JobFiles, JobDirs]:
    files = jobs(tmp_path)
    dirs = JobDirs(files.root, keep=keep)
    dirs.refill()
    return files, dirs


def test_a_job_directory_made_from_a_spare_is_private_and_holds_its_areas_and_logs(tmp_path):
    files, dirs = ready(tmp_path)
    [spare] = spares(files)
    inode = os.stat(spare).st_ino
    dirs.make(files.job_dir(JOB))       # its shard, jobs/cd/, did not exist yet
    assert layout(files.job_dir(JOB)) == EXPECTED
    assert stat.S_IMODE(os.stat(files.job_dir(JOB)).st_mode) == 0o700
    assert os.stat(files.job_dir(JOB)).st_ino == inode, "the spare was moved, not copied"
    assert spares(files) == []


def test_a_job_directory_made_with_no_spare_ready_has_its_private_areas(tmp_path):
    files = jobs(tmp_path)
    JobDirs(files.root, keep=1).make(files.job_dir(JOB))
    # the logs are opened (created) by the launch itself when no spare was renamed
    assert {k: v for k, v in layout(files.job_dir(JOB)).items() if v[0] == "dir"} == {
        "results": ("dir", 0o700, 0), "tmp": ("dir", 0o700, 0)}


def test_a_job_with_uploads_keeps_them_and_gets_what_it_lacks(tmp_path):
    files = jobs(tmp_path)
    upload = files.upload_path(JOB, "table.vot")
    upload.parent.mkdir(parents=True)
    upload.write_bytes(b"<VOTABLE/>")
    dirs = JobDirs(files.root, keep=1)
    dirs.refill()
    dirs.make(files.job_dir(JOB))
    assert upload.read_bytes() == b"<VOTABLE/>"
    assert files.results_dir(JOB).is_dir() and (files.job_dir(JOB) / "tmp").is_dir()
    assert len(spares(files)) == 1, "the spare is kept for the next job"


def test_an_earlier_attempts_results_are_not_replaced_by_a_spare(tmp_path):
    files = jobs(tmp_path)
    files.results_dir(JOB).mkdir(parents=True)
    (files.results_dir(JOB) / "partial.txt").write_text("attempt 1")
    dirs = JobDirs(files.root, keep=1)
    dirs.refill()
    dirs.make(files.job_dir(JOB))
    assert (files.results_dir(JOB) / "partial.txt").read_text() == "attempt 1"


def test_refill_keeps_one_spare_per_slot_and_no_more(tmp_path):
    files, dirs = ready(tmp_path, keep=3)
    dirs.refill()
    assert len(spares(files)) == 3
    dirs.make(files.job_dir(JOB))
    dirs.refill()
    assert len(spares(files)) == 3


def test_concurrent_refills_make_no_more_than_keep(tmp_path):
    files = jobs(tmp_path)
    dirs = JobDirs(files.root, keep=2)
    threads = [threading.Thread(target=dirs.refill) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(spares(files)) == 2


def test_a_stopping_executor_leaves_no_spare_and_no_area(tmp_path):
    files, dirs = ready(tmp_path, keep=2)
    dirs.close()
    assert os.listdir(files.root / SPARE) == [".lock"]


def test_a_refill_after_closing_makes_nothing(tmp_path):
    files, dirs = ready(tmp_path)
    dirs.close()
    dirs.refill()
    assert os.listdir(files.root / SPARE) == [".lock"]


def before_opening_a_log(monkeypatch, suffix: str, action) -> None:
    """``action()`` runs each time a file named ``*suffix`` is about to be opened."""
    real_open = os.open

    def opening(path, *args, **kw):
        if str(path).endswith(suffix):
            action()
        return real_open(path, *args, **kw)
    monkeypatch.setattr(os, "open", opening)


def test_a_spare_finished_while_the_executor_closes_is_removed(tmp_path, monkeypatch):
    files = jobs(tmp_path)
    dirs = JobDirs(files.root, keep=1)
    before_opening_a_log(monkeypatch, "stderr.log", dirs.close)
    dirs.refill()
    assert spares(files) == []


def test_a_spare_that_vanished_is_dropped_and_the_job_still_gets_its_directory(tmp_path):
    files, dirs = ready(tmp_path)
    [spare] = spares(files)
    shutil.rmtree(spare)
    dirs.make(files.job_dir(JOB))
    assert files.results_dir(JOB).is_dir() and (files.job_dir(JOB) / "tmp").is_dir()
    dirs.refill()
    assert len(spares(files)) == 1, "the lost spare was not counted as ready"


def test_a_rename_failing_unexpectedly_falls_back_and_drops_the_spare(tmp_path, monkeypatch):
    files, dirs = ready(tmp_path)

    def cross_device(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link")
    monkeypatch.setattr(os, "rename", cross_device)
    dirs.make(files.job_dir(JOB))
    assert files.results_dir(JOB).is_dir() and (files.job_dir(JOB) / "tmp").is_dir()
    assert spares(files) == []


def test_a_spare_that_cannot_be_completed_leaves_nothing_behind(tmp_path, monkeypatch):
    files = jobs(tmp_path)
    dirs = JobDirs(files.root, keep=2)

    def disk_full():
        raise OSError(errno.ENOSPC, "No space left on device")
    before_opening_a_log(monkeypatch, ".log", disk_full)
    dirs.refill()
    assert spares(files) == []


@pytest.mark.parametrize("tamper", ["planted result", "log linked", "log hard-linked",
                                    "log written"])
def test_a_spare_altered_by_a_job_is_removed_not_used(tmp_path, tamper):
    files, dirs = ready(tmp_path)
    [spare] = spares(files)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    if tamper == "planted result":
        (spare / "results" / "answer.txt").write_text("forged")
    elif tamper == "log linked":
        (spare / "stdout.log").unlink()
        (spare / "stdout.log").symlink_to(victim)
    elif tamper == "log hard-linked":
        (spare / "stdout.log").unlink()
        os.link(victim, spare / "stdout.log")
    else:
        (spare / "stderr.log").write_text("forged")
    dirs.make(files.job_dir(JOB))
    assert layout(files.results_dir(JOB)) == {}
    for name in ("stdout.log", "stderr.log"):   # made by the launch when not there
        log = files.job_dir(JOB) / name
        assert not os.path.lexists(log) or layout(files.job_dir(JOB))[name] == (
            "file", 0o600, 0) and os.stat(log).st_nlink == 1
    assert not spare.exists()
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_jobs_log_is_never_opened_through_a_link(tmp_path, link):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    log = tmp_path / "stdout.log"
    log.symlink_to(victim) if link == "symbolic" else os.link(victim, log)
    with pytest.raises(OSError):
        _private_file(log)
    assert victim.read_text() == "precious"


def killed_server_area(files) -> None:
    """Spares made by a process that then dies without closing them."""
    code = ("import os, sys; from uws.execution.jobdirs import JobDirs; "
            "d = JobDirs(sys.argv[1], keep=2); d.refill(); os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(files.root)], check=True)


def test_the_spares_of_a_killed_server_are_removed_at_the_next_start(tmp_path):
    files = jobs(tmp_path)
    killed_server_area(files)
    assert len(spares(files)) == 2
    JobDirs(files.root, keep=2)
    assert spares(files) == []


def test_the_spares_of_a_live_executor_are_left_alone(tmp_path):
    files, live = ready(tmp_path)
    killed_server_area(files)
    JobDirs(files.root, keep=1).refill()
    assert len(spares(files)) == 2, "the live one's and the new one's"
    assert live.area.is_dir() and len(list(live.area.iterdir())) == 1


def test_no_result_or_upload_path_reaches_the_spares(tmp_path):
    files, _ = ready(tmp_path)
    files.results_dir(JOB).mkdir(parents=True)
    (files.job_dir(JOB) / "uploads").mkdir()
    [spare] = spares(files)
    into = f"{SPARE}/{spare.parent.name}/{spare.name}/stdout.log"
    for bad in (f"../../../{into}", f"../../{SPARE}", SPARE, into):
        with pytest.raises(NotFound):
            files.open_result(JOB, bad)
        with pytest.raises(NotFound):
            files.open_upload(JOB, bad)
    with pytest.raises(NotFound):
        files.job_dir(SPARE)


def test_a_server_that_ran_a_job_has_the_next_jobs_directories_ready(client, api):
    first = create(client, DURATION="0")
    assert run_to_end(client, first) == "COMPLETED"
    made_ahead = {os.stat(p).st_ino for p in spares(api.files)}
    assert len(made_ahead) == 2, "one per slot"
    second = create(client, DURATION="0")
    assert run_to_end(client, second) == "COMPLETED"
    made = api.files.job_dir(job_id(second))
    assert os.stat(made).st_ino in made_ahead, "the second job's directory was a spare"
    assert {n: v[:2] for n, v in layout(made).items() if n in EXPECTED} == {
        n: v[:2] for n, v in EXPECTED.items()}
    assert client.get(f"{second}/results").status_code == 200


def test_a_stopping_executor_leaves_no_spare(client, api):
    assert run_to_end(client, create(client, DURATION="0")) == "COMPLETED"
    assert spares(api.files)
    api.executor.stop()
    assert os.listdir(api.files.root / SPARE) == [".lock"]
