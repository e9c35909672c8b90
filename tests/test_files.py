"""Job files are served only from inside the job's own directory, even while the
job itself rearranges that directory."""
from __future__ import annotations

import os

import pytest

from uws import files as files_mod
from uws.errors import NotFound
from uws.files import JobFiles

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

    def open_while_swapped(path, flags, *args):
        d.rename(d.with_name("d-real"))
        d.symlink_to(tmp_path / "secret")
        try:
            return real_open(path, flags, *args)
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
