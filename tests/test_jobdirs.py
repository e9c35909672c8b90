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

from uws.domain.errors import NotFound
from uws.execution import jobdirs
from uws.execution.files import JobFiles
from uws.execution.jobdirs import LOCK, LOGS, SPARE, JobDirs, _lock

from uwshelp import create, job_id, run_to_end

#: one database is enough here (job directories; tests/README.rst)
BACKENDS = ("sqlite",)

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
                  for p in area.iterdir() if not p.name.startswith("."))


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


def on_os_call(monkeypatch, call: str, suffix: str, action) -> None:
    """``action()`` runs before each ``os.<call>`` of a path ending in ``suffix``."""
    real = getattr(os, call)

    def patched(path, *args, **kw):
        if str(path).endswith(suffix):
            action()
        return real(path, *args, **kw)
    monkeypatch.setattr(os, call, patched)


def test_concurrent_refills_make_no_more_than_keep(tmp_path, monkeypatch):
    files = jobs(tmp_path)
    dirs = JobDirs(files.root, keep=1)
    meet = threading.Barrier(2, timeout=1)

    def both_inside():      # a second refill making a spare too would meet the first here
        try:
            meet.wait()
        except threading.BrokenBarrierError:
            pass
    on_os_call(monkeypatch, "open", "stdout.log", both_inside)
    threads = [threading.Thread(target=dirs.refill) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(spares(files)) == 1


def test_a_spare_given_back_when_another_was_made_meanwhile_is_not_kept(tmp_path, monkeypatch):
    files, dirs = ready(tmp_path)
    files.results_dir(JOB).mkdir(parents=True)      # the job's directory exists
    on_os_call(monkeypatch, "rename", "", dirs.refill)     # the other slot refills
    dirs.make(files.job_dir(JOB))
    assert len(spares(files)) == 1


def test_a_refill_that_fails_unexpectedly_does_not_stop_later_refills(tmp_path, monkeypatch):
    files = jobs(tmp_path)
    dirs = JobDirs(files.root, keep=1)

    def broken():
        raise RuntimeError("unexpected")
    with monkeypatch.context() as m:
        on_os_call(m, "open", "stdout.log", broken)
        dirs.refill()
    assert spares(files) == []
    dirs.refill()
    assert len(spares(files)) == 1


def test_a_stopping_executor_leaves_no_spare_no_area_and_no_descriptor(tmp_path):
    before = set(os.listdir("/proc/self/fd"))
    files, dirs = ready(tmp_path, keep=2)
    dirs.close()
    assert os.listdir(files.root / SPARE) == [LOCK]
    assert set(os.listdir("/proc/self/fd")) <= before


def test_a_refill_after_closing_makes_nothing(tmp_path):
    files, dirs = ready(tmp_path)
    dirs.close()
    dirs.refill()
    assert os.listdir(files.root / SPARE) == [LOCK]


def test_closing_waits_for_a_refill_under_way_and_removes_its_spare(tmp_path, monkeypatch):
    files = jobs(tmp_path)
    dirs = JobDirs(files.root, keep=1)
    inside, go_on = threading.Event(), threading.Event()

    def stall():
        inside.set()
        go_on.wait(5)
    on_os_call(monkeypatch, "open", "stderr.log", stall)
    refill = threading.Thread(target=dirs.refill)
    refill.start()
    assert inside.wait(5)
    closing = threading.Thread(target=dirs.close)
    closing.start()
    closing.join(0.3)
    assert closing.is_alive(), "close() waits for the spare being made"
    go_on.set()
    refill.join(5)
    closing.join(5)
    assert not refill.is_alive() and not closing.is_alive()
    assert os.listdir(files.root / SPARE) == [LOCK]


def test_a_spare_that_vanished_is_dropped_and_the_job_still_gets_its_directory(tmp_path):
    files, dirs = ready(tmp_path)
    [spare] = spares(files)
    shutil.rmtree(spare)
    dirs.make(files.job_dir(JOB))
    assert files.results_dir(JOB).is_dir() and (files.job_dir(JOB) / "tmp").is_dir()
    dirs.refill()
    assert len(spares(files)) == 1, "the lost spare was not counted as ready"


def test_a_rename_failing_unexpectedly_falls_back_and_drops_the_spares(tmp_path, monkeypatch):
    files, dirs = ready(tmp_path, keep=2)

    def cross_device(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link")
    monkeypatch.setattr(os, "rename", cross_device)
    dirs.make(files.job_dir(JOB))
    assert files.results_dir(JOB).is_dir() and (files.job_dir(JOB) / "tmp").is_dir()
    assert spares(files) == []
    dirs.refill()
    assert spares(files) == [], "no spare is made that could not be moved into place"


def test_an_executor_whose_area_vanished_stops_making_spares(tmp_path, caplog):
    files, dirs = ready(tmp_path)
    assert dirs.area is not None
    shutil.rmtree(dirs.area)
    dirs.make(files.job_dir(JOB))
    dirs.refill()
    dirs.refill()
    assert files.results_dir(JOB).is_dir()
    assert caplog.text.count("no more spare job directories") == 1
    assert spares(files) == []


def test_an_area_that_cannot_be_locked_leaves_nothing_and_jobs_still_start(tmp_path,
                                                                          monkeypatch):
    real_lock = jobdirs._lock

    def no_locks(fd, wait):
        if not wait:
            raise OSError(errno.ENOLCK, "No locks available")
        real_lock(fd, wait)
    monkeypatch.setattr(jobdirs, "_lock", no_locks)
    before = set(os.listdir("/proc/self/fd"))
    files, dirs = ready(tmp_path)
    assert set(os.listdir("/proc/self/fd")) <= before
    assert os.listdir(files.root / SPARE) == [LOCK]
    dirs.make(files.job_dir(JOB))
    assert files.results_dir(JOB).is_dir()


def test_closing_gives_up_waiting_on_a_hung_start_but_keeps_its_area_held(tmp_path,
                                                                         monkeypatch):
    files, dirs = ready(tmp_path)
    monkeypatch.setattr(jobdirs, "CLOSE_WAIT", 0.2)
    inside, go_on = threading.Event(), threading.Event()

    def hang():
        inside.set()
        go_on.wait(5)
    on_os_call(monkeypatch, "rename", "", hang)
    start = threading.Thread(target=dirs.make, args=(files.job_dir(JOB),))
    start.start()
    assert inside.wait(5)
    dirs.close()
    JobDirs(files.root, keep=1)         # another executor starting sweeps nothing held
    go_on.set()
    start.join(5)
    assert layout(files.job_dir(JOB)) == EXPECTED


def test_an_area_its_maker_died_making_is_swept(tmp_path):
    files = jobs(tmp_path)
    half_made = files.root / SPARE / ("0" * 32)
    (half_made / ("1" * 32) / "results").mkdir(parents=True)   # no .owner yet
    JobDirs(files.root, keep=1)
    assert not half_made.exists()


def test_a_spare_that_cannot_be_completed_leaves_nothing_behind(tmp_path, monkeypatch):
    files = jobs(tmp_path)
    dirs = JobDirs(files.root, keep=2)

    def disk_full():
        raise OSError(errno.ENOSPC, "No space left on device")
    on_os_call(monkeypatch, "open", ".log", disk_full)
    dirs.refill()
    assert spares(files) == []


def alter(spare, how: str, victim) -> None:
    """What a job of the server's user could do to a spare it found."""
    if how == "planted result":
        (spare / "results" / "answer.txt").write_text("forged")
    elif how == "planted entry":
        (spare / "run.sh").write_text("forged")
    elif how == "log linked":
        (spare / "stdout.log").unlink()
        (spare / "stdout.log").symlink_to(victim)
    elif how == "log hard-linked":
        (spare / "stdout.log").unlink()
        os.link(victim, spare / "stdout.log")
    else:
        (spare / "stderr.log").write_text("forged")


@pytest.mark.parametrize("how", ["planted result", "planted entry", "log linked",
                                 "log hard-linked", "log written"])
def test_a_spare_altered_by_a_job_gives_the_next_job_nothing_of_it(tmp_path, how):
    files, dirs = ready(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    alter(spares(files)[0], how, victim)
    dirs.make(files.job_dir(JOB))
    out, err = dirs.open_logs(files.job_dir(JOB))      # as the job's launch does
    out.close()
    err.close()
    assert layout(files.job_dir(JOB)) == EXPECTED
    assert os.listdir(files.results_dir(JOB)) == []
    assert all(os.stat(files.job_dir(JOB) / n).st_nlink == 1 for n in LOGS)
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("how", ["planted result", "planted entry", "log linked"])
def test_a_spare_altered_in_its_layout_is_removed_not_used(tmp_path, how):
    files, dirs = ready(tmp_path)
    [spare] = spares(files)
    alter(spare, how, tmp_path)
    dirs.make(files.job_dir(JOB))
    assert not spare.exists()
    assert sorted(os.listdir(files.job_dir(JOB))) == ["results", "tmp"], "made anew"


def job_dir_with_log(tmp_path, how: str):
    """A job directory whose stdout.log a job replaced (``how``), and the victim file."""
    files = jobs(tmp_path)
    dirs = JobDirs(files.root, keep=1)
    dirs.make(files.job_dir(JOB))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    log = files.job_dir(JOB) / "stdout.log"
    if how == "symbolic link":
        log.symlink_to(victim)
    elif how == "hard link":
        os.link(victim, log)
    elif how == "fifo":
        os.mkfifo(log)
    else:
        log.write_text("attempt 1")
        log.chmod(0o644)
    return files, dirs, victim


@pytest.mark.timeout(10)    # a FIFO opened for writing with no reader would block
@pytest.mark.parametrize("how", ["symbolic link", "hard link", "fifo", "earlier attempt"])
def test_a_jobs_logs_are_opened_empty_private_and_through_no_link(tmp_path, how):
    files, dirs, victim = job_dir_with_log(tmp_path, how)
    out, err = dirs.open_logs(files.job_dir(JOB))
    with out, err:
        out.write(b"attempt 2")
    assert victim.read_text() == "precious"
    assert layout(files.job_dir(JOB))["stdout.log"] == ("file", 0o600, len(b"attempt 2"))
    assert os.stat(files.job_dir(JOB) / "stdout.log").st_nlink == 1
    assert layout(files.job_dir(JOB))["stderr.log"] == ("file", 0o600, 0)


def test_logs_are_not_opened_in_a_job_directory_that_is_a_link(tmp_path):
    files = jobs(tmp_path)
    dirs = JobDirs(files.root, keep=1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    files.job_dir(JOB).parent.mkdir(parents=True)
    files.job_dir(JOB).symlink_to(elsewhere)
    with pytest.raises(OSError):
        dirs.open_logs(files.job_dir(JOB))
    assert os.listdir(elsewhere) == []


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
    assert [p for p in spares(files) if p.parent == live.area]


def test_an_executor_starting_waits_while_another_sweeps_or_makes_its_area(tmp_path):
    files = jobs(tmp_path)
    (files.root / SPARE).mkdir(parents=True)
    fd = os.open(files.root / SPARE / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    _lock(fd, wait=False)       # as another executor's start holds it
    started = threading.Thread(target=lambda: JobDirs(files.root, keep=1))
    started.start()
    started.join(0.3)
    assert started.is_alive()
    os.close(fd)
    started.join(5)
    assert not started.is_alive()


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
    assert os.listdir(api.files.root / SPARE) == [LOCK]
