"""Uploads (UWS 1.1 §2.2.3.1.1) as the checksum service uses them, and their limit."""
from __future__ import annotations

import hashlib
import io

import pytest

from conftest import make_config
from uwshelp import files_under, settle

LIMIT = 64 * 1024


@pytest.fixture
def config(tmp_path, db_url):
    return make_config(tmp_path, db_url, max_upload_bytes=LIMIT)


def test_checksum_of_an_uploaded_file_is_its_real_digest(client):
    content = bytes(range(256)) * 100
    r = client.post("/checksum", data={"FILE": (io.BytesIO(content), "data.bin"),
                                       "ALGORITHM": "md5", "PHASE": "RUN"},
                    content_type="multipart/form-data")
    path = r.headers["Location"].replace("http://localhost", "")
    assert b"COMPLETED" in settle(client, path).data
    result = client.get(f"{path}/results/checksum").get_data(as_text=True)
    assert result.split()[0] == hashlib.md5(content).hexdigest()


def test_upload_over_the_limit_answers_413_and_leaves_nothing(client, config):
    r = client.post("/checksum", data={"FILE": (io.BytesIO(b"x" * (LIMIT + 1)), "big.bin")},
                    content_type="multipart/form-data")
    assert r.status_code == 413
    assert b"jobref" not in client.get("/checksum").data
    jobs_dir = config.data_dir / "jobs"
    assert not jobs_dir.exists() or not files_under(jobs_dir)


def test_upload_at_the_limit_is_accepted(client):
    r = client.post("/checksum", data={"FILE": (io.BytesIO(b"x" * LIMIT), "ok.bin")},
                    content_type="multipart/form-data")
    assert r.status_code == 303


def test_body_far_over_the_limit_is_refused_before_it_is_read(client):
    r = client.post("/checksum", data={"FILE": (io.BytesIO(b"x" * (LIMIT + 2 * 1024 * 1024)), "b")},
                    content_type="multipart/form-data")
    assert r.status_code == 413


def test_a_refused_upload_update_leaves_the_original_file(client):
    r = client.post("/checksum", data={"FILE": (io.BytesIO(b"original"), "a.bin")},
                    content_type="multipart/form-data")
    path = r.headers["Location"].replace("http://localhost", "")
    client.post(f"{path}/phase", data={"PHASE": "ABORT"})
    r = client.post(f"{path}/parameters", data={"FILE": (io.BytesIO(b"replaced"), "b.bin")},
                    content_type="multipart/form-data")
    assert r.status_code == 403
    assert client.get(f"{path}/parameters/FILE").data == b"original"


def test_a_put_of_a_files_bytes_over_the_limit_answers_413_and_leaves_the_original(client):
    r = client.post("/checksum", data={"FILE": (io.BytesIO(b"original"), "a.bin")},
                    content_type="multipart/form-data")
    path = r.headers["Location"].replace("http://localhost", "")
    r = client.put(f"{path}/parameters/FILE", data=b"x" * (LIMIT + 1),
                   content_type="application/octet-stream")
    assert r.status_code == 413
    assert client.get(f"{path}/parameters/FILE").data == b"original"
