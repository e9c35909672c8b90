"""Changing a job: PHASE (UWS 1.1 §2.2.3.5–6), executionduration (§2.2.3.4) and
destruction (§2.2.3.3)."""
from __future__ import annotations

import datetime as dt

import pytest

from uws.domain.errors import NotFound
from uws.domain.phases import Phase
from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, make_config
from uwshelp import (
    NIL,
    NS,
    assert_303_to_job,
    create,
    job_id,
    job_xml,
    phase,
    run_to_end,
    text,
    wait_while,
)

STARTED = ("QUEUED", "EXECUTING", "COMPLETED")
MAX_DURATION = 3600                  # the sleep service's max_execution_duration
MAX_LIFETIME = dt.timedelta(days=30)  # the sleep service's max_lifetime


def post_phase(client, path: str, value: str | None, where: str = "/phase"):
    return client.post(f"{path}{where}", data={} if value is None else {"PHASE": value})


def assert_again_is_a_303_no_op(client, path: str, value: str, stays: str, stamp: str):
    """POST PHASE=``value`` once more: a 303 to the job, which stays in phase ``stays``
    with its ``stamp`` (startTime, endTime) unchanged."""
    before = text(job_xml(client, path), stamp)
    assert_303_to_job(post_phase(client, path, value), path)
    job = job_xml(client, path)
    assert text(job, "phase") == stays
    assert text(job, stamp) == before


def executing(client, **params) -> str:
    """A sleep job that is EXECUTING (the local executor runs it)."""
    path = create(client, **params)
    assert post_phase(client, path, "RUN").status_code == 303
    assert wait_while(client, path, ("QUEUED",)) == "EXECUTING"
    return path


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def shown(when: dt.datetime) -> str:
    """How the server writes an instant."""
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


# -- RUN ------------------------------------------------------------------------------------

def test_run_answers_303_to_the_job(client):
    path = create(client, DURATION="0")
    assert_303_to_job(post_phase(client, path, "RUN"), path)


def test_run_leaves_pending_before_the_answer(client):
    path = create(client, DURATION="0")
    post_phase(client, path, "RUN")
    assert phase(client, path) in STARTED
    assert text(job_xml(client, path), "phase") in STARTED


def test_run_makes_the_job_queued_even_with_no_executor(idle):
    client, _ = idle
    path = create(client)
    assert_303_to_job(post_phase(client, path, "RUN"), path)
    assert phase(client, path) == "QUEUED"


def test_run_through_another_services_url_answers_404_and_runs_nothing(idle):
    """A job is of its own service only: its id under another service's URL is no job,
    for a PHASE=RUN too (which would otherwise queue it past that service's holds),
    in the HTTP layer and in the use case behind it alike."""
    client, api = idle
    path = create(client)
    other = path.replace("/sleep/", "/checksum/")
    assert post_phase(client, other, "RUN").status_code == 404
    with pytest.raises(NotFound):
        api.run("checksum", path.rsplit("/", 1)[1])
    assert phase(client, path) == "PENDING"


def test_run_of_a_job_of_a_service_no_longer_served_answers_404(tmp_path, db_url):
    """A job stored for a service this server does not serve (removed from its
    configuration, or another front end's on the same database) is no job here."""
    first = create_app(make_config(tmp_path, db_url, executor="none"))
    first.test_client_class = ValidatingClient
    try:
        path = create(first.test_client())
    finally:
        shutdown(first)
    settings = make_config(tmp_path, db_url, executor="none")
    del settings.services["sleep"]
    narrow = create_app(settings)
    narrow.test_client_class = ValidatingClient
    try:
        assert post_phase(narrow.test_client(), path, "RUN").status_code == 404
        store = narrow.extensions["uws"].store
        assert store.phase_of(job_id(path), "sleep", None) is Phase.PENDING
    finally:
        shutdown(narrow)


@pytest.mark.parametrize("service", ["sleep", "nosuch"])
def test_run_of_an_id_with_a_nul_answers_404(idle, service):
    client, _ = idle
    assert post_phase(client, f"/{service}/a%00b", "RUN").status_code == 404


def test_the_store_runs_a_job_under_its_own_service_only(idle):
    """The store's RUN finds the job by id and service, whatever its caller checked."""
    client, api = idle
    path = create(client)
    owner = api.store.owner_of(job_id(path), "sleep")
    assert api.store.run_job(job_id(path), "checksum", owner) is None
    assert phase(client, path) == "PENDING"
    assert api.store.run_job(job_id(path), "sleep", owner) == "QUEUED"


def test_run_on_a_queued_job_is_a_303_no_op(idle):
    client, _ = idle
    path = create(client)
    post_phase(client, path, "RUN")
    assert_303_to_job(post_phase(client, path, "RUN"), path)
    assert phase(client, path) == "QUEUED"


def test_run_on_an_executing_job_is_a_303_no_op(idle):
    client, api = idle
    path = create(client)
    post_phase(client, path, "RUN")
    assert api.store.mark_executing(job_id(path))
    assert_again_is_a_303_no_op(client, path, "RUN", "EXECUTING", "startTime")


def test_run_on_a_completed_job_answers_403(client):
    path = create(client, DURATION="0")
    assert run_to_end(client, path) == "COMPLETED"
    assert post_phase(client, path, "RUN").status_code == 403
    assert phase(client, path) == "COMPLETED"


def test_run_on_an_aborted_job_answers_403(client):
    path = create(client, DURATION="0")
    post_phase(client, path, "ABORT")
    assert post_phase(client, path, "RUN").status_code == 403
    assert phase(client, path) == "ABORTED"


def test_run_on_a_failed_job_answers_403(client):
    path = create(client, DURATION="0", FAIL="true")
    assert run_to_end(client, path) == "ERROR"
    assert post_phase(client, path, "RUN").status_code == 403
    assert phase(client, path) == "ERROR"


def test_run_completes_a_short_job(client):
    path = create(client, DURATION="0")
    assert run_to_end(client, path) == "COMPLETED"


# -- ABORT ----------------------------------------------------------------------------------

def test_abort_of_a_pending_job_answers_303_and_aborts_it(client):
    path = create(client)
    assert_303_to_job(post_phase(client, path, "ABORT"), path)
    job = job_xml(client, path)
    assert text(job, "phase") == "ABORTED"
    assert job.find("uws:endTime", NS).get(NIL) is None
    assert text(job, "endTime").endswith("Z")


def test_abort_of_a_queued_job_aborts_it(idle):
    client, _ = idle
    path = create(client)
    post_phase(client, path, "RUN")
    assert_303_to_job(post_phase(client, path, "ABORT"), path)
    assert phase(client, path) == "ABORTED"


def test_abort_of_an_executing_job_answers_303_and_aborts_it(client):
    path = executing(client, DURATION="30")
    assert_303_to_job(post_phase(client, path, "ABORT"), path)
    job = job_xml(client, path)
    assert text(job, "phase") == "ABORTED"
    assert text(job, "endTime") >= text(job, "startTime")


def test_abort_stops_the_work_for_good(client):
    path = executing(client, DURATION="2")
    assert_303_to_job(post_phase(client, path, "ABORT"), path)
    # By the time a 2.5 s job has run to its end, the aborted work would have finished.
    assert run_to_end(client, create(client, DURATION="2.5")) == "COMPLETED"
    job = job_xml(client, path)
    assert text(job, "phase") == "ABORTED"
    assert job.findall("uws:results/uws:result", NS) == []


def test_abort_of_an_aborted_job_is_a_303_no_op(client):
    path = create(client)
    post_phase(client, path, "ABORT")
    assert_again_is_a_303_no_op(client, path, "ABORT", "ABORTED", "endTime")


def test_abort_of_a_completed_job_answers_403_and_changes_nothing(client):
    path = create(client, DURATION="0")
    assert run_to_end(client, path) == "COMPLETED"
    before = client.get(path).data
    assert post_phase(client, path, "ABORT").status_code == 403
    assert client.get(path).data == before


def test_abort_of_a_failed_job_answers_403(client):
    path = create(client, DURATION="0", FAIL="true")
    assert run_to_end(client, path) == "ERROR"
    assert post_phase(client, path, "ABORT").status_code == 403
    assert phase(client, path) == "ERROR"


@pytest.mark.parametrize("value", ["RUN", "ABORT"])
def test_run_or_abort_of_an_archived_job_answers_403(client, api, value):
    path = create(client)
    assert api.store.mark_aborted(job_id(path))
    assert api.store.archive(job_id(path))
    assert post_phase(client, path, value).status_code == 403
    assert phase(client, path) == "ARCHIVED"


# -- other PHASE values ---------------------------------------------------------------------

@pytest.mark.parametrize("value", ["SUSPEND", "FOO", "", "PENDING", "COMPLETED"])
def test_other_phase_values_answer_400(client, value):
    path = create(client)
    assert post_phase(client, path, value).status_code == 400
    assert phase(client, path) == "PENDING"


def test_missing_phase_answers_400(client):
    path = create(client)
    assert post_phase(client, path, None).status_code == 400
    assert phase(client, path) == "PENDING"


# -- PHASE posted to the job itself (uws-client aborts there) -------------------------------------

def test_abort_posted_to_the_job_aborts_it(client):
    path = create(client)
    assert_303_to_job(post_phase(client, path, "ABORT", where=""), path)
    assert phase(client, path) == "ABORTED"


def test_run_posted_to_the_job_starts_it(client):
    path = create(client, DURATION="0")
    assert_303_to_job(post_phase(client, path, "RUN", where=""), path)
    assert phase(client, path) in STARTED


def test_bad_phase_posted_to_the_job_answers_400(client):
    path = create(client)
    assert post_phase(client, path, "SUSPEND", where="").status_code == 400
    assert phase(client, path) == "PENDING"


# -- executionduration ------------------------------------------------------------------------

def post_duration(client, path: str, value: str):
    return client.post(f"{path}/executionduration", data={"EXECUTIONDURATION": value})


def duration(client, path: str) -> str:
    return client.get(f"{path}/executionduration").get_data(as_text=True)


def test_execution_duration_post_answers_303_and_is_shown(client):
    path = create(client)
    assert_303_to_job(post_duration(client, path, "120"), path)
    assert duration(client, path) == "120"
    assert text(job_xml(client, path), "executionDuration") == "120"


def test_execution_duration_is_clamped_to_the_service_maximum(client):
    path = create(client)
    assert_303_to_job(post_duration(client, path, "100000"), path)
    assert duration(client, path) == str(MAX_DURATION)
    assert text(job_xml(client, path), "executionDuration") == str(MAX_DURATION)


def test_unlimited_execution_duration_is_clamped_to_the_service_maximum(client):
    path = create(client)
    assert_303_to_job(post_duration(client, path, "0"), path)
    assert duration(client, path) == str(MAX_DURATION)


@pytest.mark.parametrize("value", ["abc", "", "10s", "nan", "inf", "-5", "-0.5"])
def test_bad_execution_duration_answers_400(client, value):
    path = create(client)
    assert post_duration(client, path, value).status_code == 400
    assert duration(client, path) == "600"


def test_execution_duration_cannot_change_once_the_job_ran(client):
    path = create(client, DURATION="0")
    assert run_to_end(client, path) == "COMPLETED"
    assert post_duration(client, path, "120").status_code == 403
    assert duration(client, path) == "600"


# -- destruction ------------------------------------------------------------------------------

def post_destruction(client, path: str, value: str):
    return client.post(f"{path}/destruction", data={"DESTRUCTION": value})


def destruction(client, path: str) -> str:
    return client.get(f"{path}/destruction").get_data(as_text=True)


IN_TWO_DAYS = (utc_now() + dt.timedelta(days=2)).replace(microsecond=0)
_T = IN_TWO_DAYS


@pytest.mark.parametrize("sent,expected", [
    (_T.strftime("%Y-%m-%dT%H:%M:%SZ"), _T),
    (_T.strftime("%Y-%m-%dT%H:%M:%S.250Z"), _T.replace(microsecond=250000)),
    (_T.strftime("%Y-%m-%dT%H:%M:%S.123456Z"), _T.replace(microsecond=123000)),   # pyvo
    (_T.strftime("%Y-%m-%dT%H:%M:%S"), _T),                                       # no zone: UTC
    ((_T + dt.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S+02:00"), _T),
    ((_T - dt.timedelta(hours=5)).strftime("%Y-%m-%dT%H:%M:%S-05:00"), _T),
], ids=["Z", "millis", "micros", "no-zone", "plus-offset", "minus-offset"])
def test_destruction_post_accepts_iso_8601_forms(client, sent, expected):
    path = create(client)
    assert_303_to_job(post_destruction(client, path, sent), path)
    assert destruction(client, path) == shown(expected)
    assert text(job_xml(client, path), "destruction") == shown(expected)


@pytest.mark.parametrize("sent", ["2100", "2100-01", "21000101", "21000101T000000Z"])
def test_destruction_accepts_reduced_precision_and_basic_format(client, sent):
    path = create(client)
    created = dt.datetime.strptime(text(job_xml(client, path), "creationTime"),
                                   "%Y-%m-%dT%H:%M:%S.%fZ")
    assert_303_to_job(post_destruction(client, path, sent), path)
    assert destruction(client, path) == shown(created + MAX_LIFETIME)    # granted, clamped


@pytest.mark.parametrize("value", ["2001-01-01T00:00:00Z", "garbage", "", "2030-13-45T00:00:00Z"])
def test_bad_or_past_destruction_answers_400(client, value):
    path = create(client)
    before = destruction(client, path)
    assert post_destruction(client, path, value).status_code == 400
    assert destruction(client, path) == before


def test_destruction_is_clamped_to_the_maximum_lifetime(client):
    path = create(client)
    assert_303_to_job(post_destruction(client, path, "2100-01-01T00:00:00Z"), path)
    job = job_xml(client, path)
    created = dt.datetime.strptime(text(job, "creationTime"), "%Y-%m-%dT%H:%M:%S.%fZ")
    assert text(job, "destruction") == shown(created + MAX_LIFETIME)
    assert destruction(client, path) == shown(created + MAX_LIFETIME)


def test_missing_destruction_value_answers_400(client):
    path = create(client)
    assert client.post(f"{path}/destruction", data={}).status_code == 400


def test_missing_execution_duration_value_answers_400(client):
    path = create(client)
    assert client.post(f"{path}/executionduration", data={}).status_code == 400
