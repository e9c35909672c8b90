"""Deleting a job (UWS 1.1 §2.2.3.2, §2.1.5): DELETE, and the POST tunnels."""
from __future__ import annotations

import io
from urllib.parse import parse_qs, urlsplit

import pytest
from lxml import etree

from uwshelp import ACTIVE, HREF, NS, create, job_id, job_xml, path_of, wait_while

CHILDREN = ["", "/phase", "/executionduration", "/destruction", "/quote", "/owner",
            "/error", "/results", "/parameters", "/parameters/DURATION"]


def listed_ids(client) -> list[str]:
    root = etree.fromstring(client.get("/sleep").data)
    return [ref.get("id") for ref in root.findall("uws:jobref", NS)]


def assert_303_to_the_job_list(r) -> None:
    assert r.status_code == 303, r.data
    location = urlsplit(r.headers["Location"])
    assert (location.scheme, location.netloc, location.path) == ("http", "localhost", "/sleep")
    last = parse_qs(location.query)["LAST"]
    assert len(last) == 1 and int(last[0]) > 0


DELETES = {
    "DELETE": lambda client, path: client.delete(path),
    "POST ACTION=DELETE": lambda client, path: client.post(path, data={"ACTION": "DELETE"}),
    "POST ?METHOD=DELETE": lambda client, path: client.post(f"{path}?METHOD=DELETE"),
    "POST METHOD=DELETE": lambda client, path: client.post(path, data={"METHOD": "DELETE"}),
}


@pytest.fixture(params=list(DELETES))
def delete(request):
    """Each way of deleting a job: delete(client, path) -> response."""
    return DELETES[request.param]


# -- the answer ---------------------------------------------------------------------------------

def test_delete_answers_303_to_the_absolute_job_list_with_last(client, delete):
    assert_303_to_the_job_list(delete(client, create(client)))


def test_delete_redirect_bounds_the_list_with_the_configured_last(client, config):
    r = client.delete(create(client))
    assert parse_qs(urlsplit(r.headers["Location"]).query)["LAST"] == [str(config.redirect_last)]


def test_delete_redirect_uses_the_host_the_client_addressed(client):
    path = create(client)
    r = client.delete(path, base_url="http://127.0.0.1:8080")
    assert r.headers["Location"].startswith("http://127.0.0.1:8080/sleep?")


def test_delete_redirect_is_a_list_that_can_be_fetched(client):
    r = client.delete(create(client))
    assert client.get(path_of(r.headers["Location"])).status_code == 200


# -- the job is forgotten ---------------------------------------------------------------------------

def test_delete_redirect_works_for_clients_that_add_a_slash(client):
    # uws-client 1.1 follows the 303 by appending its query to "{jobs}/".
    path = create(client)
    query = urlsplit(client.delete(path).headers["Location"]).query
    r = client.get(f"/sleep/?{query}")
    assert r.status_code == 200
    assert job_id(path) not in r.get_data(as_text=True)


def test_deleted_job_answers_404(client, delete):
    path = create(client)
    delete(client, path)
    assert client.get(path).status_code == 404


@pytest.mark.parametrize("child", CHILDREN)
def test_deleted_job_children_answer_404(client, child):
    path = create(client)
    client.delete(path)
    assert client.get(f"{path}{child}").status_code == 404


def test_deleted_job_leaves_the_list(client, delete):
    kept, gone = create(client), create(client)
    delete(client, gone)
    assert listed_ids(client) == [job_id(kept)]


def test_deleted_job_is_not_archived(client):
    path = create(client)
    client.delete(path)
    root = etree.fromstring(client.get("/sleep?PHASE=ARCHIVED").data)
    assert root.findall("uws:jobref", NS) == []


def test_deleting_twice_answers_404_the_second_time(client):
    path = create(client)
    assert client.delete(path).status_code == 303
    assert client.delete(path).status_code == 404


def test_delete_of_an_unknown_job_answers_404(client):
    assert client.delete("/sleep/0123456789abcdef0123456789abcdef").status_code == 404
    assert client.post("/sleep/0123456789abcdef0123456789abcdef",
                       data={"ACTION": "DELETE"}).status_code == 404


def test_deleting_one_job_leaves_the_others(client):
    kept = create(client, MESSAGE="kept")
    client.delete(create(client))
    assert client.get(kept).status_code == 200


def test_archived_job_can_be_deleted(client, api):
    path = create(client)
    assert api.store.mark_aborted(job_id(path))
    assert api.store.archive(job_id(path))
    assert_303_to_the_job_list(client.delete(path))
    assert client.get(path).status_code == 404
    assert client.get("/sleep?PHASE=ARCHIVED").data.count(b"jobref") == 0


# -- bad tunnels ----------------------------------------------------------------------------------

@pytest.mark.parametrize("data", [{"ACTION": "FOO"}, {"METHOD": "PUT"}, {"ACTION": ""}])
def test_other_action_answers_400_and_keeps_the_job(client, data):
    path = create(client)
    assert client.post(path, data=data).status_code == 400
    assert client.get(path).status_code == 200


@pytest.mark.parametrize("data", [{"ACTION": "DELETE", "PHASE": "RUN"},
                                  {"METHOD": "DELETE", "PRIORITY": "5"},
                                  {"ACTION": "DELETE", "RUNID": "r2"},
                                  {"ACTION": "DELETE", "MESSAGE": "changed"}])
def test_delete_tunnel_with_anything_else_answers_400_and_keeps_the_job(client, data):
    path = create(client, MESSAGE="kept")
    r = client.post(path, data=data)
    assert r.status_code == 400
    assert sorted(set(data) - {"ACTION", "METHOD"})[0].encode() in r.data
    assert client.get(f"{path}/phase").data == b"PENDING"
    assert client.get(f"{path}/parameters/MESSAGE").data.strip() == b"kept"


@pytest.mark.parametrize("method", ["PUT", "POST", "delete"])
def test_action_delete_with_a_method_asking_otherwise_answers_400_and_keeps_the_job(client,
                                                                                    method):
    path = create(client)
    r = client.post(path, data={"ACTION": "DELETE", "METHOD": method})
    assert r.status_code == (303 if method == "delete" else 400)
    assert client.get(path).status_code == (404 if method == "delete" else 200)


def test_delete_tunnel_with_an_upload_answers_400_and_keeps_the_job(client):
    path = create(client)
    r = client.post(path, data={"ACTION": "DELETE", "DATA": (io.BytesIO(b"x"), "d.txt")},
                    content_type="multipart/form-data")
    assert r.status_code == 400
    assert client.get(path).status_code == 200


# -- jobs in every phase ------------------------------------------------------------------------------

def test_deleting_a_completed_job_removes_its_results(client):
    path = create(client, DURATION="0")
    client.post(f"{path}/phase", data={"PHASE": "RUN"})
    assert wait_while(client, path, ACTIVE) == "COMPLETED"
    result = job_xml(client, path).find("uws:results/uws:result", NS).get(HREF)
    assert client.get(path_of(result)).status_code == 200
    assert client.delete(path).status_code == 303
    assert client.get(path_of(result)).status_code == 404


def test_deleting_an_executing_job_ends_it(client, delete):
    path = create(client, DURATION="30")
    client.post(f"{path}/phase", data={"PHASE": "RUN"})
    assert wait_while(client, path, ("PENDING", "QUEUED")) == "EXECUTING"
    assert_303_to_the_job_list(delete(client, path))
    assert client.get(path).status_code == 404
    assert job_id(path) not in listed_ids(client)


def test_deleting_executing_jobs_frees_their_slots(client):
    """With two slots busy for 30 s, a short job only runs if the deletes stopped them."""
    long = [create(client, DURATION="30") for _ in range(2)]
    for path in long:
        client.post(f"{path}/phase", data={"PHASE": "RUN"})
    for path in long:
        assert wait_while(client, path, ("PENDING", "QUEUED")) == "EXECUTING"
        assert client.delete(path).status_code == 303
    short = create(client, DURATION="0")
    client.post(f"{short}/phase", data={"PHASE": "RUN"})
    assert wait_while(client, short, ACTIVE) == "COMPLETED"
    for path in long:
        assert client.get(path).status_code == 404


def test_deleted_executing_job_does_not_come_back(client):
    path = create(client, DURATION="2")
    client.post(f"{path}/phase", data={"PHASE": "RUN"})
    assert wait_while(client, path, ("PENDING", "QUEUED")) == "EXECUTING"
    client.delete(path)
    # Once a later 2.5 s job has finished, the deleted job's work would have ended too.
    other = create(client, DURATION="2.5")
    client.post(f"{other}/phase", data={"PHASE": "RUN"})
    assert wait_while(client, other, ACTIVE) == "COMPLETED"
    assert client.get(path).status_code == 404
    assert listed_ids(client) == [job_id(other)]


# -- files ------------------------------------------------------------------------------------------

def files_of(config, job: str) -> list:
    return [p for p in config.data_dir.rglob("*") if job in str(p)]


def test_deleting_a_job_removes_its_uploaded_files(client, config):
    content = b"uploaded bytes \x00\xff" * 100
    r = client.post("/checksum", data={"FILE": (io.BytesIO(content), "data.bin")},
                    content_type="multipart/form-data")
    assert r.status_code == 303
    path = path_of(r.headers["Location"])
    stored = [p for p in files_of(config, job_id(path)) if p.is_file()]
    assert any(p.read_bytes() == content for p in stored)
    assert client.delete(path).status_code == 303
    assert files_of(config, job_id(path)) == []


def test_deleting_a_completed_job_removes_its_files(client, config):
    r = client.post("/checksum", data={"FILE": (io.BytesIO(b"abc"), "data.bin"),
                                       "PHASE": "RUN"},
                    content_type="multipart/form-data")
    path = path_of(r.headers["Location"])
    assert wait_while(client, path, ACTIVE) == "COMPLETED"
    assert files_of(config, job_id(path)) != []
    assert client.delete(path).status_code == 303
    assert files_of(config, job_id(path)) == []
