"""A job's directory is ready before its process starts, made ahead of time where it
can be (uws.execution.jobdirs), and exactly as private as one made on the spot."""
from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys

from uws.execution.jobdirs import SPARE, JobDirs
from uws.files import JobFiles

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


def test_a_job_directory_made_from_a_spare_is_private_and_holds_its_areas_and_logs(tmp_path):
    files = jobs(tmp_path)
    dirs = JobDirs(files.root, keep=1)
    dirs.refill()
    dirs.make(files.job_dir(JOB))
    assert layout(files.job_dir(JOB)) == EXPECTED
    assert stat.S_IMODE(os.stat(files.job_dir(JOB)).st_mode) == 0o700
    assert os.listdir(files.root / SPARE) == [], "the spare was used, not copied"


def test_a_job_directory_made_with_no_spare_ready_is_the_same(tmp_path):
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
    assert len(os.listdir(files.root / SPARE)) == 1, "the spare is kept for the next job"


def test_an_earlier_attempts_results_are_not_replaced_by_a_spare(tmp_path):
    files = jobs(tmp_path)
    files.results_dir(JOB).mkdir(parents=True)
    (files.results_dir(JOB) / "partial.txt").write_text("attempt 1")
    dirs = JobDirs(files.root, keep=1)
    dirs.refill()
    dirs.make(files.job_dir(JOB))
    assert (files.results_dir(JOB) / "partial.txt").read_text() == "attempt 1"


def test_refill_keeps_one_spare_per_slot_and_no_more(tmp_path):
    files = jobs(tmp_path)
    dirs = JobDirs(files.root, keep=3)
    dirs.refill()
    dirs.refill()
    assert len(os.listdir(files.root / SPARE)) == 3
    dirs.make(files.job_dir(JOB))
    dirs.refill()
    assert len(os.listdir(files.root / SPARE)) == 3


def test_a_stopping_executor_leaves_no_spare(tmp_path):
    files = jobs(tmp_path)
    dirs = JobDirs(files.root, keep=2)
    dirs.refill()
    dirs.close()
    assert os.listdir(files.root / SPARE) == []


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_the_spares_of_a_killed_server_on_this_host_are_removed_at_the_next_start(tmp_path):
    files = jobs(tmp_path)
    left = JobDirs(files.root, keep=2)
    left.refill()
    host = socket.gethostname()
    for spare in list((files.root / SPARE).iterdir()):  # as if their process had died
        spare.rename(spare.with_name(f"{host}:{dead_pid()}:{spare.name.rsplit(':', 1)[1]}"))
    JobDirs(files.root, keep=2)
    assert os.listdir(files.root / SPARE) == []


def test_the_spares_of_live_processes_and_other_hosts_are_left_alone(tmp_path):
    files = jobs(tmp_path)
    JobDirs(files.root, keep=1).refill()        # this (live) process's
    other_host = files.root / SPARE / f"elsewhere.example:{dead_pid()}:{'0' * 32}"
    other_host.mkdir()
    JobDirs(files.root, keep=1)
    assert len(os.listdir(files.root / SPARE)) == 2


def test_no_result_or_upload_path_reaches_the_spares(tmp_path):
    import pytest

    from uws.errors import NotFound
    files = jobs(tmp_path)
    JobDirs(files.root, keep=1).refill()
    for bad in (f"../../{SPARE}", SPARE, f"../../../{SPARE}/x"):
        with pytest.raises(NotFound):
            files.open_result(JOB, bad)
    with pytest.raises(NotFound):
        files.job_dir(SPARE)


def test_a_server_that_ran_a_job_has_the_next_jobs_directories_ready(client, api):
    from uwshelp import create, job_id, run_to_end
    first = create(client, DURATION="0")
    assert run_to_end(client, first) == "COMPLETED"
    assert len(os.listdir(api.files.root / SPARE)) == 2, "one per slot"
    second = create(client, DURATION="0")
    assert run_to_end(client, second) == "COMPLETED"
    made = api.files.job_dir(job_id(second))
    assert {n: v[:2] for n, v in layout(made).items() if n in EXPECTED} == {
        n: v[:2] for n, v in EXPECTED.items()}
    assert client.get(f"{second}/results").status_code == 200
