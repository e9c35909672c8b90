"""Job files are served only from inside the job's own directory, even while the
job itself rearranges that directory."""
from __future__ import annotations

import os

import pytest

from uws.domain.errors import NotFound
from uws.execution import files as files_mod
from uws.execution.files import JobFiles

JOB = "ab" * 16


@pytest.fixture
def files(tmp_path):
    jf = JobFiles(tmp_path / "data", max_upload_bytes=1000)
    (jf.results_dir(JOB) / "d").mkdir(parents=True)
    (jf.results_dir(JOB) / "d" / "out.txt").write_bytes(b"the job's own bytes")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "out.txt").write_bytes(b"a server file")
    return jf


def test_a_result_file_is_opened_with_its_size(files):
    f, st = files.open_result(JOB, "d/out.txt")
    with f:
        assert f.read() == b"the job's own bytes" and st.st_size == 19


def test_a_directory_swapped_for_a_symlink_during_the_open_is_refused(files, tmp_path,
                                                                      monkeypatch):
    """The race a job could win: the path is checked, then at the moment of the
    open a directory on it points elsewhere, then it is put back."""
    d = files.results_dir(JOB) / "d"
    real_open = os.open

    def open_while_swapped(path, flags, *args, **kwargs):
        d.rename(d.with_name("d-real"))
        d.symlink_to(tmp_path / "secret")
        try:
            return real_open(path, flags, *args, **kwargs)
        finally:
            d.unlink()
            d.with_name("d-real").rename(d)

    monkeypatch.setattr(files_mod.os, "open", open_while_swapped)
    with pytest.raises(NotFound):
        files.open_result(JOB, "d/out.txt")


def test_a_symlink_out_of_the_job_is_refused(files, tmp_path):
    os.symlink(tmp_path / "secret" / "out.txt", files.results_dir(JOB) / "link.txt")
    with pytest.raises(NotFound):
        files.open_result(JOB, "link.txt")


def test_a_fifo_is_refused_at_once(files):
    os.mkfifo(files.results_dir(JOB) / "pipe")
    with pytest.raises(NotFound):
        files.open_result(JOB, "pipe")


def test_a_file_gone_before_the_open_is_not_found(files):
    with pytest.raises(NotFound):
        files.open_result(JOB, "d/never.txt")


def test_a_results_directory_swapped_for_a_symlink_is_refused(files, tmp_path):
    """A job owns its directory: its results directory made a link to any other
    directory of the server's user must not serve what lies there."""
    results = files.results_dir(JOB)
    results.rename(results.with_name("results-real"))
    results.symlink_to(tmp_path / "secret")
    with pytest.raises(NotFound):
        files.open_result(JOB, "out.txt")


def test_a_job_directory_swapped_for_a_symlink_is_refused(files, tmp_path):
    job_dir = files.job_dir(JOB)
    job_dir.rename(job_dir.with_name("elsewhere"))
    (tmp_path / "secret" / "results" / "d").mkdir(parents=True)
    (tmp_path / "secret" / "results" / "d" / "out.txt").write_bytes(b"a server file")
    job_dir.symlink_to(tmp_path / "secret")
    with pytest.raises(NotFound):
        files.open_result(JOB, "d/out.txt")


def test_a_hard_link_to_a_file_outside_is_refused(files, tmp_path):
    os.link(tmp_path / "secret" / "out.txt", files.results_dir(JOB) / "linked.txt")
    with pytest.raises(NotFound):
        files.open_result(JOB, "linked.txt")


@pytest.mark.parametrize("name", ["../d/out.txt", "d/../d/out.txt", "./d/out.txt", "/d/out.txt",
                                  "d//out.txt", ".hidden"])
def test_a_name_that_is_not_plain_is_not_found(files, name):
    with pytest.raises(NotFound):
        files.open_result(JOB, name)


def test_a_data_directory_reached_through_a_symlink_still_serves(tmp_path):
    """The administrator's links above the jobs' directories are followed."""
    (tmp_path / "disk").mkdir()
    (tmp_path / "data").symlink_to(tmp_path / "disk")
    jf = JobFiles(tmp_path / "data", max_upload_bytes=1000)
    jf.results_dir(JOB).mkdir(parents=True)
    (jf.results_dir(JOB) / "out.txt").write_bytes(b"bytes")
    f, st = jf.open_result(JOB, "out.txt")
    with f:
        assert f.read() == b"bytes" and st.st_size == 5


def test_an_upload_is_opened_from_the_jobs_uploads(files):
    (files.job_dir(JOB) / "uploads").mkdir()
    (files.job_dir(JOB) / "uploads" / "table").write_bytes(b"uploaded")
    f, st = files.open_upload(JOB, "table")
    with f:
        assert f.read() == b"uploaded" and st.st_size == 8


# -- a failed attempt's results, set aside ----------------------------------------------

def test_set_aside_results_leave_the_job_and_count_in_no_usage(files):
    assert files.usage(JOB).entries > 0
    aside = files.set_aside_results(JOB)
    assert not files.results_dir(JOB).exists()
    after = files.usage(JOB)
    assert (after.written, after.entries) == (0, 0)
    aside.remove()
    assert os.listdir(files.root / ".discarded") == []


def test_set_aside_results_can_be_put_back(files):
    files.set_aside_results(JOB).restore()
    assert (files.results_dir(JOB) / "d" / "out.txt").read_bytes() == b"the job's own bytes"


def test_results_a_job_made_a_link_are_set_aside_without_following_it(files, tmp_path):
    results = files.results_dir(JOB)
    files.remove_results(JOB)
    results.symlink_to(tmp_path / "secret")
    files.set_aside_results(JOB).remove()
    assert not os.path.lexists(results)
    assert (tmp_path / "secret" / "out.txt").read_bytes() == b"a server file"


def test_results_a_job_made_a_link_are_removed_without_following_it(files, tmp_path):
    """As archiving does: a link left in place of results/ kept a job from ever
    being archived (rmtree refuses links), and its target is not the job's."""
    results = files.results_dir(JOB)
    files.remove_results(JOB)
    results.symlink_to(tmp_path / "secret")
    assert files.remove_results(JOB)
    assert not os.path.lexists(results)
    assert (tmp_path / "secret" / "out.txt").read_bytes() == b"a server file"


def test_results_a_job_made_a_file_are_set_aside(files):
    files.remove_results(JOB)
    files.results_dir(JOB).write_bytes(b"not a folder")
    files.set_aside_results(JOB).remove()
    assert not os.path.lexists(files.results_dir(JOB))


def test_no_results_set_aside_is_nothing_to_remove(files):
    files.remove_results(JOB)
    aside = files.set_aside_results(JOB)
    aside.remove()
    aside.restore()
    assert not files.results_dir(JOB).exists()


def test_nothing_is_set_aside_for_a_job_that_has_no_results_yet(files):
    files.remove_results(JOB)
    files.set_aside_results(JOB).remove()
    files.results_dir(JOB).mkdir()
    files.set_aside_results(JOB).remove()
    assert files.results_dir(JOB).is_dir()
    assert not (files.root / ".discarded").exists()


def test_results_set_aside_and_left_behind_are_purged(files):
    files.set_aside_results(JOB)        # its process died before removing them
    files.purge_discarded()
    assert os.listdir(files.root / ".discarded") == []
