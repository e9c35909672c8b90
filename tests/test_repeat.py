"""ACTION=REPEAT: POST {job} makes a new PENDING job of the caller's with the same
parameters, uploads (copied) and RUNID, and answers 303 to it."""
from __future__ import annotations

import io

import lxml.html
import pytest

from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, make_config
from test_holds import _app as holds_app
from test_holds import basic
from uwshelp import phase, wait_for

CHECKSUM = {"runner": "uws.demo:checksum",
            "parameters": [{"name": "FILE", "type": "file", "required": True}]}
SLEEP = {"runner": "uws.demo:sleep",
         "parameters": [{"name": "DURATION", "type": "float", "default": 0},
                        {"name": "FAIL", "type": "boolean", "default": False},
                        {"name": "MESSAGE", "type": "string", "default": ""}]}

#: A service with priorities and callbacks to 127.0.0.1.
RANKED = {**SLEEP, "priority_min": 0, "priority_max": 5, "priority_default": 2,
          "callback_hosts": ["127.0.0.1"]}


@pytest.fixture
def make_client(tmp_path, db_url):
    made = []

    def make(**settings):
        cfg = make_config(tmp_path, db_url, services={"c": CHECKSUM, "s": SLEEP, "p": RANKED},
                          scheduler=False, **settings)
        application = create_app(cfg)
        application.test_client_class = ValidatingClient
        made.append(application)
        return application.test_client()

    yield make
    for application in made:
        shutdown(application)


@pytest.fixture
def client(make_client):
    return make_client(executor="none")


def location(r) -> str:
    assert r.status_code == 303, r.data
    return r.headers["Location"].replace("http://localhost", "")


def create(client, service="s", **data) -> str:
    return location(client.post(f"/{service}", data=data, content_type="multipart/form-data"))


def repeat(client, path, **data):
    return client.post(path, data={"ACTION": "REPEAT", **data})


def test_repeat_answers_303_to_a_new_pending_job(client):
    path = create(client, DURATION="2", RUNID="nightly", PHASE="RUN")
    copy = location(repeat(client, path))
    assert copy != path and copy.startswith("/s/")
    assert phase(client, copy) == "PENDING"


def test_the_repeated_job_has_the_same_parameters_and_run_id(client):
    path = create(client, DURATION="2", MESSAGE="hello", RUNID="nightly")
    copy = location(repeat(client, path))
    assert client.get(f"{copy}/parameters/MESSAGE").data == b"hello"
    assert client.get(f"{copy}/parameters/DURATION").data == b"2"
    assert b"<uws:runId>nightly</uws:runId>" in client.get(copy).data


def test_repeat_with_phase_run_queues_the_new_job(client):
    path = create(client)
    assert phase(client, location(repeat(client, path, PHASE="RUN"))) == "QUEUED"


def test_uploads_are_copied_not_shared(client, tmp_path):
    path = create(client, "c", FILE=(io.BytesIO(b"data one"), "f.bin"))
    copy = location(repeat(client, path))
    assert client.get(f"{copy}/parameters/FILE").data == b"data one"
    assert client.delete(path).status_code == 303
    assert client.get(f"{copy}/parameters/FILE").data == b"data one"
    files = list((tmp_path / "data" / "jobs").rglob("uploads/FILE"))
    assert len(files) == 1 and files[0].stat().st_nlink == 1


def test_a_finished_job_repeated_runs_again_to_completion(make_client):
    client = make_client()
    path = create(client, DURATION="0", PHASE="RUN")
    wait_for(lambda: phase(client, path) == "COMPLETED", timeout=30)
    copy = location(repeat(client, path, PHASE="RUN"))
    wait_for(lambda: phase(client, copy) == "COMPLETED", timeout=30)


def test_repeat_counts_against_the_owners_job_quota(tmp_path, db_url):
    cfg = make_config(tmp_path, db_url, executor="none", scheduler=False,
                      services={"s": {**SLEEP, "anonymous_max_jobs": 1}})
    application = create_app(cfg)
    try:
        client = application.test_client()
        path = create(client)
        assert repeat(client, path).status_code == 403
        assert client.head("/s").headers["X-Job-Count"] == "1"
    finally:
        shutdown(application)


@pytest.mark.parametrize("extra", [
    {"DURATION": "5"}, {"RUNID": "other"}, {"PHASE": "ABORT"}, {"PRIORITY": "0"},
    {"STARTAFTER": "2030-01-01T00:00:00Z"}, {"CALLBACK": "http://127.0.0.1:1/x"},
    {"METHOD": "DELETE"}])
def test_repeat_with_anything_but_phase_run_answers_400(client, extra):
    path = create(client)
    assert repeat(client, path, **extra).status_code == 400
    assert client.head("/s").headers["X-Job-Count"] == "1"


def test_an_unknown_action_still_answers_400(client):
    path = create(client)
    assert client.post(path, data={"ACTION": "COPY"}).status_code == 400


def test_delete_still_works_as_an_action(client):
    path = create(client)
    assert client.post(path, data={"ACTION": "DELETE"}).status_code == 303
    assert client.get(path).status_code == 404


def test_repeating_a_job_that_does_not_exist_answers_404(client):
    assert repeat(client, "/s/" + "0" * 32).status_code == 404


def test_a_finished_jobs_page_has_a_repeat_button(make_client):
    client = make_client()
    path = create(client, DURATION="0", PHASE="RUN")
    wait_for(lambda: phase(client, path) == "COMPLETED", timeout=30)
    assert repeat_form(client, path).get("hidden") is None


def test_an_unfinished_jobs_repeat_button_is_hidden(client):
    assert repeat_form(client, create(client)).get("hidden") is not None


def repeat_form(client, path):
    page = lxml.html.fromstring(client.get(path, headers={"Accept": "text/html"}).data)
    (form,) = page.xpath('//form[input[@name="ACTION" and @value="REPEAT"]]')
    return form


def test_another_owner_cannot_repeat_a_job(tmp_path, db_url):
    application = holds_app(tmp_path, db_url, executor="none")
    try:
        client = application.test_client()
        r = client.post("/s", data={"DURATION": "0"}, headers=basic("alice"))
        path = location(r)
        assert client.post(path, data={"ACTION": "REPEAT"},
                           headers=basic("bob")).status_code == 403
        assert client.head("/s", headers=basic("bob")).headers["X-Job-Count"] == "0"
    finally:
        shutdown(application)


def queue_and_callback(client, path, headers=None) -> tuple[int, str | None]:
    info = client.get(path, headers={**(headers or {}), "Accept": "application/json"}
                      ).get_json()["jobInfo"]
    return info["queue"]["priority"], info.get("callback", {}).get("url")


def test_the_repeated_job_keeps_the_priority_and_the_callback(client):
    path = create(client, "p", PRIORITY="4", CALLBACK="http://127.0.0.1:9/done")
    copy = location(repeat(client, path))
    assert queue_and_callback(client, copy) == (4, "http://127.0.0.1:9/done")


def test_a_priority_set_by_an_administrator_beyond_the_owners_bounds_is_not_copied(
        tmp_path, db_url):
    application = holds_app(tmp_path, db_url, services={"p": RANKED}, executor="none")
    try:
        client = application.test_client()
        path = location(client.post("/p", data={"PRIORITY": "4"}, headers=basic("alice")))
        assert client.post(path, data={"PRIORITY": "9"}, headers=basic("root")).status_code == 303
        copy = location(client.post(path, data={"ACTION": "REPEAT"}, headers=basic("alice")))
        assert queue_and_callback(client, copy, basic("alice")) == (2, None)
    finally:
        shutdown(application)
