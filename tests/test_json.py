"""Every resource as JSON (``Accept: application/json`` first, or ``?FORMAT=json`` on a
GET), shaped as the UWS 1.1 XML element for element; XML stays the default."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest
from lxml import etree

from uws.domain.model import JobRef
from uws.domain.phases import Phase
from uws.render import json as jsonr
from uws.web.app import create_app, shutdown

from conftest import make_config
from uwshelp import HREF, NIL, NS, create, job_id, job_xml, path_of, run_to_end

#: one database is enough here (rendering; the same records are read on both databases by the
#: protocol tests; tests/README.rst)
BACKENDS = ("sqlite",)

JSON = {"Accept": "application/json"}
BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
PYVO = {"Accept": "*/*", "User-Agent": "python-pyvo/1.5"}
CHILDREN = {"phase": "phase", "quote": "quote", "executionduration": "executionDuration",
            "destruction": "destruction", "owner": "ownerId", "error": "errorSummary",
            "parameters": "parameters", "results": "results",
            "parameters/DURATION": "parameters"}


def as_json(response, status: int = 200):
    assert response.status_code == status, response.data
    assert response.mimetype == "application/json"
    return json.loads(response.data)


def by_accept(client, path: str, status: int = 200, **kwargs):
    return as_json(client.get(path, headers=JSON, **kwargs), status)


def by_format(client, path: str, status: int = 200):
    separator = "&" if "?" in path else "?"
    return as_json(client.get(f"{path}{separator}FORMAT=json"), status)


@pytest.fixture
def completed(client) -> str:
    path = create(client, DURATION="0", MESSAGE="hello", RUNID='a "run" \\ é')
    assert run_to_end(client, path) == "COMPLETED"
    return path


@pytest.fixture
def failed(client) -> str:
    path = create(client, DURATION="0", FAIL="true", MESSAGE="boom <&>")
    assert run_to_end(client, path) == "ERROR"
    return path


# -- every resource, by Accept and by FORMAT ------------------------------------------------

@pytest.mark.parametrize("ask", [by_accept, by_format])
@pytest.mark.parametrize("child", ["", *CHILDREN])
def test_every_job_resource_is_json_when_asked(client, completed, ask, child):
    doc = ask(client, f"{completed}/{child}".rstrip("/"))
    assert (CHILDREN[child] if child else "jobId") in doc


@pytest.mark.parametrize("ask", [by_accept, by_format])
def test_the_service_list_is_json_when_asked(client, ask):
    doc = ask(client, "/")
    names = [s["name"] for s in doc["services"]]
    assert names == ["sleep", "checksum"]
    assert doc["services"][0]["href"] == "http://localhost/sleep"


@pytest.mark.parametrize("ask", [by_accept, by_format])
def test_the_job_list_is_json_when_asked(client, completed, ask):
    doc = ask(client, "/sleep")
    assert doc["version"] == "1.1"
    assert [j["id"] for j in doc["jobs"]] == [job_id(completed)]


def test_json_answers_vary_on_accept(client, completed):
    for path in (completed, f"{completed}/phase", "/sleep", "/sleep?LAST=1", "/"):
        assert client.get(path, headers=JSON).headers["Vary"] == "Accept", path


# -- the shape: the XML element for element -------------------------------------------------

def _xml_fields(job) -> dict:
    def text(tag):
        el = job.find(f"uws:{tag}", NS)
        return None if el is None or el.get(NIL) == "true" else el.text
    fields = {tag: text(tag) for tag in ("jobId", "runId", "ownerId", "phase", "quote",
                                         "creationTime", "startTime", "endTime", "destruction")}
    fields["executionDuration"] = int(text("executionDuration"))
    fields["parameters"] = [{"id": p.get("id"), "byReference": p.get("byReference") == "true",
                             "value": p.text or ""}
                            for p in job.iterfind("uws:parameters/uws:parameter", NS)]
    fields["results"] = [{"id": r.get("id"), "href": r.get(HREF), "mimeType": r.get("mime-type"),
                          "size": int(r.get("size"))}
                         for r in job.iterfind("uws:results/uws:result", NS)]
    error = job.find("uws:errorSummary", NS)
    fields["errorSummary"] = None if error is None else {
        "type": error.get("type"), "hasDetail": error.get("hasDetail") == "true",
        "message": error.findtext("uws:message", namespaces=NS)}
    return fields


def _json_fields(doc) -> dict:
    return {key: doc[key] for key in (
        "jobId", "runId", "ownerId", "phase", "quote", "creationTime", "startTime", "endTime",
        "destruction", "executionDuration", "parameters", "results", "errorSummary")}


def test_the_json_job_agrees_with_the_xml_for_a_job_with_results(client, completed):
    doc = by_accept(client, completed)
    assert doc["version"] == "1.1"
    assert _json_fields(doc) == _xml_fields(job_xml(client, completed))
    assert doc["results"][0]["id"] == "result" and doc["errorSummary"] is None


def test_the_json_job_agrees_with_the_xml_for_a_job_in_error(client, failed):
    doc = by_accept(client, failed)
    assert _json_fields(doc) == _xml_fields(job_xml(client, failed))
    assert doc["errorSummary"]["message"].endswith("boom <&>")


def test_the_json_job_agrees_with_the_xml_for_a_pending_job(client):
    path = create(client, DURATION="3", RUNID="pending")
    assert _json_fields(by_accept(client, path)) == _xml_fields(job_xml(client, path))


def test_a_waiting_get_answers_json(client):
    path = create(client, DURATION="0")
    client.post(f"{path}/phase", data={"PHASE": "RUN"})
    doc = by_accept(client, f"{path}?WAIT=10&PHASE=QUEUED")
    assert doc["phase"] in ("EXECUTING", "COMPLETED")


def test_plain_text_resources_become_small_objects(client, completed):
    xml = job_xml(client, completed)
    assert by_accept(client, f"{completed}/phase") == {"phase": "COMPLETED"}
    assert by_accept(client, f"{completed}/executionduration") == {
        "executionDuration": int(xml.findtext("uws:executionDuration", namespaces=NS))}
    assert by_accept(client, f"{completed}/destruction") == {
        "destruction": xml.findtext("uws:destruction", namespaces=NS)}
    assert by_accept(client, f"{completed}/quote") == {"quote": None}
    assert by_accept(client, f"{completed}/owner") == {"ownerId": None}


def test_the_error_resource_gives_the_summary_and_the_detail(client, failed, completed):
    doc = by_accept(client, f"{failed}/error")
    assert doc["errorSummary"]["type"] == "fatal"
    assert doc["detail"] == client.get(f"{failed}/error").get_data(as_text=True)
    assert by_accept(client, f"{completed}/error") == {"errorSummary": None, "detail": None}


def test_one_parameter_is_its_values_in_the_parameters_shape(client, completed):
    assert by_accept(client, f"{completed}/parameters/message") == {"parameters": [
        {"id": "MESSAGE", "byReference": False, "value": "hello"}]}


# -- lists: filters, pages, streaming --------------------------------------------------------

def test_the_json_list_mirrors_the_xml_jobrefs(client, completed, failed):
    doc = by_accept(client, "/sleep")
    xml = job_xml(client, "/sleep")
    expected = [{"id": ref.get("id"), "href": ref.get(HREF),
                 "phase": ref.findtext("uws:phase", namespaces=NS),
                 "runId": ref.findtext("uws:runId", namespaces=NS),
                 "ownerId": None,
                 "creationTime": ref.findtext("uws:creationTime", namespaces=NS)}
                for ref in xml.iterfind("uws:jobref", NS)]
    assert doc["jobs"] == expected
    assert doc["jobs"][1]["runId"] == 'a "run" \\ é'


def test_the_json_list_applies_phase_after_and_last(client, completed, failed):
    pending = create(client, DURATION="0")
    assert [j["id"] for j in by_accept(client, "/sleep?PHASE=ERROR")["jobs"]] == [job_id(failed)]
    assert [j["id"] for j in by_accept(client, "/sleep?LAST=1")["jobs"]] == [job_id(pending)]
    after = by_accept(client, completed)["creationTime"]
    ids = [j["id"] for j in by_accept(client, f"/sleep?AFTER={after}")["jobs"]]
    assert ids == [job_id(pending), job_id(failed)]


def test_a_full_json_page_links_the_next_as_the_link_header_does(client):
    paths = [create(client, DURATION="0") for _ in range(3)]
    r = client.get("/sleep?extend=2", headers=JSON)
    first = as_json(r)
    assert [j["id"] for j in first["jobs"]] == [job_id(p) for p in paths[:0:-1]]
    assert r.headers["Link"] == f'<{first["next"]}>; rel="next"'
    second = by_accept(client, path_of(first["next"]))
    assert [j["id"] for j in second["jobs"]] == [job_id(paths[0])]
    assert "next" not in second


def test_a_json_page_asked_by_format_links_a_json_next_page(client):
    for _ in range(2):
        create(client, DURATION="0")
    first = by_format(client, "/sleep?extend=1")
    assert first["next"].endswith("&FORMAT=json")
    assert len(as_json(client.get(path_of(first["next"]), headers=BROWSER))["jobs"]) == 1


def test_a_head_of_the_list_counts_in_json_too(client, completed):
    r = client.head("/sleep", headers=JSON)
    assert r.status_code == 200 and r.mimetype == "application/json"
    assert r.headers["X-Job-Count"] == "1"


def test_the_json_list_is_streamed_in_chunks_of_valid_json():
    now = dt.datetime(2030, 1, 1)
    refs = (JobRef(f"{n:032x}", Phase.PENDING, None, "", now) for n in range(450))
    chunks = list(jsonr.job_list(refs, lambda i: f"http://x/s/{i}", flush_every=200))
    assert len(chunks) == 3
    assert len(json.loads(b"".join(chunks))["jobs"]) == 450


# -- errors ------------------------------------------------------------------------------

@pytest.mark.parametrize("path, status", [
    ("/sleep/0123456789abcdef0123456789abcdef", 404),
    ("/nope", 404),
    ("/sleep?PHASE=NEVER", 400),
    ("/sleep?extend=0", 400),
    ("/sleep/0123456789abcdef0123456789abcdef/phase", 404),
])
def test_errors_are_json_when_json_was_asked(client, path, status):
    for doc in (by_accept(client, path, status), by_format(client, path, status)):
        assert doc["error"]["status"] == status
        assert doc["error"]["message"]


def test_a_method_not_allowed_is_a_json_405(client):
    r = client.put("/sleep", headers=JSON)
    assert as_json(r, 405)["error"]["status"] == 405
    assert "GET" in r.headers["Allow"]


def test_an_anonymous_caller_refused_gets_a_json_401_with_its_challenge(tmp_path, db_url):
    cfg = make_config(tmp_path, db_url, executor="none", scheduler=False)
    cfg.services["sleep"] = dataclasses.replace(cfg.services["sleep"], anonymous=False)
    app = create_app(cfg)
    try:
        r = app.test_client().get("/sleep", headers=JSON)
        assert as_json(r, 401)["error"]["status"] == 401
        assert "WWW-Authenticate" in r.headers
    finally:
        shutdown(app)


def test_errors_stay_plain_text_for_uws_clients(client):
    r = client.get("/nope")
    assert r.status_code == 404 and r.mimetype == "text/plain"


# -- XML stays the default ------------------------------------------------------------------

@pytest.mark.parametrize("headers", [{}, {"Accept": "*/*"}, PYVO,
                                     {"Accept": "application/xml, application/json;q=0.5"}])
def test_xml_stays_the_default_for_uws_clients(client, completed, headers):
    for path in (completed, "/sleep", f"{completed}/results", f"{completed}/parameters"):
        r = client.get(path, headers=headers)
        assert r.mimetype in ("text/xml", "application/xml"), (path, headers)
        etree.fromstring(r.data)
    assert client.get(f"{completed}/phase", headers=PYVO).data == b"COMPLETED"


def test_browsers_still_get_html(client, completed):
    for path in (completed, "/sleep", "/"):
        assert client.get(path, headers=BROWSER).mimetype == "text/html", path


def test_format_on_a_post_is_a_job_parameter_not_a_representation(client):
    # FORMAT chooses JSON on a GET only: on a POST it is what UWS makes it, a parameter
    r = client.post("/sleep?FORMAT=json", data={"DURATION": "0"})
    assert r.status_code == 400 and r.mimetype == "text/plain"
    assert "FORMAT" in r.get_data(as_text=True)
