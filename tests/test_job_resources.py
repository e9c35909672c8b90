"""A job and its child resources (UWS 1.1 §2.2.1, §2.2.2.2–§2.2.2.5)."""
from __future__ import annotations

import re

import pytest
from lxml import etree

from uwshelp import HREF, NIL, NS, create, job_xml, path_of, run_to_end, text

#: one database is enough here (job processes' limits; the store's side is in test_phase_changes.py;
#: tests/README.rst)
BACKENDS = ("sqlite",)

UWS_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
UNKNOWN_ID = "0123456789abcdef0123456789abcdef"


def local_names(el) -> list[str]:
    return [etree.QName(child).localname for child in el]


@pytest.fixture
def pending(client) -> str:
    return create(client, DURATION="0", RUNID="run-1")


@pytest.fixture
def completed(client):
    """A COMPLETED sleep job: (path, its XML)."""
    path = create(client, DURATION="0", MESSAGE="hello result")
    assert run_to_end(client, path) == "COMPLETED"
    return path, job_xml(client, path)


@pytest.fixture
def failed(client):
    """An ERROR sleep job: (path, its XML)."""
    path = create(client, DURATION="0", FAIL="true", MESSAGE="boom")
    run_to_end(client, path)
    return path, job_xml(client, path)


# -- the job document -------------------------------------------------------------------

def test_job_is_served_as_xml(client, pending):
    r = client.get(pending)
    assert r.status_code == 200
    assert r.mimetype in ("text/xml", "application/xml")


def test_job_declares_version_1_1(client, pending):
    job = job_xml(client, pending)
    assert job.tag == "{%s}job" % NS["uws"]
    assert job.get("version") == "1.1"


def test_job_root_declares_the_uws_xlink_and_xsi_prefixes(client, pending):
    job = job_xml(client, pending)
    assert job.nsmap.get("uws") == NS["uws"]
    assert job.nsmap.get("xlink") == NS["xlink"]
    assert job.nsmap.get("xsi") == NS["xsi"]


def required_children(job) -> list[str]:
    """The job's children before the optional tail (errorSummary, jobInfo), checked
    to be only that tail in that order."""
    names = local_names(job)
    head, tail = names[:names.index("results") + 1], names[names.index("results") + 1:]
    assert tail in ([], ["errorSummary"], ["jobInfo"], ["errorSummary", "jobInfo"]), names
    return head


def test_pending_job_children_come_in_schema_order(client, pending):
    assert required_children(job_xml(client, pending)) == [
        "jobId", "runId", "ownerId", "phase", "quote", "creationTime", "startTime",
        "endTime", "executionDuration", "destruction", "parameters", "results"]


def test_completed_job_children_come_in_schema_order(client):
    path = create(client, DURATION="0")
    run_to_end(client, path)
    assert required_children(job_xml(client, path)) == [
        "jobId", "ownerId", "phase", "quote", "creationTime", "startTime",
        "endTime", "executionDuration", "destruction", "parameters", "results"]


def test_failed_job_children_end_with_the_error_summary(client, failed):
    _, job = failed
    names = local_names(job)
    assert names[names.index("results") + 1] == "errorSummary"


def test_job_shows_its_id_and_nil_owner(client, pending):
    job = job_xml(client, pending)
    assert text(job, "jobId") == pending.rsplit("/", 1)[-1]
    assert job.find("uws:ownerId", NS).get(NIL) == "true"


def test_pending_job_has_nil_start_and_end_times(client, pending):
    job = job_xml(client, pending)
    assert job.find("uws:startTime", NS).get(NIL) == "true"
    assert job.find("uws:endTime", NS).get(NIL) == "true"


def test_job_times_are_utc_with_z_and_milliseconds(client, completed):
    path, job = completed
    for tag in ("creationTime", "startTime", "endTime", "destruction"):
        value = text(job, tag)
        assert UWS_TIME.fullmatch(value), (tag, value)
        assert "+00:00" not in value


def test_completed_job_times_are_in_order(client, completed):
    _, job = completed
    times = [text(job, tag) for tag in ("creationTime", "startTime", "endTime")]
    assert times == sorted(times)


def test_empty_parameters_and_results_are_still_emitted(client, pending):
    job = job_xml(client, pending)
    assert job.find("uws:parameters", NS) is not None
    assert job.find("uws:results", NS) is not None
    assert job.findall("uws:results/uws:result", NS) == []


# -- atomic children: text/plain, agreeing with the XML ---------------------------------------

def get_text(client, url: str) -> str:
    r = client.get(url)
    assert r.status_code == 200, r.data
    assert r.mimetype == "text/plain"
    return r.get_data(as_text=True)


@pytest.mark.parametrize("child,tag", [
    ("phase", "phase"),
    ("executionduration", "executionDuration"),
    ("destruction", "destruction"),
])
def test_atomic_child_is_text_agreeing_with_the_job(client, pending, child, tag):
    value = get_text(client, f"{pending}/{child}")
    assert value.strip() == value
    assert value == text(job_xml(client, pending), tag)


def test_destruction_text_is_utc_with_z(client, pending):
    assert UWS_TIME.fullmatch(get_text(client, f"{pending}/destruction"))


def test_quote_is_empty_text_when_the_job_has_none(client, pending):
    assert job_xml(client, pending).find("uws:quote", NS).get(NIL) == "true"
    assert get_text(client, f"{pending}/quote") == ""


def test_owner_is_empty_text_for_an_anonymous_job(client, pending):
    assert get_text(client, f"{pending}/owner") == ""


def test_error_is_empty_for_a_job_without_error(client, pending):
    r = client.get(f"{pending}/error")
    assert r.status_code == 200
    assert r.data.strip() == b""


def test_phase_text_follows_the_job(client, completed):
    path, _ = completed
    assert get_text(client, f"{path}/phase") == "COMPLETED"


# -- parameters -------------------------------------------------------------------------------

def test_parameters_is_the_parameter_list_of_the_job(client, pending):
    r = client.get(f"{pending}/parameters")
    assert r.status_code == 200
    assert r.mimetype in ("text/xml", "application/xml")
    doc = etree.fromstring(r.data)
    assert doc.tag == "{%s}parameters" % NS["uws"]
    shown = {p.get("id"): p.text or "" for p in doc.findall("uws:parameter", NS)}
    in_job = {p.get("id"): p.text or "" for p in
              job_xml(client, pending).findall("uws:parameters/uws:parameter", NS)}
    assert shown == in_job == {"DURATION": "0", "FAIL": "false", "MESSAGE": ""}


def test_one_parameter_is_its_value_as_text(client, pending):
    assert get_text(client, f"{pending}/parameters/DURATION") == "0"
    assert get_text(client, f"{pending}/parameters/FAIL") == "false"


def test_unknown_parameter_resource_answers_404(client, pending):
    assert client.get(f"{pending}/parameters/NOSUCH").status_code == 404


# -- results ----------------------------------------------------------------------------------

def test_results_is_the_result_list_of_the_job(client, completed):
    path, job = completed
    r = client.get(f"{path}/results")
    assert r.status_code == 200
    assert r.mimetype in ("text/xml", "application/xml")
    doc = etree.fromstring(r.data)
    assert doc.tag == "{%s}results" % NS["uws"]
    assert [(x.get("id"), x.get(HREF)) for x in doc.findall("uws:result", NS)] == \
        [(x.get("id"), x.get(HREF)) for x in job.findall("uws:results/uws:result", NS)]


def test_pending_job_has_an_empty_result_list(client, pending):
    doc = etree.fromstring(client.get(f"{pending}/results").data)
    assert doc.findall("uws:result", NS) == []


def test_completed_job_lists_its_result_with_an_absolute_href(client, completed):
    path, job = completed
    [result] = job.findall("uws:results/uws:result", NS)
    assert result.get("id") == "result"
    assert result.get(HREF) == f"http://localhost{path}/results/result"


def test_result_download_has_the_declared_type_and_size(client, completed):
    path, job = completed
    result = job.find("uws:results/uws:result", NS)
    r = client.get(path_of(result.get(HREF)))
    assert r.status_code == 200
    assert r.mimetype == result.get("mime-type") == "text/plain"
    assert int(r.headers["Content-Length"]) == len(r.data) == int(result.get("size"))
    assert b"hello result" in r.data


def test_result_supports_range_requests(client, completed):
    path, job = completed
    url = path_of(job.find("uws:results/uws:result", NS).get(HREF))
    whole = client.get(url).data
    r = client.get(url, headers={"Range": "bytes=2-6"})
    assert r.status_code == 206
    assert r.data == whole[2:7]
    assert r.headers["Content-Range"] == f"bytes 2-6/{len(whole)}"


def _result_url(job) -> str:
    return path_of(job.find("uws:results/uws:result", NS).get(HREF))


@pytest.mark.parametrize("header", ["bytes=0-1,5-6", "items=0-5", "bytes=0-0,0-0,0-0",
                                    "bytes=0-1,", ",".join(["bytes=0-0"] + ["1-1"] * 5000)])
def test_ranges_we_do_not_serve_are_ignored_with_the_whole_file(client, completed, header):
    """RFC 9110 §14.2: another unit MUST be ignored; several ranges may be."""
    url = _result_url(completed[1])
    r = client.get(url, headers={"Range": header})
    assert r.status_code == 200 and r.data == client.get(url).data


def test_a_suffix_range_longer_than_the_result_is_the_whole_result(client, completed):
    url = _result_url(completed[1])
    whole = client.get(url).data
    r = client.get(url, headers={"Range": f"bytes=-{len(whole) + 1000}"})
    assert r.status_code == 206 and r.data == whole
    assert r.headers["Content-Range"] == f"bytes 0-{len(whole) - 1}/{len(whole)}"


def test_an_unsatisfiable_range_answers_416_with_the_length(client, completed):
    url = _result_url(completed[1])
    size = len(client.get(url).data)
    r = client.get(url, headers={"Range": f"bytes={size + 10}-"})
    assert r.status_code == 416
    assert r.headers["Content-Range"] == f"bytes */{size}"


def test_a_result_revalidates_with_its_etag(client, completed):
    url = _result_url(completed[1])
    etag = client.get(url).headers["ETag"]
    assert client.get(url, headers={"If-None-Match": etag}).status_code == 304


def test_a_result_revalidates_with_its_time(client, completed):
    url = _result_url(completed[1])
    stamp = client.get(url).headers["Last-Modified"]
    assert client.get(url, headers={"If-Modified-Since": stamp}).status_code == 304
    earlier = "Mon, 01 Jan 2001 00:00:00 GMT"
    assert client.get(url, headers={"If-Modified-Since": earlier}).status_code == 200


@pytest.mark.parametrize("range_", [None, "bytes=0-1"])
def test_a_result_whose_etag_does_not_match_if_match_answers_412_without_it(
        client, completed, range_):
    """RFC 9110 §13.1.1: before any range; the file is not sent."""
    url = _result_url(completed[1])
    whole = client.get(url).data
    headers = {"If-Match": '"not-its-etag"', **({"Range": range_} if range_ else {})}
    r = client.get(url, headers=headers)
    assert r.status_code == 412
    assert whole not in r.data


@pytest.mark.parametrize("tag", ["its own", "*"])
def test_a_result_matching_if_match_is_sent(client, completed, tag):
    url = _result_url(completed[1])
    first = client.get(url)
    r = client.get(url, headers={"If-Match": first.headers["ETag"] if tag == "its own" else "*"})
    assert r.status_code == 200 and r.data == first.data


def test_a_result_changed_since_if_unmodified_since_answers_412(client, completed):
    url = _result_url(completed[1])
    r = client.get(url, headers={"If-Unmodified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"})
    assert r.status_code == 412
    later = client.get(url, headers={"If-Unmodified-Since": "Fri, 01 Jan 2100 00:00:00 GMT"})
    assert later.status_code == 200


def test_a_range_of_a_result_not_modified_answers_304(client, completed):
    url = _result_url(completed[1])
    etag = client.get(url).headers["ETag"]
    r = client.get(url, headers={"If-None-Match": etag, "Range": "bytes=0-1"})
    assert r.status_code == 304 and r.data == b""
    assert r.headers["ETag"] == etag


def test_unknown_result_answers_404(client, completed):
    path, _ = completed
    assert client.get(f"{path}/results/nosuch").status_code == 404


# -- a failed job -----------------------------------------------------------------------------

def test_failed_job_still_answers_200_with_phase_error(client, failed):
    path, job = failed
    assert client.get(path).status_code == 200
    assert text(job, "phase") == "ERROR"
    assert get_text(client, f"{path}/phase") == "ERROR"


def test_failed_job_has_a_fatal_error_summary_with_the_message(client, failed):
    _, job = failed
    summary = job.find("uws:errorSummary", NS)
    assert summary is not None
    assert summary.get("type") == "fatal"
    assert text(summary, "message") == "boom"


def test_failed_job_has_an_end_time(client, failed):
    _, job = failed
    assert UWS_TIME.fullmatch(text(job, "endTime"))


def test_failed_job_error_resource_has_detail(client, failed):
    path, job = failed
    assert job.find("uws:errorSummary", NS).get("hasDetail") == "true"
    r = client.get(f"{path}/error")
    assert r.status_code == 200
    assert "boom" in r.get_data(as_text=True)


# -- what does not exist ----------------------------------------------------------------------

JOB_CHILDREN = ["", "/phase", "/executionduration", "/destruction", "/quote", "/owner",
                "/error", "/results", "/results/result", "/parameters",
                "/parameters/DURATION"]


@pytest.mark.parametrize("child", JOB_CHILDREN)
@pytest.mark.parametrize("job_id", [UNKNOWN_ID, "nosuchjob"])
def test_unknown_job_answers_404_on_the_job_and_every_child(client, job_id, child):
    create(client)
    assert client.get(f"/sleep/{job_id}{child}").status_code == 404


@pytest.mark.parametrize("child,data", [
    ("", {"PHASE": "RUN"}),
    ("/phase", {"PHASE": "RUN"}),
    ("/phase", {"PHASE": "ABORT"}),
    ("/executionduration", {"EXECUTIONDURATION": "10"}),
    ("/destruction", {"DESTRUCTION": "2099-01-01T00:00:00Z"}),
    ("/parameters", {"DURATION": "1"}),
])
def test_unknown_job_answers_404_to_posts(client, child, data):
    assert client.post(f"/sleep/{UNKNOWN_ID}{child}", data=data).status_code == 404


def test_delete_of_an_unknown_job_answers_404(client):
    assert client.delete(f"/sleep/{UNKNOWN_ID}").status_code == 404


def test_job_of_another_service_answers_404(client, pending):
    job_id = pending.rsplit("/", 1)[-1]
    assert client.get(f"/checksum/{job_id}").status_code == 404


@pytest.mark.parametrize("child", ["/nonsense", "/runId", "/results/result",
                                   "/results/result/more", "/parameters/DURATION/more"])
def test_unknown_child_answers_404(client, pending, child):
    assert client.get(f"{pending}{child}").status_code == 404


# -- methods a resource does not allow ----------------------------------------------------------

@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
@pytest.mark.parametrize("child", ["/quote", "/owner", "/results", "/error"])
def test_read_only_children_refuse_changes_with_405(client, pending, child, method):
    r = client.open(f"{pending}{child}", method=method, data={"X": "1"})
    assert r.status_code == 405


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_a_result_refuses_changes_with_405(client, completed, method):
    path, _ = completed
    r = client.open(f"{path}/results/result", method=method, data={"X": "1"})
    assert r.status_code == 405
    assert client.get(f"{path}/results/result").status_code == 200


@pytest.mark.parametrize("child", ["/phase", "/executionduration", "/destruction",
                                   "/parameters", "/parameters/DURATION"])
def test_delete_on_a_job_child_answers_405(client, pending, child):
    assert client.delete(f"{pending}{child}").status_code == 405
    assert client.get(pending).status_code == 200


def test_put_on_the_job_answers_405(client, pending):
    assert client.put(pending, data={"DURATION": "1"}).status_code == 405


@pytest.mark.parametrize("method", ["POST", "DELETE"])
def test_a_write_to_a_path_with_doubled_slashes_is_404_not_redirected(client, method):
    job = path_of(client.post("/sleep", data={"DURATION": "0"}).headers["Location"])
    for path in ("/sleep//", f"{job}//", f"/sleep//{job.rsplit('/', 1)[1]}"):
        r = client.open(path, method=method, data={"PHASE": "RUN"})
        assert r.status_code == 404, (path, r.status_code, r.headers.get("Location"))
    assert client.get(f"{job}/phase").data == b"PENDING"
