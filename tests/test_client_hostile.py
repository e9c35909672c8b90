"""The Python client (uws.client) and ``uws jobs`` against a hostile server: compressed
answers that would swell without end (gzip bombs), result ids that make no file name,
numbers that are not numbers. Every answer comes from tests/minimal_uws.py's Scripted, a
server of one behaviour; no database is used."""
from __future__ import annotations

import json
import zlib

import pytest
from click.testing import CliRunner

from minimal_uws import Scripted, job_document
from uws.client import Client, ProtocolError
from uws.client.api import file_name
from uws.client.cli import jobs
from uws.client.documents import Result, parse_job
from uws.client.http import MAX_DOCUMENT

SWELLS_TO = 64 << 20        # what the bombs expand to: twice the client's document limit
OK = 0
MAX_NAME_BYTES = 200      # what README.rst promises of a result's file name


def gzip(chunks) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join([*(packer.compress(c) for c in chunks), packer.flush()])


def swelling(start: bytes = b"") -> bytes:
    """``start`` and SWELLS_TO spaces, gzipped twice (Content-Encoding: gzip, gzip): a few
    hundred bytes on the wire."""
    spaces = [b" " * (1 << 20)] * (SWELLS_TO >> 20)     # one MiB, referred to 64 times
    return gzip([gzip([start, *spaces])])


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return swelling()


def _result_at(path: str, body: bytes, encoding: str = "gzip, gzip"):
    """A COMPLETED job J with one result ``r`` at ``/files/r``: ``body`` sent with
    ``encoding``, and ranges of it (of the bytes as sent) when asked for."""
    def answer(request):
        if not request.path.startswith("/files/"):
            return 200, {}, job_document("J", "COMPLETED", {"r": path})
        headers = {"Content-Type": "application/fits", "Content-Encoding": encoding}
        asked = request.headers.get("Range", "")
        if asked.startswith("bytes="):
            start = int(asked[6:].rstrip("-"))
            headers["Content-Range"] = f"bytes {start}-{len(body) - 1}/{len(body)}"
            return 206, headers, body[start:]
        return 200, headers, body
    return answer


# -- compressed answers --------------------------------------------------------------------------

def test_a_compressed_result_is_saved_as_sent_not_expanded(bomb, tmp_path):
    with Scripted(_result_at("/files/r", bomb)) as server:
        client = Client(server.url)
        saved = client.download(client.result("J", "r"), tmp_path / "r.fits")
    assert saved.read_bytes() == bomb       # a few hundred bytes, not 64 MiB


def test_a_result_download_asks_for_no_content_coding(bomb, tmp_path):
    with Scripted(_result_at("/files/r", bomb)) as server:
        client = Client(server.url)
        client.download(client.result("J", "r"), tmp_path / "r.fits")
    download = [r for r in server.requests if r["path"] == "/files/r"]
    assert [r["headers"].get("Accept-Encoding") for r in download] == ["identity"]


def test_a_compressed_result_resumes_from_the_bytes_as_sent(tmp_path):
    sent = gzip([bytes(range(256)) * 4096])
    (tmp_path / "r.fits").write_bytes(sent[:1000])
    with Scripted(_result_at("/files/r", sent, encoding="gzip")) as server:
        client = Client(server.url)
        saved = client.download(client.result("J", "r"), tmp_path / "r.fits", resume=True)
    assert saved.read_bytes() == sent


def test_a_document_that_swells_past_the_limit_is_refused():
    document = swelling(b'<?xml version="1.0"?><job xmlns="http://www.ivoa.net/xml/UWS/v1.0">')
    with Scripted(lambda r: (200, {"Content-Encoding": "gzip, gzip"}, document)) as server:
        with pytest.raises(ProtocolError, match=f"longer than {MAX_DOCUMENT} bytes"):
            Client(server.url).get("J")


def test_uws_jobs_saves_a_compressed_result_as_sent(bomb, tmp_path):
    with Scripted(_result_at("/files/r", bomb)) as server:
        result = CliRunner().invoke(jobs, ["--url", server.url, "--json", "results", "J", "-o",
                                           str(tmp_path)])
    assert result.exit_code == OK, result.output
    assert [s["bytes"] for s in json.loads(result.stdout)] == [len(bomb)]


# -- result ids as file names --------------------------------------------------------------------

def _results_named(*ids: str):
    """A COMPLETED job J whose results have these ids, each at /files/<n>."""
    def answer(request):
        if request.path.startswith("/files/"):
            return 200, {}, f"result {request.path[7:]}"
        return 200, {}, job_document("J", "COMPLETED", {i: f"/files/{n}" for n, i in enumerate(ids)})
    return answer


def test_a_300_character_result_id_is_saved_under_a_shortened_name_and_the_output_says_so(tmp_path):
    long_id = "x" * 296 + ".vot"
    with Scripted(_results_named(long_id)) as server:
        result = CliRunner().invoke(jobs, ["--url", server.url, "results", "J", "-o", str(tmp_path)])
    assert result.exit_code == OK, result.output
    [saved] = tmp_path.iterdir()
    assert saved.read_text() == "result 0"
    assert len(saved.name.encode()) <= MAX_NAME_BYTES and saved.name.endswith(".vot")
    assert result.stdout.split() == [str(saved)]
    assert f"saved as {saved.name}: its id shortened to a safe file name" in result.stderr


def test_json_output_says_which_results_were_renamed(tmp_path):
    ids = ["x" * 300, "a/b", "plain"]
    with Scripted(_results_named(*ids)) as server:
        result = CliRunner().invoke(jobs, ["--url", server.url, "--json", "results", "J", "-o",
                                           str(tmp_path)])
    assert result.exit_code == OK, result.output
    assert [s["renamed"] for s in json.loads(result.stdout)] == ["shortened", "changed", None]


def test_one_long_result_id_into_a_directory_is_shortened(tmp_path):
    long_id = "y" * 300
    with Scripted(_results_named(long_id)) as server:
        result = CliRunner().invoke(jobs, ["--url", server.url, "results", "J", long_id, "-o",
                                           str(tmp_path)])
    assert result.exit_code == OK, result.output
    [saved] = tmp_path.iterdir()
    assert saved.read_text() == "result 0" and "shortened" in result.stderr


def test_long_ids_with_the_same_start_get_names_of_their_own(tmp_path):
    ids = ["z" * 300 + "1", "z" * 300 + "2"]
    with Scripted(_results_named(*ids)) as server:
        saved = Client(server.url).download_all("J", tmp_path)
    assert [p.read_text() for p in saved] == ["result 0", "result 1"]
    assert saved[0].name != saved[1].name


@pytest.mark.parametrize("result_id", ["é" * 300, "☃" * 300, "x" * 5000, "a/" * 200])
def test_a_shortened_name_fits_the_bound_in_bytes(result_id):
    assert 0 < len(file_name(Result(result_id, None)).encode()) <= MAX_NAME_BYTES


@pytest.mark.parametrize("result_id", ["../../etc/passwd", "..", ".hidden", "a\\b", "tab\there",
                                       "nul\x00", "esc\x1b[2J", "/abs", "." * 300 + "/x"])
def test_a_file_name_has_no_directory_dot_start_or_control(result_id):
    name = file_name(Result(result_id, None))
    assert name and not name.startswith(".") and not any(c in name for c in "/\\\t\x00\x1b")


# -- numbers that are not ------------------------------------------------------------------------

def _job_with(result_attributes: str = "", info: str = "") -> bytes:
    return (f'<job xmlns="http://www.ivoa.net/xml/UWS/v1.0" xmlns:xl="http://www.w3.org/1999/xlink">'
            f"<jobId>J</jobId><phase>COMPLETED</phase><results><result id='r' xl:href='/r' "
            f"{result_attributes}/></results><jobInfo>{info}</jobInfo></job>").encode()


@pytest.mark.parametrize("size", ["²", "9" * 5000, "-1", "1.5", "null"])
def test_a_result_size_that_is_not_a_count_is_missing(size):
    job = parse_job(_job_with(f"size='{size}'"), "http://example.org/jobs/J")
    assert job.results[0].size is None


@pytest.mark.parametrize("percent", ["nan", "inf", "-inf", "1e999"])
def test_a_percent_that_is_not_finite_is_no_progress(percent):
    job = parse_job(_job_with(info=f"<progress percent='{percent}'/>"), "http://example.org/jobs/J")
    assert job.progress is None


def test_uws_jobs_lists_results_whose_size_is_not_a_count():
    document = _job_with("size='²'")
    with Scripted(lambda r: (200, {}, document)) as server:
        result = CliRunner().invoke(jobs, ["--url", server.url, "--json", "results", "J"])
    assert result.exit_code == OK, result.output
    assert [r["size"] for r in json.loads(result.stdout)] == [None]


def test_a_content_range_of_endless_digits_is_a_protocol_error(tmp_path):
    def answer(request):
        if not request.path.startswith("/files/"):
            return 200, {}, job_document("J", "COMPLETED", {"r": "/files/r"})
        return 206, {"Content-Range": f"bytes {'9' * 5000}-1/2"}, "x"
    (tmp_path / "r").write_bytes(b"start")
    with Scripted(answer) as server:
        client = Client(server.url)
        with pytest.raises(ProtocolError, match="Content-Range"):
            client.download(client.result("J", "r"), tmp_path / "r", resume=True)
