"""End to end with the real pyvo client (1.9.x) against the server over HTTP.

pyvo is what most astronomers drive UWS services with, so these tests check the
server from pyvo's side: ``AsyncTAPJob`` for one job (run, wait, abort, delete,
execution duration, destruction, results, errors), ``TAPService`` for the job
list, and ``pyvo.io.uws.parse_job``/``parse_job_list`` on real responses.
Every test runs on SQLite and PostgreSQL (through the ``live_server`` fixture).
"""
from __future__ import annotations

import datetime as dt
import io
import time
from urllib.parse import urlsplit

import pytest
import requests
from pyvo.dal.exceptions import DALQueryError, DALServiceError
from pyvo.dal.tap import AsyncTAPJob, TAPService
from pyvo.io.uws import parse_job, parse_job_list

from uws.web.app import create_app, shutdown

from conftest import LiveServer, make_config
from uwshelp import wait_for

#: one database is enough here (the client's side of the protocol; the protocol tests cover both
#: databases; tests/README.rst)
BACKENDS = ("sqlite",)

ACTIVE_OR_DONE = {"QUEUED", "EXECUTING", "COMPLETED"}
HTTP_TIMEOUT = 30


# -- helpers ----------------------------------------------------------------------------

def create(base: str, service: str = "sleep", **params) -> str:
    """POST a new job (form-encoded) and return its absolute URL from the 303."""
    r = requests.post(f"{base}/{service}", data=params, allow_redirects=False,
                      timeout=HTTP_TIMEOUT)
    assert r.status_code == 303, r.text
    return r.headers["Location"]


def job_xml(job_url: str) -> bytes:
    r = requests.get(job_url, timeout=HTTP_TIMEOUT)
    assert r.status_code == 200, r.text
    return r.content


def wait_for_phase(job: AsyncTAPJob, phases: set[str], timeout: float = 15) -> str:
    """Poll ``job.phase`` (pyvo GETs the job each time) until it is in ``phases``."""
    deadline = time.monotonic() + timeout
    while True:
        phase = job.phase
        if phase in phases or time.monotonic() > deadline:
            return phase
        time.sleep(0.05)


def utc(t) -> dt.datetime:
    """An astropy Time (as pyvo parses UWS times) as a naive UTC datetime."""
    return t.to_datetime()


@pytest.fixture
def url(live_server) -> str:
    return live_server.url


# -- reading a job ---------------------------------------------------------------------

def test_pyvo_reads_phase_of_new_job_as_pending(url):
    job = AsyncTAPJob(create(url, DURATION="5"))
    assert job.phase == "PENDING"


def test_pyvo_job_id_is_last_segment_of_job_url(url):
    job_url = create(url, DURATION="5")
    job = AsyncTAPJob(job_url)
    assert job.job_id == urlsplit(job_url).path.rsplit("/", 1)[-1]
    assert job.url == job_url


def test_pyvo_reports_uws_version_1_1(url):
    job = AsyncTAPJob(create(url, DURATION="5"))
    assert job.uws_version == "1.1"


def test_pyvo_follows_creation_redirect_to_job(url):
    """pyvo's create path: requests follows the 303 and the final URL is the job."""
    r = requests.post(f"{url}/sleep", data={"DURATION": "5"}, timeout=HTTP_TIMEOUT)
    assert r.status_code == 200
    assert [h.status_code for h in r.history] == [303]
    job = AsyncTAPJob(r.url)
    assert job.phase == "PENDING"
    assert r.url.endswith("/sleep/" + job.job_id)


# -- run and wait ------------------------------------------------------------------------

def test_pyvo_run_leaves_job_active_not_pending(url):
    job = AsyncTAPJob(create(url, DURATION="2"))
    job.run()
    assert job.phase in ACTIVE_OR_DONE


def test_create_with_phase_run_leaves_job_active_not_pending(url):
    job = AsyncTAPJob(create(url, DURATION="2", PHASE="RUN"))
    assert job.phase in ACTIVE_OR_DONE


def test_pyvo_wait_reaches_completed(url):
    job = AsyncTAPJob(create(url, DURATION="0.5"))
    job.run()
    job.wait(timeout=30)
    assert job.phase == "COMPLETED"


def test_pyvo_wait_returns_soon_after_job_finishes(url):
    """pyvo's wait() uses WAIT=-1: it should return as the job ends, not after
    polling sleeps or the server's wait_max (10 s in the test config)."""
    job = AsyncTAPJob(create(url, DURATION="1"))
    started = time.monotonic()
    job.run()
    job.wait(timeout=30)
    elapsed = time.monotonic() - started
    assert job.phase == "COMPLETED"
    assert elapsed < 3.0, f"wait() took {elapsed:.2f} s for a 1 s job"


def test_pyvo_run_twice_is_harmless(url):
    job = AsyncTAPJob(create(url, DURATION="0.5"))
    job.run()
    job.run()           # RUN on a QUEUED/EXECUTING job: a no-op 303, no error
    job.wait(timeout=30)
    assert job.phase == "COMPLETED"


# -- results -------------------------------------------------------------------------------

def test_pyvo_results_list_result_with_size_and_mime_type(url):
    job = AsyncTAPJob(create(url, DURATION="0.1", MESSAGE="hello pyvo"))
    job.run().wait(timeout=30)
    results = job.results
    assert [r.id_ for r in results] == ["result"]
    (result,) = results
    assert result.mimetype == "text/plain"
    body = requests.get(result.href, timeout=HTTP_TIMEOUT).content
    assert result.size == len(body)


def test_pyvo_result_uri_fetches_result_content(url):
    job = AsyncTAPJob(create(url, DURATION="0.1", MESSAGE="hello pyvo"))
    job.run().wait(timeout=30)
    uri = job.result_uri
    assert uri == f"{job.url}/results/result"
    r = requests.get(uri, timeout=HTTP_TIMEOUT)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain")
    assert r.text == "slept 0.1 s\nhello pyvo\n"


def test_pyvo_result_hrefs_are_absolute_on_the_clients_host(url):
    job = AsyncTAPJob(create(url, DURATION="0"))
    job.run().wait(timeout=30)
    assert job.result_uris and all(u.startswith(url + "/sleep/") for u in job.result_uris)


# -- abort ---------------------------------------------------------------------------------

def test_pyvo_abort_of_executing_job_ends_aborted(url):
    job = AsyncTAPJob(create(url, DURATION="30"))
    job.run()
    assert wait_for_phase(job, {"EXECUTING"}) == "EXECUTING"
    started = time.monotonic()
    job.abort()
    assert job.phase == "ABORTED"
    assert time.monotonic() - started < 5


def test_pyvo_aborted_job_stays_aborted(url, api):
    """The interrupted runner must not turn the job COMPLETED or ERROR afterwards."""
    job = AsyncTAPJob(create(url, DURATION="30"))
    job.run()
    assert wait_for_phase(job, {"EXECUTING"}) == "EXECUTING"
    job.abort()
    # the executor has ended the job's process and recorded what it had to
    wait_for(lambda: job.job_id not in api.executor.running_ids, timeout=10)
    assert job.phase == "ABORTED"
    assert list(job.results) == []


def test_pyvo_abort_of_pending_job_ends_aborted(url):
    job = AsyncTAPJob(create(url, DURATION="30"))
    job.abort()
    assert job.phase == "ABORTED"


# -- delete --------------------------------------------------------------------------------

def test_pyvo_delete_then_get_is_404(url):
    job_url = create(url, DURATION="5")
    job = AsyncTAPJob(job_url)
    job.delete()
    assert requests.get(job_url, timeout=HTTP_TIMEOUT).status_code == 404
    with pytest.raises(DALServiceError):
        AsyncTAPJob(job_url)


def test_pyvo_delete_of_executing_job_then_get_is_404(url):
    job_url = create(url, DURATION="30")
    job = AsyncTAPJob(job_url)
    job.run()
    assert wait_for_phase(job, {"EXECUTING"}) == "EXECUTING"
    job.delete()
    assert requests.get(job_url, timeout=HTTP_TIMEOUT).status_code == 404


def test_pyvo_delete_answers_303_to_job_list(url):
    seen = []
    session = requests.Session()
    session.hooks["response"].append(lambda r, *a, **k: seen.append(r))
    job_url = create(url, DURATION="5")
    job = AsyncTAPJob(job_url, session=session)
    job.delete()
    deletes = [r for r in seen if r.request.method == "DELETE"]
    assert len(deletes) == 1
    assert deletes[0].status_code == 303
    location = deletes[0].headers["Location"]
    assert urlsplit(location).path == "/sleep"
    listing = requests.get(location, timeout=HTTP_TIMEOUT)
    assert listing.status_code == 200
    assert job.job_id not in listing.text


def test_pyvo_context_manager_deletes_job_on_exit(url):
    job_url = create(url, DURATION="0")
    with AsyncTAPJob(job_url) as job:
        job.run().wait(timeout=30)
        assert job.phase == "COMPLETED"
    assert requests.get(job_url, timeout=HTTP_TIMEOUT).status_code == 404


# -- execution duration and destruction --------------------------------------------------

def test_pyvo_execution_duration_setter_round_trips(url):
    job = AsyncTAPJob(create(url, DURATION="5"))
    job.execution_duration = 120
    assert job.execution_duration.sec == 120
    r = requests.get(f"{job.url}/executionduration", timeout=HTTP_TIMEOUT)
    assert r.text.strip() == "120"


def test_pyvo_execution_duration_setter_is_clamped_to_service_maximum(url):
    job = AsyncTAPJob(create(url, DURATION="5"))
    job.execution_duration = 10 ** 6        # the demo service grants at most 3600 s
    assert job.execution_duration.sec == 3600


def test_pyvo_execution_duration_cannot_change_while_executing(url):
    job = AsyncTAPJob(create(url, DURATION="30"))
    job.run()
    assert wait_for_phase(job, {"EXECUTING"}) == "EXECUTING"
    before = job.execution_duration.sec
    with pytest.raises(DALServiceError):
        job.execution_duration = 42
    assert job.execution_duration.sec == before
    job.abort()


def test_pyvo_destruction_setter_round_trips(url):
    job = AsyncTAPJob(create(url, DURATION="5"))
    wanted = (dt.datetime.now(dt.UTC).replace(tzinfo=None)
              + dt.timedelta(days=2)).replace(microsecond=654321)
    job.destruction = wanted        # pyvo sends a six-digit fraction and a Z
    got = utc(job.destruction)
    assert abs(got - wanted) < dt.timedelta(milliseconds=1)


def test_pyvo_destruction_beyond_max_lifetime_is_clamped(url):
    job = AsyncTAPJob(create(url, DURATION="5"))
    created = utc(job._job.creationtime)
    job.destruction = dt.datetime(2100, 1, 1)
    granted = utc(job.destruction)
    # the demo service keeps jobs at most 30 days
    assert abs(granted - (created + dt.timedelta(days=30))) < dt.timedelta(seconds=1)


# -- errors --------------------------------------------------------------------------------

def test_pyvo_failed_job_ends_in_error(url):
    job = AsyncTAPJob(create(url, DURATION="0", FAIL="true", MESSAGE="disk on fire"))
    job.run().wait(timeout=30)
    assert job.phase == "ERROR"


def test_pyvo_raise_if_error_raises_with_server_message(url):
    job = AsyncTAPJob(create(url, DURATION="0", FAIL="true", MESSAGE="disk on fire"))
    job.run().wait(timeout=30)
    with pytest.raises(DALQueryError) as excinfo:
        job.raise_if_error()
    assert "disk on fire" in str(excinfo.value)


# -- pyvo.io.uws parsing of real responses ----------------------------------------------

def test_parse_job_reads_job_id_run_id_and_phase(url):
    job_url = create(url, DURATION="5", RUNID="pyvo-run-7")
    doc = parse_job(io.BytesIO(job_xml(job_url)))
    assert doc.jobid == urlsplit(job_url).path.rsplit("/", 1)[-1]
    assert doc.runid == "pyvo-run-7"
    assert doc.phase == "PENDING"


def test_parse_job_reports_version_1_1(url):
    doc = parse_job(io.BytesIO(job_xml(create(url, DURATION="5"))))
    assert doc.version == "1.1"


def test_parse_job_creation_time_parses_as_utc_near_now(url):
    before = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    doc = parse_job(io.BytesIO(job_xml(create(url, DURATION="5"))))
    after = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    created = utc(doc.creationtime)
    # the wire carries milliseconds, so allow the truncation
    assert before - dt.timedelta(milliseconds=1) <= created <= after


def test_parse_job_reads_execution_duration_and_destruction(url):
    doc = parse_job(io.BytesIO(job_xml(create(url, DURATION="5"))))
    assert doc.executionduration.sec == 600                 # demo default
    lifetime = utc(doc.destruction) - utc(doc.creationtime)
    assert abs(lifetime - dt.timedelta(days=7)) < dt.timedelta(seconds=1)


def test_parse_job_reads_parameters(url):
    job_url = create(url, DURATION="2.5", MESSAGE="a <b> & c")
    doc = parse_job(io.BytesIO(job_xml(job_url)))
    values = {p.id_.upper(): p.content for p in doc.parameters}
    assert values["DURATION"] == "2.5"
    assert values["MESSAGE"] == "a <b> & c"


def test_parse_job_reads_results_with_size_and_mime_type(url):
    job = AsyncTAPJob(create(url, DURATION="0", MESSAGE="xyz"))
    job.run().wait(timeout=30)
    doc = parse_job(io.BytesIO(job_xml(job.url)))
    assert doc.phase == "COMPLETED"
    (result,) = doc.results
    assert result.id_ == "result"
    assert result.mimetype == "text/plain"
    assert result.href == f"{job.url}/results/result"
    content = requests.get(result.href, timeout=HTTP_TIMEOUT).content
    assert result.size == len(content) > 0


def test_parse_job_reads_start_and_end_times_of_finished_job(url):
    job = AsyncTAPJob(create(url, DURATION="0.3"))
    job.run().wait(timeout=30)
    doc = parse_job(io.BytesIO(job_xml(job.url)))
    created, started, ended = (utc(doc.creationtime), utc(doc.starttime), utc(doc.endtime))
    assert created <= started <= ended
    assert ended - started >= dt.timedelta(milliseconds=250)


def test_parse_job_reads_error_summary_message(url):
    job = AsyncTAPJob(create(url, DURATION="0", FAIL="true", MESSAGE="bad input row 3"))
    job.run().wait(timeout=30)
    doc = parse_job(io.BytesIO(job_xml(job.url)))
    assert doc.phase == "ERROR"
    assert doc.errorsummary is not None
    assert doc.errorsummary.message.content == "bad input row 3"


def test_parse_job_list_reads_jobrefs(url):
    pending = create(url, DURATION="5", RUNID="first")
    aborted = create(url, DURATION="5", RUNID="second")
    requests.post(f"{aborted}/phase", data={"PHASE": "ABORT"}, timeout=HTTP_TIMEOUT)
    r = requests.get(f"{url}/sleep", timeout=HTTP_TIMEOUT)
    assert r.status_code == 200
    jobs = {j.jobid: j for j in parse_job_list(io.BytesIO(r.content))}
    ids = {u.rsplit("/", 1)[-1]: u for u in (pending, aborted)}
    assert set(jobs) == set(ids)
    p, a = jobs[pending.rsplit("/", 1)[-1]], jobs[aborted.rsplit("/", 1)[-1]]
    assert (p.phase, p.runid) == ("PENDING", "first")
    assert (a.phase, a.runid) == ("ABORTED", "second")
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    for j in (p, a):
        assert now - dt.timedelta(minutes=1) < utc(j.creationtime) <= now


def test_parse_job_list_lists_newest_first(url):
    first = create(url, DURATION="5").rsplit("/", 1)[-1]
    time.sleep(0.01)
    second = create(url, DURATION="5").rsplit("/", 1)[-1]
    r = requests.get(f"{url}/sleep", timeout=HTTP_TIMEOUT)
    assert [j.jobid for j in parse_job_list(io.BytesIO(r.content))] == [second, first]


# -- the TAP-shaped job list (pyvo's TAPService expects {base}/async) --------------------

SLEEP_PARAMETERS = [
    {"name": "DURATION", "type": "float", "default": 1, "min": 0, "max": 86400},
    {"name": "FAIL", "type": "boolean", "default": False},
    {"name": "MESSAGE", "type": "string", "default": ""},
]


@pytest.fixture
def tap(tmp_path, db_url):
    """The sleep runner mounted at /async, so pyvo's TAPService finds the job list."""
    cfg = make_config(tmp_path, db_url, services={
        "async": {"runner": "uws.demo:sleep", "parameters": SLEEP_PARAMETERS}})
    app = create_app(cfg)
    try:
        with LiveServer(app) as server:
            yield server.url
    finally:
        shutdown(app)


def test_pyvo_get_job_list_filters_by_phase(tap):
    pending = create(tap, "async", DURATION="5").rsplit("/", 1)[-1]
    aborted = create(tap, "async", DURATION="5").rsplit("/", 1)[-1]
    requests.post(f"{tap}/async/{aborted}/phase", data={"PHASE": "ABORT"},
                  timeout=HTTP_TIMEOUT)
    service = TAPService(tap)
    assert [j.jobid for j in service.get_job_list(phases=["ABORTED"])] == [aborted]
    assert [j.jobid for j in service.get_job_list(phases=["PENDING"])] == [pending]
    both = service.get_job_list(phases=["PENDING", "ABORTED"])
    assert {j.jobid for j in both} == {pending, aborted}


def test_pyvo_get_job_list_last_returns_most_recent(tap):
    ids = []
    for _ in range(3):
        ids.append(create(tap, "async", DURATION="5").rsplit("/", 1)[-1])
        time.sleep(0.01)
    service = TAPService(tap)
    assert [j.jobid for j in service.get_job_list(last=2)] == [ids[2], ids[1]]


def test_pyvo_get_job_list_after_a_jobs_creation_time_excludes_that_job(tap):
    """AFTER is strict: asking for jobs after the creationTime a job shows must
    not return that job (pyvo sends the time with six fractional digits)."""
    service = TAPService(tap)
    first = create(tap, "async", DURATION="5").rsplit("/", 1)[-1]
    time.sleep(0.01)
    second = create(tap, "async", DURATION="5").rsplit("/", 1)[-1]
    shown = service.get_job(first).creationtime
    listed = [j.jobid for j in service.get_job_list(after=utc(shown))]
    assert listed == [second]


def test_pyvo_get_job_list_after_excludes_older_jobs(tap):
    service = TAPService(tap)
    old = create(tap, "async", DURATION="5").rsplit("/", 1)[-1]
    time.sleep(0.05)
    cut = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    time.sleep(0.05)
    new = create(tap, "async", DURATION="5").rsplit("/", 1)[-1]
    listed = [j.jobid for j in service.get_job_list(after=cut)]
    assert new in listed and old not in listed


def test_pyvo_get_job_list_long_description_fetches_each_job(tap):
    job_id = create(tap, "async", DURATION="2.5").rsplit("/", 1)[-1]
    (job,) = TAPService(tap).get_job_list(short_description=False)
    assert job.jobid == job_id
    assert {p.id_.upper(): p.content for p in job.parameters}["DURATION"] == "2.5"


def test_pyvo_get_job_reads_one_job(tap):
    job_id = create(tap, "async", DURATION="5", RUNID="tap-run").rsplit("/", 1)[-1]
    job = TAPService(tap).get_job(job_id)
    assert (job.jobid, job.runid, job.phase, job.version) == (job_id, "tap-run", "PENDING", "1.1")
