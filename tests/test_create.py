"""Job creation: ``POST /{jobs}`` (UWS 1.1 §2.2.3.1, DALI 1.1 §3.1)."""
from __future__ import annotations

import datetime as dt
import io
import re
from urllib.parse import urlsplit

import pytest
from lxml import etree

from uwshelp import files_under

NS = {"uws": "http://www.ivoa.net/xml/UWS/v1.0",
      "xsi": "http://www.w3.org/2001/XMLSchema-instance"}
CONTENT = b"\x00\x01binary\r\ncontent\xff\xfe with CRLF\r\n" * 50
STARTED = {"QUEUED", "EXECUTING", "COMPLETED"}


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def create(client, service="sleep", **params) -> str:
    """POST a job; the path of the job URL it redirects to."""
    r = client.post(f"/{service}", data=params)
    assert r.status_code == 303, r.data
    return path_of(r.headers["Location"])


def job_xml(client, path: str):
    r = client.get(path)
    assert r.status_code == 200, r.data
    return etree.fromstring(r.data)


def text(job, tag: str):
    return job.findtext(f"uws:{tag}", namespaces=NS)


def parameters(job) -> dict[str, etree._Element]:
    """The <uws:parameter> elements of a job, by id."""
    return {p.get("id"): p for p in job.findall("uws:parameters/uws:parameter", NS)}


def values(job) -> dict[str, str]:
    return {name: (p.text or "") for name, p in parameters(job).items()}


def job_count(client, service="sleep") -> int:
    r = client.head(f"/{service}")
    return int(r.headers["X-Job-Count"])


def parse_time(text_value: str) -> dt.datetime:
    return dt.datetime.strptime(text_value, "%Y-%m-%dT%H:%M:%S.%fZ")


def upload(**files) -> dict:
    """Multipart file parts: name=(bytes, filename)."""
    return {name: (io.BytesIO(data), filename) for name, (data, filename) in files.items()}


# -- the redirect -----------------------------------------------------------------------

def test_create_answers_303_to_the_absolute_job_url(client):
    r = client.post("/sleep", data={"DURATION": "0"})
    assert r.status_code == 303
    location = r.headers["Location"]
    assert re.fullmatch(r"http://localhost/sleep/[0-9a-f]+", location)


def test_job_url_uses_the_host_and_port_the_client_addressed(client):
    r = client.post("/sleep", data={"DURATION": "0"}, base_url="http://127.0.0.1:8080")
    assert r.status_code == 303
    assert re.fullmatch(r"http://127\.0\.0\.1:8080/sleep/[0-9a-f]+", r.headers["Location"])


def test_job_url_ends_with_the_job_id(client):
    path = create(client)
    job = job_xml(client, path)
    assert path.rsplit("/", 1)[-1] == text(job, "jobId")


def test_each_creation_makes_a_new_job(client):
    assert create(client) != create(client)


def test_create_with_no_parameters_uses_the_defaults(client):
    job = job_xml(client, create(client))
    assert values(job) == {"DURATION": "1", "FAIL": "false", "MESSAGE": ""}


# -- the new job ------------------------------------------------------------------------

def test_new_job_is_pending(client):
    assert text(job_xml(client, create(client)), "phase") == "PENDING"


def test_new_job_has_creation_time_duration_and_destruction(client):
    before = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    job = job_xml(client, create(client))
    after = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    created = parse_time(text(job, "creationTime"))
    assert before - dt.timedelta(seconds=1) <= created <= after
    assert text(job, "executionDuration") == "600"
    assert parse_time(text(job, "destruction")) - created == dt.timedelta(days=7)


def test_new_job_has_not_started_or_ended(client):
    job = job_xml(client, create(client))
    for tag in ("startTime", "endTime"):
        assert job.find(f"uws:{tag}", NS).get("{%s}nil" % NS["xsi"]) == "true"
    assert job.findall("uws:results/uws:result", NS) == []


def test_given_parameters_are_shown_with_their_values_kept_exactly(client):
    job = job_xml(client, create(client, DURATION="0.50", MESSAGE="  Hello, <World> & ü  "))
    shown = values(job)
    assert shown["DURATION"] == "0.50"
    assert shown["MESSAGE"] == "  Hello, <World> & ü  "
    assert shown["FAIL"] == "false"


def test_runid_is_echoed_unchanged(client):
    job = job_xml(client, create(client, RUNID="TAPLINT-001 / ü <x>", DURATION="0"))
    assert text(job, "runId") == "TAPLINT-001 / ü <x>"


@pytest.mark.parametrize("name", ["RUNID", "MESSAGE"])
@pytest.mark.parametrize("value", ["r\x01s", "nul\x00", "esc\x1b[0m"])
def test_a_value_the_job_document_cannot_show_answers_400(client, name, value):
    r = client.post("/sleep", data={name: value})
    assert r.status_code == 400 and name.encode() in r.data
    assert b"jobref" not in client.get("/sleep").data


@pytest.mark.parametrize("value", ["r\x01s", "x" * 1025])
def test_a_runid_change_the_job_document_cannot_show_answers_400(client, value):
    path = create(client, RUNID="before")
    for target in (path, f"{path}/parameters"):
        r = client.post(target, data={"RUNID": value})
        assert r.status_code == 400 and b"RUNID" in r.data, (target, r.data)
    assert text(job_xml(client, path), "runId") == "before"


def test_tabs_and_line_breaks_are_kept(client):
    job = job_xml(client, create(client, RUNID="a\tb", MESSAGE="line 1\nline 2"))
    assert text(job, "runId") == "a\tb"
    assert values(job)["MESSAGE"] == "line 1\nline 2"


def test_runid_is_not_a_service_parameter(client):
    job = job_xml(client, create(client, RUNID="r1"))
    assert "RUNID" not in {name.upper() for name in parameters(job)}


def test_runid_name_is_case_insensitive(client):
    job = job_xml(client, create(client, runId="r2"))
    assert text(job, "runId") == "r2"


@pytest.mark.parametrize("name", ["duration", "Duration", "DuRaTiOn"])
def test_parameter_names_are_case_insensitive(client, name):
    job = job_xml(client, create(client, **{name: "5"}))
    assert values(job)["DURATION"] == "5"
    assert len([p for p in parameters(job) if p.upper() == "DURATION"]) == 1


def test_execution_duration_can_be_given_at_creation(client):
    job = job_xml(client, create(client, EXECUTIONDURATION="30"))
    assert text(job, "executionDuration") == "30"


def test_execution_duration_at_creation_is_clamped_to_the_service_maximum(client):
    job = job_xml(client, create(client, EXECUTIONDURATION="1000000"))
    assert text(job, "executionDuration") == "3600"


def test_destruction_can_be_given_at_creation(client):
    when = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0) \
        + dt.timedelta(days=2)
    job = job_xml(client, create(client, DESTRUCTION=when.strftime("%Y-%m-%dT%H:%M:%SZ")))
    assert text(job, "destruction") == when.strftime("%Y-%m-%dT%H:%M:%S.000Z")


# -- rejected creations ---------------------------------------------------------------------

def assert_400_naming(r, name: str) -> None:
    assert r.status_code == 400, r.data
    assert name.encode() in r.data, r.data


def test_unknown_parameter_answers_400_naming_it(client):
    assert_400_naming(client.post("/sleep", data={"DURATION": "1", "COLOUR": "red"}), "COLOUR")


@pytest.mark.parametrize("service,params,bad", [
    ("sleep", {"DURATION": "abc"}, "DURATION"),
    ("sleep", {"DURATION": "nan"}, "DURATION"),
    ("sleep", {"DURATION": "-1"}, "DURATION"),
    ("sleep", {"FAIL": "maybe"}, "FAIL"),
    ("checksum", {"FILE": "http://example.org/f", "ALGORITHM": "crc32"}, "ALGORITHM"),
    ("checksum", {"FILE": "http://example.org/f", "ALGORITHM": "SHA256"}, "ALGORITHM"),
    ("checksum", {"FILE": "not a url"}, "FILE"),
], ids=["float", "float-nan", "float-below-min", "boolean", "enum", "enum-case", "file"])
def test_bad_value_answers_400_naming_the_parameter(client, service, params, bad):
    assert_400_naming(client.post(f"/{service}", data=params), bad)


def test_missing_required_parameter_answers_400_naming_it(client):
    assert_400_naming(client.post("/checksum", data={"ALGORITHM": "md5"}), "FILE")


def test_phase_abort_at_creation_answers_400(client):
    assert client.post("/sleep", data={"PHASE": "ABORT"}).status_code == 400


def test_json_body_answers_415(client):
    r = client.post("/sleep", json={"DURATION": "1"})
    assert r.status_code == 415


def test_a_compressed_body_answers_415_and_creates_nothing(client):
    r = client.post("/sleep", data=b"DURATION=1", headers={"Content-Encoding": "gzip"},
                    content_type="application/x-www-form-urlencoded")
    assert r.status_code == 415
    assert b"jobref" not in client.get("/sleep").data


def test_an_identity_content_encoding_is_accepted(client):
    r = client.post("/sleep", data=b"DURATION=1", headers={"Content-Encoding": "Identity"},
                    content_type="application/x-www-form-urlencoded")
    assert r.status_code == 303


@pytest.mark.parametrize("content_type, body", [
    ("multipart/form-data", b"DURATION=1"),                       # no boundary
    ("multipart/form-data; boundary=xyz", b"not multipart at all"),
    ("multipart/form-data; boundary=xyz",
     b'--xyz\r\nContent-Disposition: form-data; name="DURATION"\r\n\r\n1\r\n'),  # cut off
])
def test_a_malformed_multipart_body_answers_400_and_creates_nothing(client, content_type, body):
    r = client.post("/sleep", data=body, content_type=content_type)
    assert r.status_code == 400
    assert b"jobref" not in client.get("/sleep").data


@pytest.mark.parametrize("where", ["body", "query", "multipart"])
def test_a_value_that_is_not_utf8_answers_400(client, where):
    if where == "body":
        r = client.post("/sleep", data=b"MESSAGE=%FF",
                        content_type="application/x-www-form-urlencoded")
    elif where == "multipart":
        r = client.post("/sleep", content_type="multipart/form-data; boundary=xyz",
                        data=b'--xyz\r\nContent-Disposition: form-data; name="MESSAGE"\r\n'
                             b'\r\ncaf\xe9\r\n--xyz--\r\n')
    else:
        r = client.post("/sleep?MESSAGE=caf%E9")
    assert r.status_code == 400 and b"UTF-8" in r.data
    assert b"jobref" not in client.get("/sleep").data


def test_a_utf8_value_in_a_multipart_body_is_kept(client):
    path = client.post("/sleep", data={"MESSAGE": "café ✓"},
                       content_type="multipart/form-data").headers["Location"]
    assert client.get(f"{path}/parameters/MESSAGE").data == "café ✓".encode()


def test_a_percent_sign_typed_by_the_user_is_kept(client):
    path = client.post("/sleep", data={"MESSAGE": "100%FF"}).headers["Location"]
    assert client.get(f"{path}/parameters/MESSAGE").data == b"100%FF"


def test_value_given_as_a_file_part_for_a_non_file_parameter_answers_400(client):
    r = client.post("/sleep", data=upload(MESSAGE=(b"hello", "message.txt")),
                    content_type="multipart/form-data")
    assert_400_naming(r, "MESSAGE")


def test_param_reference_to_a_missing_part_answers_400(client):
    r = client.post("/checksum", data={"FILE": "param:nothere"},
                    content_type="multipart/form-data")
    assert_400_naming(r, "FILE")


@pytest.mark.parametrize("data,service", [
    ({"COLOUR": "red"}, "sleep"),
    ({"DURATION": "abc"}, "sleep"),
    ({"PHASE": "ABORT"}, "sleep"),
    ({"PHASE": "RUN", "DURATION": "abc"}, "sleep"),
    ({"ALGORITHM": "md5"}, "checksum"),
    ({"EXECUTIONDURATION": "abc"}, "sleep"),
    ({"DESTRUCTION": "garbage"}, "sleep"),
    ({"DESTRUCTION": "2001-01-01T00:00:00Z", "PHASE": "RUN"}, "sleep"),
], ids=["unknown", "bad-value", "phase-abort", "run-with-bad-value", "missing-required",
        "bad-duration", "bad-destruction", "past-destruction"])
def test_rejected_creation_leaves_no_job_behind(client, data, service):
    create(client, service="sleep")
    before = client.get(f"/{service}").data
    assert client.post(f"/{service}", data=data).status_code == 400
    assert client.get(f"/{service}").data == before


def test_rejected_upload_leaves_no_job_or_file_behind(client, config):
    before = job_count(client, "checksum")
    data = upload(FILE=(CONTENT, "data.bin"))
    data["ALGORITHM"] = "crc32"
    r = client.post("/checksum", data=data, content_type="multipart/form-data")
    assert r.status_code == 400
    assert job_count(client, "checksum") == before
    assert [p for p in files_under(config.data_dir)
            if p.suffix not in (".sqlite3", ".sqlite3-wal", ".sqlite3-shm")] == []


# -- create and run in one request ------------------------------------------------------------

def test_phase_run_in_the_body_starts_the_job_before_the_redirect(client):
    job = job_xml(client, create(client, DURATION="0", PHASE="RUN"))
    assert text(job, "phase") in STARTED


def test_phase_run_in_the_query_starts_the_job_before_the_redirect(client):
    r = client.post("/sleep?PHASE=RUN", data={"DURATION": "0"})
    assert r.status_code == 303
    assert text(job_xml(client, path_of(r.headers["Location"])), "phase") in STARTED


def test_phase_run_at_creation_keeps_the_other_parameters(client):
    job = job_xml(client, create(client, DURATION="0", MESSAGE="hi", PHASE="RUN", RUNID="r"))
    assert values(job)["MESSAGE"] == "hi"
    assert text(job, "runId") == "r"
    assert "PHASE" not in {name.upper() for name in parameters(job)}


def test_phase_run_at_creation_runs_the_job_to_completion(client):
    path = create(client, DURATION="0", PHASE="RUN")
    for _ in range(20):
        job = job_xml(client, f"{path}?WAIT=10")
        if text(job, "phase") not in ("QUEUED", "EXECUTING"):
            break
    assert text(job, "phase") == "COMPLETED"


# -- file parameters ------------------------------------------------------------------------------

def test_uploaded_file_part_is_a_by_reference_parameter(client):
    path = create_multipart(client, upload(FILE=(CONTENT, "data.bin")))
    param = parameters(job_xml(client, path))["FILE"]
    assert param.get("byReference") == "true"
    assert param.text == f"http://localhost{path}/parameters/FILE"


def test_uploaded_file_is_served_back_exactly(client):
    path = create_multipart(client, upload(FILE=(CONTENT, "data.bin")))
    url = parameters(job_xml(client, path))["FILE"].text
    r = client.get(path_of(url))
    assert r.status_code == 200
    assert r.data == CONTENT


def test_param_scheme_names_the_uploaded_part(client):
    data = upload(upl=(CONTENT, "whatever.bin"))
    data["FILE"] = "param:upl"
    path = create_multipart(client, data)
    param = parameters(job_xml(client, path))["FILE"]
    assert param.get("byReference") == "true"
    assert param.text == f"http://localhost{path}/parameters/FILE"
    assert client.get(path_of(param.text)).data == CONTENT


def test_param_scheme_upload_does_not_become_a_parameter_of_its_own(client):
    data = upload(upl=(CONTENT, "whatever.bin"))
    data["FILE"] = "param:upl"
    path = create_multipart(client, data)
    assert set(parameters(job_xml(client, path))) == {"FILE", "ALGORITHM"}


def test_url_value_of_a_file_parameter_is_kept_by_reference(client):
    url = "https://example.org/data/file.fits?x=1&y=2"
    path = create(client, service="checksum", FILE=url)
    param = parameters(job_xml(client, path))["FILE"]
    assert param.get("byReference") == "true"
    assert param.text == url


def test_empty_upload_is_kept(client):
    path = create_multipart(client, upload(FILE=(b"", "empty.bin")))
    url = parameters(job_xml(client, path))["FILE"].text
    r = client.get(path_of(url))
    assert r.status_code == 200
    assert r.data == b""


def create_multipart(client, data) -> str:
    r = client.post("/checksum", data=data, content_type="multipart/form-data")
    assert r.status_code == 303, r.data
    return path_of(r.headers["Location"])
