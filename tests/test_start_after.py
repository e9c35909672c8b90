"""STARTAFTER: a job run with it stays QUEUED until then, and is taken within
about a second of that time; changeable while PENDING; the quote accounts for it."""
from __future__ import annotations

import datetime as dt

import pytest

from uws.domain import estimates, timeutil
from uws.domain.model import Job
from uws.domain.phases import Phase
from uws.domain.timeutil import format_time, parse_time

from conftest import assert_valid_uws, make_config
from uwshelp import NS, create, job_xml, phase, settle, text, wait_for

Q = {"q": "urn:ivoa-uws-server:queue", **NS}


@pytest.fixture
def config(tmp_path, db_url):
    return make_config(tmp_path, db_url)    # the demo services, run by the local executor


def in_seconds(seconds: float) -> dt.datetime:
    """A time that far ahead, to the millisecond: what a STARTAFTER written from it says
    (a job may start within that millisecond, before the microseconds dropped)."""
    t = timeutil.add_seconds(timeutil.now(), seconds)
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


def start_after(client, path: str) -> str | None:
    return job_xml(client, path).find("uws:jobInfo/q:queue", Q).get("startAfter")


def test_a_job_run_with_startafter_stays_queued_until_then_and_starts_soon_after(client):
    when = in_seconds(2)
    path = create(client, DURATION="0", STARTAFTER=format_time(when), PHASE="RUN")
    assert phase(client, path) == "QUEUED"
    assert start_after(client, path) == format_time(when)
    assert settle(client, path).status_code == 200
    started = parse_time(text(job_xml(client, path), "startTime"))
    assert when <= started <= when + dt.timedelta(seconds=1.5)


def test_a_startafter_in_the_past_runs_at_once(client):
    path = create(client, DURATION="0", STARTAFTER="2001-01-01T00:00:00Z", PHASE="RUN")
    assert settle(client, path, timeout=10)
    assert phase(client, path) == "COMPLETED"


def test_an_abort_before_the_start_time_means_the_job_never_runs(client):
    # A lead long enough that a loaded machine still aborts before the start time
    # (with 1 s, a CI run once took longer to create and abort, and the job ran).
    when = in_seconds(4)
    path = create(client, DURATION="0", STARTAFTER=format_time(when), PHASE="RUN")
    assert client.post(f"{path}/phase", data={"PHASE": "ABORT"}).status_code == 303
    assert timeutil.now() < when, "aborted after the start time: the test proves nothing"
    later = when + dt.timedelta(seconds=1.5)    # past the time it would have been taken
    wait_for(lambda: timeutil.now() > later, timeout=10, step=0.1)
    doc = job_xml(client, path)
    assert text(doc, "phase") == "ABORTED"
    assert doc.find("uws:startTime", NS).get("{http://www.w3.org/2001/XMLSchema-instance}nil")


@pytest.mark.parametrize("value", ["tomorrow", "2026-13-01", ""])
def test_a_startafter_that_is_not_a_time_is_refused(client, value):
    r = client.post("/sleep", data={"STARTAFTER": value})
    assert r.status_code == 400
    assert b"STARTAFTER" in r.data


def test_a_reduced_precision_startafter_is_the_first_instant_it_names(client):
    path = create(client, STARTAFTER="2031-06")
    assert start_after(client, path) == "2031-06-01T00:00:00.000Z"


def test_the_start_time_changes_while_pending(client):
    path = create(client)
    assert client.post(path, data={"STARTAFTER": "2040-01-01T12:00:00Z"}).status_code == 303
    assert start_after(client, path) == "2040-01-01T12:00:00.000Z"


def test_the_start_time_cannot_change_once_queued(client):
    path = create(client, STARTAFTER="2040-01-01", PHASE="RUN")
    assert client.post(path, data={"STARTAFTER": "2041-01-01"}).status_code == 403
    assert start_after(client, path) == "2040-01-01T00:00:00.000Z"


def test_a_bad_start_time_in_a_post_changes_nothing(client):
    path = create(client)
    assert client.post(path, data={"STARTAFTER": "soon", "PHASE": "RUN"}).status_code == 400
    assert phase(client, path) == "PENDING"


def test_the_job_page_shows_the_start_time(client):
    path = create(client, STARTAFTER="2040-01-01T12:00:00Z")
    page = client.get(path, headers={"Accept": "text/html"}).get_data(as_text=True)
    assert 'data-role="start-after"' in page
    assert "2040-01-01" in page


def test_the_quote_counts_from_the_start_time_when_it_is_later():
    now = timeutil.now()
    job = Job(id="0" * 32, service="s", owner="", phase=Phase.QUEUED, creation_time=now,
              execution_duration=0, destruction=None, start_after=now + dt.timedelta(hours=1))
    assert estimates.quote(job, now, 10.0, 0, 1) == now + dt.timedelta(hours=1, seconds=10)
    job.start_after = now - dt.timedelta(hours=1)
    assert estimates.quote(job, now, 10.0, 0, 1) == now + dt.timedelta(seconds=10)


def test_the_json_job_document_shows_the_queue_info():
    from uws.render import json as jsonr
    from uws.render.xml import Links
    when = dt.datetime(2040, 1, 1, 12)
    job = Job(id="0" * 32, service="s", owner="", phase=Phase.PENDING,
              creation_time=when, execution_duration=0, destruction=None, start_after=when)
    info = jsonr.job(job, Links("http://x/s/" + "0" * 32))["jobInfo"]["queue"]
    assert info == {"priority": 0, "startAfter": "2040-01-01T12:00:00.000Z", "attempt": 1,
                    "failedAttempts": []}


def test_every_job_document_with_queue_info_is_valid_uws(client):
    path = create(client, STARTAFTER="2040-01-01", PRIORITY="0")
    r = client.get(path)
    assert r.status_code == 200, r.data
    assert_valid_uws(r.data)


@pytest.fixture
def cluster(tmp_path):
    from queuehelp import queue_cluster
    cluster = queue_cluster(tmp_path, slots=2)
    yield cluster
    cluster.stop()


def test_celery_workers_take_a_job_within_about_a_second_of_its_start_time(cluster):
    import requests

    from queuehelp import ran, run
    front = cluster.front_end()
    cluster.worker()
    ready = run(front)      # once it has run, the worker is up and listening
    wait_for(lambda: ran(cluster) == [ready], timeout=60, step=0.1)
    when = in_seconds(3)
    job_id = run(front, STARTAFTER=format_time(when))
    assert requests.get(f"{front}/work/{job_id}/phase", timeout=30).text == "QUEUED"
    wait_for(lambda: ran(cluster) == [ready, job_id], timeout=60, step=0.05)
    assert when <= timeutil.now() <= when + dt.timedelta(seconds=1.5)


def test_a_celery_worker_retries_a_transient_exit_keeping_the_job_id(cluster):
    import requests

    from queuehelp import ran, run
    front = cluster.front_end()
    cluster.worker()
    job_id = run(front, FLAKY="1")
    wait_for(lambda: requests.get(f"{front}/work/{job_id}/phase", timeout=30).text
             == "COMPLETED", timeout=60, step=0.2)
    assert ran(cluster) == [job_id, job_id]


def test_the_creation_form_refuses_a_start_time_that_is_not_a_time_next_to_its_field(client):
    r = client.post("/sleep", data={"STARTAFTER": "soon"}, headers={"Accept": "text/html"})
    assert r.status_code == 400
    assert 'id="new-STARTAFTER"' in r.get_data(as_text=True)
    assert "not an ISO 8601 time" in r.get_data(as_text=True)


def test_the_creation_form_takes_a_start_time(client):
    r = client.post("/sleep", data={"STARTAFTER": "2040-01-01T12:00", "PRIORITY": ""},
                    headers={"Accept": "text/html"})
    assert r.status_code == 303
    assert start_after(client, r.headers["Location"].replace("http://localhost", "")) == \
        "2040-01-01T12:00:00.000Z"
