"""Batch bodies are read as they are parsed, within bounds (uws.web.batchbodies): one row
past ``max_batch_jobs`` ends the reading with 413, so do a row of over ROW_CHARS, more
than MAX_BATCH_VALUES values and more than BLANK_LINES blank CSV lines; at most
``server.batch_parses`` bodies are parsed at once, the rest answered 503 with
Retry-After.  What the parsed rows become is tests/test_batches.py's."""
from __future__ import annotations

import io
import json
import threading

import pytest
from lxml import etree

from uws.web import batchbodies
from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, make_config

#: one database is enough here: this is the parsing of request bodies, before any use
#: case or store (tests/test_batches.py runs the batches themselves on both)
BACKENDS = ("sqlite",)

SERVICES = {"small": {"runner": "uws.demo:sleep", "max_batch_jobs": 3, "parameters": [
    {"name": "DURATION", "type": "float", "default": "1", "min": 0},
    {"name": "MESSAGE", "type": "string", "default": ""},
    {"name": "TAG", "type": "string", "default": "", "multiple": True}]}}
JSON, CSV = "application/json", "text/csv"


@pytest.fixture
def app(tmp_path, db_url):
    cfg = make_config(tmp_path, db_url, services=SERVICES, executor="none", scheduler=False,
                      batch_parses=1)
    application = create_app(cfg)
    application.test_client_class = ValidatingClient
    yield application
    shutdown(application)


class Body(io.RawIOBase):
    """A request body that counts the bytes read from it, gives as many as asked (at most
    ``piece``) a read, and may hold its first read until ``release`` is set (``entered`` says it is
    held there)."""

    def __init__(self, data: bytes, piece: int = 1 << 30, hold: bool = False):
        super().__init__()
        self.data, self.piece, self.read_bytes, self.pos = data, piece, 0, 0
        self.entered, self.release = threading.Event(), threading.Event()
        if not hold:
            self.release.set()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:     # the test client seeks to the end for the length
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.pos = offset + (len(self.data) if whence == io.SEEK_END else 0)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer) -> int:
        self.entered.set()
        assert self.release.wait(30), "the test never released the body"
        chunk = self.data[self.pos:self.pos + min(len(buffer), self.piece)]
        buffer[:len(chunk)] = chunk
        self.pos += len(chunk)
        self.read_bytes += len(chunk)
        return len(chunk)


def post(client, body: bytes | Body, ctype: str = JSON):
    stream = body if isinstance(body, Body) else Body(body)
    return client.post("/small/batches", input_stream=stream, content_type=ctype)


def job_count(client) -> int:
    r = client.head("/small")
    assert r.status_code == 200
    return int(r.headers["X-Job-Count"])


def parameter(client, job_id: str, name: str) -> str:
    r = client.get(f"/small/{job_id}/parameters/{name}")
    assert r.status_code == 200
    return r.get_data(as_text=True)


def rows_json(count: int) -> bytes:
    return json.dumps([{}] * count).encode()


# -- one row past max_batch_jobs -----------------------------------------------------------

def test_a_json_body_of_one_row_past_max_batch_jobs_answers_413_and_creates_no_job(client):
    r = post(client, rows_json(4))
    assert r.status_code == 413
    assert r.get_data(as_text=True).startswith("a batch of 'small' has at most 3 jobs")
    assert job_count(client) == 0


def test_a_csv_body_of_one_row_past_max_batch_jobs_answers_413_and_creates_no_job(client):
    r = post(client, b"DURATION\n1\n2\n3\n4\n", CSV)
    assert r.status_code == 413
    assert r.get_data(as_text=True).startswith("a batch of 'small' has at most 3 jobs")
    assert job_count(client) == 0


def test_the_object_form_of_one_row_past_max_batch_jobs_answers_413(client):
    r = post(client, json.dumps({"runId": "r", "jobs": [{}] * 4}).encode())
    assert r.status_code == 413
    assert job_count(client) == 0


def test_json_after_the_row_past_the_limit_is_never_parsed(client):
    # malformed after row 4: a parser that read it would answer 400
    r = post(client, b'[{}, {}, {}, {"DURATION": 1}, {"DURATION": ] nonsense')
    assert r.status_code == 413, r.data


def test_csv_after_the_row_past_the_limit_is_never_parsed(client):
    # row 5 has more values than columns, and the end, past what is decoded ahead, is
    # not UTF-8: either would be a 400
    r = post(client, b"DURATION\n1\n2\n3\n4\n1,2,3\n" + b"5\n" * 50_000 + b"\xff\xfe\n",
             CSV)
    assert r.status_code == 413, r.data


def test_a_large_body_is_read_only_up_to_the_row_past_the_limit(client):
    body = Body(rows_json(1_000_000))
    r = post(client, body)
    assert r.status_code == 413
    assert body.read_bytes < 1 << 18 < len(body.data)


def test_a_body_malformed_at_its_start_is_answered_400_without_reading_the_rest(client):
    body = Body(b'[{"DURATION" 1}, ' + b"{}, " * 1_000_000 + b"{}]")
    r = post(client, body)
    assert r.status_code == 400
    assert r.get_data(as_text=True).startswith("the body is not JSON: Expecting ':' delimiter")
    assert body.read_bytes < 1 << 18 < len(body.data)


# -- what is parsed piece by piece is what was sent ------------------------------------------

@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
def test_json_read_a_byte_at_a_time_gives_the_rows_sent(client, encoding):
    rows = [{"DURATION": 1.25e1, "MESSAGE": "h\u00e9llo \u263a \"q\""},
            {"TAG": ["a", "b"], "DURATION": 12345}]
    r = post(client, Body(json.dumps(rows).encode(encoding), piece=1))
    assert r.status_code == 303, r.data
    batch = client.get(r.headers["Location"].replace("http://localhost", ""))
    assert batch.status_code == 200
    ids = [el.get("id") for el in etree.fromstring(batch.data).iterfind(".//{*}job")]
    assert [parameter(client, i, "DURATION") for i in ids] == ["12.5", "12345"]
    assert parameter(client, ids[0], "MESSAGE") == "h\u00e9llo \u263a \"q\""
    assert parameter(client, ids[1], "TAG") == "a\nb"


@pytest.mark.parametrize("body, ctype", [(b"[{}, {}] x", JSON), (b"", JSON), (b"[{}, ]", JSON),
                                         (b'{"jobs": [{}], "jobs": 5}', JSON),
                                         (b"[{}, {\"DURATION\": 1.}]", JSON)])
def test_json_malformed_anywhere_before_the_limit_answers_400(client, body, ctype):
    r = post(client, Body(body, piece=1), ctype)
    assert r.status_code == 400, r.data
    assert job_count(client) == 0


# -- the other bounds ------------------------------------------------------------------------

def test_a_json_row_of_more_than_row_chars_answers_413_naming_it(client):
    r = post(client, json.dumps([{}, {"MESSAGE": "x" * batchbodies.ROW_CHARS}]).encode())
    assert r.status_code == 413
    assert r.get_data(as_text=True).startswith("row 2: more than 1048576 characters")


def test_a_csv_row_of_more_than_row_chars_answers_413_naming_it(client):
    r = post(client, b"MESSAGE\nshort\n" + b"x" * (batchbodies.ROW_CHARS + 1) + b"\n", CSV)
    assert r.status_code == 413
    assert r.get_data(as_text=True).startswith("row 2: more than 1048576 characters")


def test_more_values_than_max_batch_values_answer_413(client, monkeypatch):
    monkeypatch.setattr(batchbodies, "MAX_BATCH_VALUES", 5)
    r = post(client, json.dumps([{"TAG": ["a", "b", "c"]}, {"TAG": ["d", "e", "f"]}]).encode())
    assert r.status_code == 413
    assert r.get_data(as_text=True) .startswith("a batch body has at most 5 parameter values")


def test_more_blank_csv_lines_than_blank_lines_answer_413(client, monkeypatch):
    monkeypatch.setattr(batchbodies, "BLANK_LINES", 10)
    r = post(client, b"DURATION\n1\n" + b"\n" * 11 + b"2\n", CSV)
    assert r.status_code == 413
    assert r.get_data(as_text=True).startswith("a batch CSV has at most 10 blank lines")


def test_blank_csv_lines_within_the_bound_are_skipped(client, monkeypatch):
    monkeypatch.setattr(batchbodies, "BLANK_LINES", 10)
    r = post(client, b"\nDURATION\n\n1\n" + b"\n" * 8 + b"2\n", CSV)
    assert r.status_code == 303, r.data
    assert job_count(client) == 2


# -- parses at once --------------------------------------------------------------------------

def test_a_parse_beyond_batch_parses_answers_503_with_retry_after(app, monkeypatch):
    monkeypatch.setattr(batchbodies, "PARSE_WAIT", 0.1)
    held = Body(rows_json(2), hold=True)
    answers = []
    first = threading.Thread(target=lambda: answers.append(post(app.test_client(), held)))
    first.start()
    try:
        assert held.entered.wait(30)        # the one slot is taken, its body being read
        r = post(app.test_client(), rows_json(1))
        assert r.status_code == 503
        assert r.headers["Retry-After"] == "1"
        assert b"too many batch bodies" in r.data
    finally:
        held.release.set()
        first.join(30)
    assert [a.status_code for a in answers] == [303]


def test_a_parse_slot_is_free_again_after_a_parse_ends_in_an_error(app, monkeypatch):
    monkeypatch.setattr(batchbodies, "PARSE_WAIT", 0.1)
    client = app.test_client()
    assert post(client, b"[nonsense").status_code == 400
    assert post(client, rows_json(4)).status_code == 413
    assert post(client, rows_json(1)).status_code == 303
