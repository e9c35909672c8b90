"""Batches (issue 14): one request creates many jobs, followed and changed together at
/{service}/batches/{id}; every batch XML document is checked against uws-batch.xsd."""
from __future__ import annotations

import base64
import io
import json
import re
import threading
import time

import pytest
import sqlalchemy as sa
from lxml import etree
from werkzeug.security import generate_password_hash

from uws.auth import AuthConfig
from uws.domain.model import ErrorSummary
from uws.resources import schemas_dir
from uws.web import batchbodies
from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, make_config
from uwshelp import wait_for

FAST_HASH = "pbkdf2:sha256:1000"
USERS = {"alice": "wonderland", "bob": "builder", "root": "toor"}
NS = {"b": "urn:ivoa-uws-server:batch", "xlink": "http://www.w3.org/1999/xlink"}
HREF = "{http://www.w3.org/1999/xlink}href"
SLEEP_PARAMS = [{"name": "DURATION", "type": "float", "default": "1", "min": 0},
                {"name": "FAIL", "type": "boolean", "default": "false"},
                {"name": "MESSAGE", "type": "string", "default": ""}]
SERVICES = {
    "sleep": {"runner": "uws.demo:sleep", "parameters": SLEEP_PARAMS},
    "small": {"runner": "uws.demo:sleep", "parameters": SLEEP_PARAMS, "max_batch_jobs": 3,
              "max_jobs_per_owner": 4},
    "ranked": {"runner": "uws.demo:sleep", "parameters": SLEEP_PARAMS, "priority_min": 0,
               "priority_max": 5, "priority_default": 3},
    "checksum": {"runner": "uws.demo:checksum", "parameters": [
        {"name": "FILE", "type": "file", "required": True}]},
}
_schema = etree.XMLSchema(etree.parse(str(schemas_dir() / "uws-batch.xsd")))


def basic(user: str) -> dict:
    raw = f"{user}:{USERS[user]}".encode()
    return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


ALICE, BOB, ROOT = basic("alice"), basic("bob"), basic("root")


@pytest.fixture
def app(tmp_path, db_url):
    cfg = make_config(tmp_path, db_url, services=SERVICES, executor="none", scheduler=False)
    cfg.auth = AuthConfig(
        modes=("basic",), users={u: generate_password_hash(p, method=FAST_HASH)
                                 for u, p in USERS.items()},
        admins=frozenset({"root"}))
    application = create_app(cfg)
    application.test_client_class = ValidatingClient
    yield application
    shutdown(application)


@pytest.fixture
def store(api):
    return api.store


def path_of(url: str) -> str:
    return url.replace("http://localhost", "")


def create(client, rows, query: str = "", headers=ALICE, service: str = "sleep") -> str:
    r = client.post(f"/{service}/batches{query}", data=json.dumps(rows),
                    content_type="application/json", headers=headers)
    assert r.status_code == 303, r.data
    return path_of(r.headers["Location"])


def valid(body: bytes) -> etree._Element:
    doc = etree.fromstring(body)
    if not _schema.validate(doc):
        pytest.fail(f"invalid batch XML: {_schema.error_log}\n{body[:2000]!r}")
    return doc


def document(client, path: str, query: str = "", headers=ALICE) -> etree._Element:
    r = client.get(path + query, headers=headers)
    assert r.status_code == 200, r.data
    return valid(r.data)


def status(client, path: str) -> str:
    return document(client, path).findtext("b:status", namespaces=NS)


def job_ids(client, path: str) -> list[str]:
    doc = document(client, path, "?limit=1000")
    return [el.get("id") for el in doc.iterfind("b:jobs/b:job", NS)]


def job_phases(client, path: str) -> list[str]:
    doc = document(client, path, "?limit=1000")
    return [el.get("phase") for el in doc.iterfind("b:jobs/b:job", NS)]


def job_count(client, service: str = "sleep", headers=ALICE) -> int:
    return int(client.head(f"/{service}", headers=headers).headers["X-Job-Count"])


def parameter(client, job_id: str, name: str, service: str = "sleep") -> str:
    r = client.get(f"/{service}/{job_id}/parameters/{name}", headers=ALICE)
    return r.get_data(as_text=True)


def finish(store, job_id: str, phase: str, progress: float | None = None) -> None:
    """Move a PENDING job as an executor would (no executor runs in these tests)."""
    if phase == "PENDING":
        return
    if phase == "ABORTED":
        assert store.mark_aborted(job_id)
        return
    assert store.mark_queued(job_id)
    if phase == "QUEUED":
        return
    assert store.mark_executing(job_id)
    if phase == "EXECUTING":
        store.set_progress(job_id, progress, None)
    elif phase == "COMPLETED":
        assert store.mark_completed(job_id)
    elif phase == "ERROR":
        assert store.mark_failed(job_id, ErrorSummary("fatal", f"job {job_id[:4]} failed"))


# -- creation ---------------------------------------------------------------------------

def test_a_json_array_creates_one_pending_job_per_object_in_order(client):
    path = create(client, [{"DURATION": 3}, {"DURATION": "4.5", "MESSAGE": "b"}, {}])
    ids = job_ids(client, path)
    assert job_phases(client, path) == ["PENDING"] * 3
    assert [parameter(client, i, "DURATION") for i in ids] == ["3", "4.5", "1"]
    assert parameter(client, ids[1], "MESSAGE") == "b"


def test_a_json_object_names_the_run_id_and_phase_run_queues_every_job(client):
    path = create(client, {"jobs": [{"DURATION": 1}, {"DURATION": 2}], "runId": "survey-7",
                           "phase": "RUN"})
    doc = document(client, path)
    assert doc.findtext("b:runId", namespaces=NS) == "survey-7"
    assert job_phases(client, path) == ["QUEUED", "QUEUED"]
    job = client.get(f"/sleep/{job_ids(client, path)[0]}", headers=ALICE)
    assert b"<uws:runId>survey-7</uws:runId>" in job.data


def test_phase_run_in_the_query_queues_every_job(client):
    path = create(client, [{"DURATION": 1}] * 3, query="?PHASE=RUN")
    assert job_phases(client, path) == ["QUEUED"] * 3


def test_a_csv_body_creates_one_job_per_row_and_an_empty_cell_takes_the_default(client):
    r = client.post("/sleep/batches", data="DURATION,MESSAGE\n2,first\n,second\n",
                    content_type="text/csv", headers=ALICE)
    assert r.status_code == 303
    ids = job_ids(client, path_of(r.headers["Location"]))
    assert [parameter(client, i, "DURATION") for i in ids] == ["2", "1"]
    assert [parameter(client, i, "MESSAGE") for i in ids] == ["first", "second"]


def test_a_csv_file_in_a_form_creates_one_job_per_row(client):
    csv_file = (io.BytesIO(b"DURATION\n5\n6\n7\n"), "jobs.csv")
    r = client.post("/sleep/batches", data={"file": csv_file, "PHASE": "RUN", "RUNID": "csv"},
                    content_type="multipart/form-data", headers=ALICE)
    assert r.status_code == 303
    path = path_of(r.headers["Location"])
    assert job_phases(client, path) == ["QUEUED"] * 3
    assert document(client, path).findtext("b:runId", namespaces=NS) == "csv"


def test_a_bad_row_refuses_the_whole_batch_naming_the_row_and_the_parameter(client):
    rows = [{"DURATION": 1}, {"DURATION": 2}, {"DURATION": "soon"}, {"DURATION": 4}]
    r = client.post("/sleep/batches", data=json.dumps(rows), content_type="application/json",
                    headers=ALICE)
    assert r.status_code == 400
    assert r.get_data(as_text=True).startswith("row 3: DURATION:")
    assert job_count(client) == 0
    assert b'total="0"' in client.get("/sleep/batches", headers=ALICE).data


def test_a_csv_row_with_an_unknown_parameter_is_refused_naming_it(client):
    r = client.post("/sleep/batches", data="DURATION,SPEED\n1,\n2,3\n", content_type="text/csv",
                    headers=ALICE)
    assert r.status_code == 400
    assert r.get_data(as_text=True).startswith("row 2: SPEED: unknown parameter")
    assert job_count(client) == 0


def test_a_row_cannot_name_an_upload_but_may_give_a_url(client):
    r = client.post("/checksum/batches", data=json.dumps([{"FILE": "param:data"}]),
                    content_type="application/json", headers=ALICE)
    assert r.status_code == 400 and b"row 1: FILE" in r.data
    path = create(client, [{"FILE": "https://example.org/a.fits"}], service="checksum")
    assert parameter(client, job_ids(client, path)[0], "FILE", "checksum") == \
        "https://example.org/a.fits"


def test_more_rows_than_max_batch_jobs_answer_413(client):
    r = client.post("/small/batches", data=json.dumps([{}] * 4), content_type="application/json",
                    headers=ALICE)
    assert r.status_code == 413
    assert job_count(client, "small") == 0


def test_a_body_past_the_size_limit_answers_413(client, monkeypatch):
    monkeypatch.setattr(batchbodies, "MAX_BATCH_BYTES", 100)
    rows = [{"MESSAGE": "x" * 20}] * 5
    r = client.post("/sleep/batches", data=json.dumps(rows), content_type="application/json",
                    headers=ALICE)
    assert r.status_code == 413


@pytest.mark.parametrize("body, ctype", [("[1, 2]", "application/json"),
                                         ("[{\"DURATION\": ", "application/json"),
                                         ("[]", "application/json"),
                                         ('{"jobs": [{}], "colour": "red"}', "application/json"),
                                         ('[{"DURATION": {"a": 1}}]', "application/json"),
                                         ("", "text/csv"),
                                         ("DURATION\n1,2\n", "text/csv")])
def test_a_malformed_batch_body_answers_400(client, body, ctype):
    r = client.post("/sleep/batches", data=body, content_type=ctype, headers=ALICE)
    assert r.status_code == 400, r.data
    assert job_count(client) == 0


def test_an_unsupported_body_type_answers_415(client):
    r = client.post("/sleep/batches", data="DURATION=1", headers=ALICE,
                    content_type="application/x-www-form-urlencoded")
    assert r.status_code == 415


def test_a_phase_other_than_run_at_creation_answers_400(client):
    r = client.post("/sleep/batches?PHASE=ABORT", data="[{}]", content_type="application/json",
                    headers=ALICE)
    assert r.status_code == 400


def test_the_jobs_quota_counts_every_job_of_the_batch(client):
    create(client, [{}] * 3, service="small")
    r = client.post("/small/batches", data="[{}, {}]", content_type="application/json",
                    headers=ALICE)
    assert r.status_code == 403
    assert job_count(client, "small") == 3


def test_a_batch_in_an_unknown_service_answers_404(client):
    r = client.post("/nothing/batches", data="[{}]", content_type="application/json",
                    headers=ALICE)
    assert r.status_code == 404


# -- aggregate status and report ----------------------------------------------------------

@pytest.mark.parametrize("phases, expected", [
    (["PENDING", "PENDING"], "pending"),
    (["QUEUED", "PENDING"], "processing"),
    (["COMPLETED", "PENDING"], "processing"),
    (["EXECUTING", "COMPLETED"], "processing"),
    (["COMPLETED", "COMPLETED"], "completed"),
    (["ERROR", "ERROR"], "failed"),
    (["ERROR", "COMPLETED"], "partially failed"),
    (["ABORTED", "COMPLETED"], "aborted"),
    (["ABORTED", "ERROR"], "aborted"),
])
def test_the_aggregate_status_follows_the_jobs_phases(client, store, phases, expected):
    path = create(client, [{}] * len(phases))
    for job_id, phase in zip(job_ids(client, path), phases):
        finish(store, job_id, phase)
    assert status(client, path) == expected


def test_counts_by_phase_and_percent_complete_include_running_progress(client, store):
    path = create(client, [{}] * 4)
    ids = job_ids(client, path)
    finish(store, ids[0], "COMPLETED")
    finish(store, ids[1], "EXECUTING", progress=50.0)
    doc = document(client, path)
    counts = {el.get("name"): int(el.get("count")) for el in doc.iterfind("b:phases/b:phase", NS)}
    assert (counts["COMPLETED"], counts["EXECUTING"], counts["PENDING"]) == (1, 1, 2)
    assert doc.findtext("b:percentComplete", namespaces=NS) == "37.5"   # (1 + 0.5) / 4


def test_the_report_lists_each_job_with_its_link_phase_and_error_message(client, store):
    path = create(client, [{}, {}])
    first, second = job_ids(client, path)
    finish(store, second, "ERROR")
    jobs = list(document(client, path).iterfind("b:jobs/b:job", NS))
    assert jobs[0].get(HREF) == f"http://localhost/sleep/{first}"
    assert [j.get("phase") for j in jobs] == ["PENDING", "ERROR"]
    assert jobs[0].find("b:error", NS) is None
    assert jobs[1].findtext("b:error", namespaces=NS) == f"job {second[:4]} failed"


def test_the_report_is_paged_with_a_next_link(client):
    path = create(client, [{"DURATION": i} for i in range(5)])
    everything = job_ids(client, path)
    r = client.get(f"{path}?start=2&limit=2", headers=ALICE)
    page = [el.get("id") for el in valid(r.data).iterfind("b:jobs/b:job", NS)]
    assert page == everything[2:4]
    assert r.headers["Link"] == f'<http://localhost{path}?start=4&limit=2>; rel="next"'
    last = client.get(f"{path}?start=4&limit=2", headers=ALICE)
    assert "Link" not in last.headers


@pytest.mark.parametrize("query", ["?limit=1001", "?limit=0", "?start=-1", "?start=x"])
def test_page_bounds_are_enforced(client, query):
    path = create(client, [{}])
    assert client.get(path + query, headers=ALICE).status_code == 400
    assert client.get("/sleep/batches" + query, headers=ALICE).status_code == 400


def test_a_batch_as_json_has_status_counts_percent_and_report(client):
    path = create(client, [{}, {}], query="?PHASE=RUN")
    r = client.get(path + "?FORMAT=json", headers=ALICE)
    doc = r.get_json()
    assert r.mimetype == "application/json"
    assert (doc["status"], doc["jobCount"], doc["percentComplete"]) == ("processing", 2, 0.0)
    assert doc["phases"]["QUEUED"] == 2
    assert [j["phase"] for j in doc["jobs"]["items"]] == ["QUEUED", "QUEUED"]


def test_the_batch_list_shows_the_callers_batches_newest_first_and_paged(client):
    made = [create(client, [{}]) for _ in range(3)]
    create(client, [{}], headers=BOB)
    r = client.get("/sleep/batches?limit=2", headers=ALICE)
    doc = valid(r.data)
    assert doc.get("total") == "3"
    assert [f"/sleep/batches/{el.get('id')}" for el in doc.iterfind("b:batchref", NS)] == \
        [made[2], made[1]]
    assert "start=2" in r.headers["Link"]
    listed = client.get("/sleep/batches?FORMAT=json", headers=ALICE).get_json()
    assert [b["batchId"] for b in listed["batches"]] == [p.rsplit("/", 1)[1] for p in made[::-1]]


# -- run, abort, repeat, delete ---------------------------------------------------------------

def test_run_queues_the_pending_jobs_of_the_batch(client, store):
    path = create(client, [{}] * 3)
    finish(store, job_ids(client, path)[0], "ABORTED")
    r = client.post(path, data={"PHASE": "RUN"}, headers=ALICE)
    assert r.status_code == 303 and path_of(r.headers["Location"]) == path
    assert job_phases(client, path) == ["ABORTED", "QUEUED", "QUEUED"]


def test_run_under_an_administrative_hold_holds_the_jobs_until_it_is_released(client):
    r = client.post("/sleep/holds", data={"ACTION": "HOLD", "OWNER": "alice"}, headers=ROOT)
    assert r.status_code == 303
    path = create(client, [{}] * 2, "?PHASE=RUN")
    assert job_phases(client, path) == ["HELD", "HELD"]
    client.post(path, data={"PHASE": "RUN"}, headers=ALICE)
    assert job_phases(client, path) == ["HELD", "HELD"]
    r = client.post("/sleep/holds", data={"ACTION": "RELEASE", "OWNER": "alice"}, headers=ROOT)
    assert r.status_code == 303
    assert job_phases(client, path) == ["QUEUED", "QUEUED"]


def test_run_leaves_a_job_held_by_the_running_cap_held(client, store):
    path = create(client, [{}] * 3)
    ids = job_ids(client, path)
    finish(store, ids[0], "EXECUTING")
    finish(store, ids[1], "QUEUED")
    assert store.hold_for_quota("sleep", "alice", 1) == [ids[1]]
    client.post(path, data={"PHASE": "RUN"}, headers=ALICE)
    assert job_phases(client, path) == ["EXECUTING", "HELD", "QUEUED"]
    assert store.held_because(ids[1])[0] == "quota"


def test_abort_ends_every_unfinished_job_and_leaves_finished_ones(client, store):
    path = create(client, [{}] * 4)
    ids = job_ids(client, path)
    finish(store, ids[0], "COMPLETED")
    finish(store, ids[1], "EXECUTING")
    finish(store, ids[2], "QUEUED")
    assert client.post(path, data={"PHASE": "ABORT"}, headers=ALICE).status_code == 303
    assert job_phases(client, path) == ["COMPLETED", "ABORTED", "ABORTED", "ABORTED"]
    assert status(client, path) == "aborted"


def test_repeat_creates_a_new_batch_of_the_failed_and_aborted_jobs_parameters(client, store):
    path = create(client, {"jobs": [{"DURATION": d} for d in (1, 2, 3, 4)], "runId": "again"})
    ids = job_ids(client, path)
    finish(store, ids[0], "COMPLETED")
    finish(store, ids[1], "ERROR")
    finish(store, ids[3], "ABORTED")
    r = client.post(path, data={"ACTION": "REPEAT"}, headers=ALICE)
    assert r.status_code == 303
    copy = path_of(r.headers["Location"])
    assert copy != path and copy.startswith("/sleep/batches/")
    assert [parameter(client, i, "DURATION") for i in job_ids(client, copy)] == ["2", "4"]
    assert job_phases(client, copy) == ["PENDING", "PENDING"]
    assert document(client, copy).findtext("b:runId", namespaces=NS) == "again"
    assert job_phases(client, path) == ["COMPLETED", "ERROR", "PENDING", "ABORTED"]


def test_repeat_without_failed_jobs_is_refused(client):
    path = create(client, [{}])
    assert client.post(path, data={"ACTION": "REPEAT"}, headers=ALICE).status_code == 403


@pytest.mark.parametrize("how", ["ACTION", "METHOD", "DELETE"])
def test_delete_removes_the_batch_and_all_its_jobs(client, how):
    path = create(client, [{}] * 3, query="?PHASE=RUN")
    ids = job_ids(client, path)
    if how == "DELETE":
        r = client.delete(path, headers=ALICE)
    else:
        r = client.post(path, data={how: "DELETE"}, headers=ALICE)
    assert r.status_code == 303 and r.headers["Location"] == "http://localhost/sleep/batches"
    assert client.get(path, headers=ALICE).status_code == 404
    assert all(client.get(f"/sleep/{i}", headers=ALICE).status_code == 404 for i in ids)
    assert job_count(client) == 0


def test_deleting_a_batch_removes_its_jobs_files_and_frees_their_bytes(client, api, store):
    path = create(client, [{}, {}])
    ids = job_ids(client, path)
    for job_id in ids:
        folder = api.files.job_dir(job_id)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "out.txt").write_bytes(b"x" * 300)
        store.set_stored_bytes(job_id, 300)
    assert store.stored_bytes("sleep", "alice") == 600
    client.delete(path, headers=ALICE)
    assert store.stored_bytes("sleep", "alice") == 0
    assert not any(api.files.job_dir(job_id).exists() for job_id in ids)


@pytest.mark.parametrize("data", [{}, {"PHASE": "HOLD"}, {"ACTION": "STOP"},
                                  {"PHASE": "RUN", "ACTION": "REPEAT"}, {"DURATION": "1"},
                                  {"METHOD": "PUT"}])
def test_a_bad_batch_control_answers_400_and_changes_nothing(client, data):
    path = create(client, [{}])
    assert client.post(path, data=data, headers=ALICE).status_code == 400
    assert job_phases(client, path) == ["PENDING"]


# -- owners ------------------------------------------------------------------------------

def test_another_owner_gets_403_on_every_batch_request_and_nothing_changes(client):
    path = create(client, [{}, {}])
    assert client.get(path, headers=BOB).status_code == 403
    for data in ({"PHASE": "RUN"}, {"PHASE": "ABORT"}, {"ACTION": "REPEAT"}, {"ACTION": "DELETE"}):
        assert client.post(path, data=data, headers=BOB).status_code == 403
    assert client.delete(path, headers=BOB).status_code == 403
    assert job_phases(client, path) == ["PENDING", "PENDING"]
    assert b'total="0"' in client.get("/sleep/batches", headers=BOB).data


def test_an_unknown_batch_answers_404(client):
    assert client.get("/sleep/batches/" + "0" * 32, headers=ALICE).status_code == 404
    assert client.get("/sleep/batches/nonsense", headers=ALICE).status_code == 404
    assert client.delete("/sleep/batches/" + "0" * 32, headers=ALICE).status_code == 404


def test_an_administrator_sees_and_controls_every_batch(client):
    path = create(client, [{}])
    create(client, [{}], headers=BOB)
    assert valid(client.get("/sleep/batches", headers=ROOT).data).get("total") == "2"
    assert client.post(path, data={"PHASE": "RUN"}, headers=ROOT).status_code == 303
    assert job_phases(client, path) == ["QUEUED"]


# -- jobs of a batch ---------------------------------------------------------------------------

def test_each_job_of_a_batch_takes_the_services_default_priority(client):
    path = create(client, [{}, {}], service="ranked")
    for job_id in job_ids(client, path):
        doc = client.get(f"/ranked/{job_id}", headers={**ALICE, "Accept": "application/json"})
        assert doc.get_json()["jobInfo"]["queue"]["priority"] == 3


def test_each_job_of_a_batch_stays_an_ordinary_uws_job(client):
    path = create(client, [{"DURATION": 7}])
    job = f"/sleep/{job_ids(client, path)[0]}"
    assert b"<uws:phase>PENDING</uws:phase>" in client.get(job, headers=ALICE).data  # UWS-valid
    assert client.post(f"{job}/phase", data={"PHASE": "RUN"}, headers=ALICE).status_code == 303
    assert job_phases(client, path) == ["QUEUED"]
    assert client.delete(job, headers=ALICE).status_code == 303
    assert document(client, path).findtext("b:jobCount", namespaces=NS) == "0"


def test_every_change_of_a_batch_job_names_its_batch(client, store):
    seen = []
    store.change_hooks.append(lambda conn, change: seen.append(change))
    path = create(client, [{}, {}])
    batch_id = path.rsplit("/", 1)[1]
    first, second = job_ids(client, path)
    client.post(path, data={"PHASE": "RUN"}, headers=ALICE)
    assert store.claim_next("w", ["sleep"], 60) in (first, second)
    client.delete(f"/sleep/{second}", headers=ALICE)
    assert [(c.old, c.new) for c in seen] == [
        (None, "PENDING"), (None, "PENDING"), ("PENDING", "QUEUED"), ("PENDING", "QUEUED"),
        ("QUEUED", "EXECUTING"), (seen[-1].old, None)]
    assert {c.batch_id for c in seen} == {batch_id}


def test_the_html_page_shows_status_progress_report_and_actions(client, store):
    path = create(client, [{}, {}])
    finish(store, job_ids(client, path)[0], "COMPLETED")
    r = client.get(path, headers={**ALICE, "Accept": "text/html"})
    page = r.get_data(as_text=True)
    assert r.mimetype == "text/html"
    assert 'data-status="processing"' in page and '<progress max="100" value="50.0"' in page
    for control in ('name="PHASE" value="RUN"', 'name="PHASE" value="ABORT"',
                    'name="ACTION" value="REPEAT"'):
        assert control in page
    # Delete asks first: its button shows the confirmation page (tests/test_pages_forms.py)
    assert re.search(r'<form method="get" action="[^"]*/delete">', page)
    assert "<script>" not in page


def statements(store, action) -> int:
    """How many SQL statements ``action()`` executes on the store's database."""
    seen = []
    listener = lambda *args: seen.append(1)     # noqa: E731
    sa.event.listen(store.engine, "before_cursor_execute", listener)
    try:
        action()
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", listener)
    return len(seen)


@pytest.mark.parametrize("how", ["RUN", "ABORT", "DELETE"])
def test_changing_a_batch_costs_statements_independent_of_its_size(client, store, how):
    path = create(client, [{}] * 60)
    for job_id in job_ids(client, path)[:2]:
        finish(store, job_id, "EXECUTING")      # their ends add run-time bins
    form = {"ACTION": "DELETE"} if how == "DELETE" else {"PHASE": how}
    assert statements(store, lambda: client.post(path, data=form, headers=ALICE)) < 30


def test_aborting_a_batch_adds_the_run_times_of_its_running_jobs(client, store):
    path = create(client, [{}] * 3)
    for job_id in job_ids(client, path)[:2]:
        finish(store, job_id, "EXECUTING")
    client.post(path, data={"PHASE": "ABORT"}, headers=ALICE)
    doc = client.get("/sleep/stats", headers={**ALICE, "Accept": "application/json"}).get_json()
    assert doc["all"]["waitTime"]["samples"] == 2 and doc["all"]["runTime"]["samples"] == 2


def test_a_wait_in_another_front_end_returns_when_the_batch_runs(app, client):
    other = create_app(app.extensions["uws"].config)    # a second process's app, same database
    other.test_client_class = ValidatingClient
    try:
        path = create(client, [{}, {}])
        job = f"/sleep/{job_ids(client, path)[1]}"
        answers = []
        waiter = threading.Thread(target=lambda: answers.append(other.test_client().get(
            f"{job}?WAIT=30&PHASE=PENDING", headers=ALICE)))
        waiter.start()
        wait_for(lambda: other.extensions["uws"].watch.waiting > 0)
        started = time.monotonic()
        client.post(path, data={"PHASE": "RUN"}, headers=ALICE)
        waiter.join(timeout=30)
        assert b"<uws:phase>QUEUED</uws:phase>" in answers[0].data
        assert time.monotonic() - started < 5      # woken, not timed out
    finally:
        shutdown(other)


def test_a_wait_in_another_front_end_returns_when_the_batch_is_deleted(app, client):
    other = create_app(app.extensions["uws"].config)    # a second process's app, same database
    other.test_client_class = ValidatingClient
    try:
        path = create(client, [{}, {}])
        job = f"/sleep/{job_ids(client, path)[1]}"
        answers = []
        waiter = threading.Thread(target=lambda: answers.append(other.test_client().get(
            f"{job}?WAIT=30&PHASE=PENDING", headers=ALICE)))
        waiter.start()
        wait_for(lambda: other.extensions["uws"].watch.waiting > 0)
        started = time.monotonic()
        assert client.delete(path, headers=ALICE).status_code == 303
        waiter.join(timeout=30)
        assert answers[0].status_code == 404
        assert time.monotonic() - started < 5      # woken, not timed out
    finally:
        shutdown(other)


def test_a_batch_whose_jobs_are_all_deleted_is_completed(client):
    path = create(client, [{}])
    client.delete(f"/sleep/{job_ids(client, path)[0]}", headers=ALICE)
    doc = document(client, path)
    assert doc.findtext("b:status", namespaces=NS) == "completed"
    assert doc.findtext("b:percentComplete", namespaces=NS) == "100"


def test_the_html_batch_list_links_each_batch_and_offers_a_csv_upload(client):
    path = create(client, {"jobs": [{}], "runId": "listed"})
    r = client.get("/sleep/batches", headers={**ALICE, "Accept": "text/html"})
    page = r.get_data(as_text=True)
    assert r.mimetype == "text/html"
    assert f'href="http://localhost{path}"' in page and ">listed</a>" in page
    assert 'enctype="multipart/form-data"' in page and 'type="file"' in page
