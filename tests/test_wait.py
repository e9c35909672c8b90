"""Blocking GET of a job: ``GET {job}?WAIT=n[&PHASE=p]`` (UWS 1.1 §2.2.1.2).

A WAIT blocks while the job is active (PENDING, QUEUED, EXECUTING) and, with
PHASE, still in that phase; it returns as soon as the phase changes (also when
another process sharing the database changes it) or after n seconds, capped by
``wait_max``.  Every test runs on SQLite and PostgreSQL.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest
import requests

from uws.web.app import create_app, shutdown

from conftest import LiveServer, ValidatingClient, assert_valid_uws, make_config
from uwshelp import Waiter, create

UWS = "{http://www.ivoa.net/xml/UWS/v1.0}"
HTTP_TIMEOUT = 60


# -- helpers ------------------------------------------------------------------------------

def phase_of(body: bytes) -> str:
    return assert_valid_uws(body).find(UWS + "phase").text


def http_create(base: str, **params) -> str:
    """Create a sleep job over HTTP; its absolute URL."""
    r = requests.post(f"{base}/sleep", data=params, allow_redirects=False, timeout=HTTP_TIMEOUT)
    assert r.status_code == 303, r.text
    return r.headers["Location"]


def timed_get(client, path: str):
    started = time.monotonic()
    r = client.get(path)
    return r, time.monotonic() - started


def until(predicate, timeout: float) -> bool:
    """Poll ``predicate`` every 10 ms for at most ``timeout`` seconds (synchronisation
    only: the tests assert on what it returns)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def drive_to(client, path: str, phase: str) -> None:
    """Bring a job to a finished ``phase`` (ABORTED, COMPLETED or ERROR)."""
    if phase == "ABORTED":
        assert client.post(f"{path}/phase", data={"PHASE": "ABORT"}).status_code == 303
    else:
        assert client.post(f"{path}/phase", data={"PHASE": "RUN"}).status_code == 303
    assert until(lambda: client.get(f"{path}/phase").get_data(as_text=True).strip() == phase,
                 15), f"job never reached {phase}"


def watch_of(app):
    """The app's WAIT registry (uws.usecases.waiting.PhaseWatch): tells when a waiter is parked."""
    return app.extensions["uws"].watch


# -- returning at once ----------------------------------------------------------------

#: "at once": well under the shortest WAIT asked below (5 s), which a request that
#: blocked would last, and far enough above a request's time for a loaded machine
AT_ONCE = 2.5


@pytest.mark.parametrize("phase", ["ABORTED", "COMPLETED", "ERROR"])
def test_wait_on_finished_job_returns_at_once(client, phase):
    path = create(client, DURATION="0", FAIL="true" if phase == "ERROR" else "false")
    drive_to(client, path, phase)
    r, elapsed = timed_get(client, f"{path}?WAIT=30")
    assert r.status_code == 200
    assert phase_of(r.data) == phase
    assert elapsed < AT_ONCE, f"WAIT on a {phase} job blocked {elapsed:.2f} s"


def test_wait_minus_one_on_finished_job_returns_at_once(client):
    path = create(client, DURATION="5")
    drive_to(client, path, "ABORTED")
    r, elapsed = timed_get(client, f"{path}?WAIT=-1")
    assert r.status_code == 200 and phase_of(r.data) == "ABORTED"
    assert elapsed < AT_ONCE


def test_wait_zero_on_pending_job_returns_at_once(client):
    path = create(client, DURATION="5")
    r, elapsed = timed_get(client, f"{path}?WAIT=0")
    assert r.status_code == 200 and phase_of(r.data) == "PENDING"
    assert elapsed < AT_ONCE


def test_wait_on_held_job_returns_at_once(client, api):
    """HELD is not an active phase (UWS 1.1 §2.2.1.2): no blocking."""
    path = create(client, DURATION="5")
    assert api.store.mark_held(path.rsplit("/", 1)[-1])
    r, elapsed = timed_get(client, f"{path}?WAIT=30")
    assert r.status_code == 200 and phase_of(r.data) == "HELD"
    assert elapsed < AT_ONCE, f"WAIT on a HELD job blocked {elapsed:.2f} s"


def test_wait_on_suspended_job_returns_at_once(client, api):
    path = create(client, DURATION="30")
    job_id = path.rsplit("/", 1)[-1]
    assert client.post(f"{path}/phase", data={"PHASE": "RUN"}).status_code == 303
    assert until(lambda: client.get(f"{path}/phase").get_data(as_text=True).strip()
                 == "EXECUTING", 10)
    try:
        assert api.store.mark_suspended(job_id)
        r, elapsed = timed_get(client, f"{path}?WAIT=30")
        assert r.status_code == 200 and phase_of(r.data) == "SUSPENDED"
        assert elapsed < AT_ONCE, f"WAIT on a SUSPENDED job blocked {elapsed:.2f} s"
    finally:
        client.post(f"{path}/phase", data={"PHASE": "ABORT"})


@pytest.mark.parametrize("other", ["QUEUED", "EXECUTING", "COMPLETED", "ABORTED"])
def test_wait_with_phase_other_than_current_returns_at_once(client, other):
    path = create(client, DURATION="5")          # never run: stays PENDING
    r, elapsed = timed_get(client, f"{path}?WAIT=30&PHASE={other}")
    assert r.status_code == 200
    assert phase_of(r.data) == "PENDING"
    assert elapsed < AT_ONCE, f"WAIT with PHASE={other} on a PENDING job blocked {elapsed:.2f} s"


def test_wait_on_job_list_is_ignored(client):
    """Blocking applies to the job resource only (UWS 1.1 §2.2.1.2)."""
    create(client, DURATION="5")
    r, elapsed = timed_get(client, "/sleep?WAIT=5")
    assert r.status_code == 200
    assert elapsed < AT_ONCE


def test_wait_on_phase_resource_is_ignored(client):
    path = create(client, DURATION="5")
    r, elapsed = timed_get(client, f"{path}/phase?WAIT=5")
    assert r.status_code == 200 and r.get_data(as_text=True).strip() == "PENDING"
    assert elapsed < AT_ONCE


def test_wait_on_unknown_job_is_404_at_once(client):
    r, elapsed = timed_get(client, "/sleep/0123456789abcdef0123456789abcdef?WAIT=5")
    assert r.status_code == 404
    assert elapsed < AT_ONCE


# -- blocking --------------------------------------------------------------------------

@pytest.mark.parametrize("query", ["WAIT=1", "WAIT=1&PHASE=PENDING"])
def test_wait_on_pending_job_blocks_for_n_seconds(client, query):
    """Also with PHASE= naming the current phase."""
    path = create(client, DURATION="5")
    r, elapsed = timed_get(client, f"{path}?{query}")
    assert r.status_code == 200
    assert phase_of(r.data) == "PENDING"
    assert 0.9 <= elapsed < 3.0, f"{query} on an unchanging PENDING job took {elapsed:.2f} s"


def test_a_notice_without_a_phase_change_does_not_end_the_wait(client, api):
    """PostgreSQL delivers a process's own change notices too, after its local ones:
    a notice about the job whose phase did not change must not answer the WAIT."""
    path = create(client, DURATION="5")
    job_id = path.rsplit("/", 1)[1]
    threading.Timer(0.3, api.watch.notify, args=(job_id,)).start()
    r, elapsed = timed_get(client, f"{path}?WAIT=2")
    assert phase_of(r.data) == "PENDING"
    assert 1.9 <= elapsed < 4.0, f"the WAIT ended after {elapsed:.2f} s"


def test_wait_on_executing_job_blocks_while_it_executes(client):
    path = create(client, DURATION="30")
    assert client.post(f"{path}/phase", data={"PHASE": "RUN"}).status_code == 303
    assert until(lambda: client.get(f"{path}/phase").get_data(as_text=True).strip()
                 == "EXECUTING", 10)
    try:
        r, elapsed = timed_get(client, f"{path}?WAIT=1")
        assert r.status_code == 200 and phase_of(r.data) == "EXECUTING"
        assert 0.9 <= elapsed < 3.0, f"WAIT=1 on an EXECUTING job took {elapsed:.2f} s"
    finally:
        client.post(f"{path}/phase", data={"PHASE": "ABORT"})


# -- waking on a change ------------------------------------------------------------------

def test_wait_returns_when_another_thread_aborts(live_server):
    job = http_create(live_server.url, DURATION="30")
    stamps = {}

    def abort_later():
        time.sleep(0.5)
        stamps["sent"] = time.monotonic()
        r = requests.post(f"{job}/phase", data={"PHASE": "ABORT"}, allow_redirects=False,
                          timeout=HTTP_TIMEOUT)
        stamps["done"] = time.monotonic()
        stamps["status"] = r.status_code

    aborter = threading.Thread(target=abort_later, daemon=True)
    aborter.start()
    r = requests.get(f"{job}?WAIT=10", timeout=HTTP_TIMEOUT)
    returned = time.monotonic()
    aborter.join(timeout=10)
    assert stamps.get("status") == 303
    assert r.status_code == 200
    assert phase_of(r.content) == "ABORTED"
    assert returned >= stamps["sent"], "the WAIT returned before the abort was sent"
    assert returned - stamps["done"] < 2.0, \
        f"the WAIT returned {returned - stamps['done']:.3f} s after the abort (WAIT=10)"


def test_wait_returns_when_job_finishes_executing(client):
    """Changes made by the executor wake the waiter: a 1 s job waited on with
    WAIT=10 returns about when it completes."""
    started = time.monotonic()
    path = create(client, DURATION="1", PHASE="RUN")
    phases = []
    for _ in range(5):          # QUEUED -> EXECUTING -> COMPLETED: at most a few WAITs
        r = client.get(f"{path}?WAIT=10")
        assert r.status_code == 200
        phases.append(phase_of(r.data))
        if phases[-1] not in ("QUEUED", "EXECUTING"):
            break
    elapsed = time.monotonic() - started
    assert phases[-1] == "COMPLETED", phases
    assert 1.0 <= elapsed < 2.5, f"followed a 1 s job with WAITs in {elapsed:.2f} s ({phases})"


def test_wait_with_phase_queued_returns_when_job_leaves_queued(client):
    """PHASE=QUEUED on a job that already left QUEUED returns at once, so a client
    following phases with PHASE= never stalls."""
    path = create(client, DURATION="0.5", PHASE="RUN")
    first = phase_of(client.get(path).data)
    assert first in ("QUEUED", "EXECUTING", "COMPLETED")
    started = time.monotonic()
    r = client.get(f"{path}?WAIT=10&PHASE=QUEUED")
    elapsed = time.monotonic() - started
    assert r.status_code == 200
    assert phase_of(r.data) != "QUEUED"
    assert elapsed < 2.0


def test_wait_returns_when_job_is_deleted_meanwhile(live_server):
    job = http_create(live_server.url, DURATION="30")
    waiter = Waiter(f"{job}?WAIT=10")
    waiter.start()
    assert until(lambda: watch_of(live_server.app).waiting >= 1, 5), "the WAIT never parked"
    deleted = time.monotonic()
    assert requests.delete(job, allow_redirects=False, timeout=HTTP_TIMEOUT).status_code == 303
    waiter.join(timeout=15)
    assert not waiter.is_alive() and waiter.error is None, waiter.error
    assert waiter.returned_at - deleted < 1.0
    # DELETE first aborts, then forgets: the waiter sees either step, never PENDING
    if waiter.response.status_code == 200:
        assert phase_of(waiter.response.content) == "ABORTED"
    else:
        assert waiter.response.status_code == 404


@pytest.fixture
def other_process_abort(db_url):
    """Run ``Store(db_url).mark_aborted(job_id)`` in a fresh Python process;
    returns (won, monotonic times just before the change and right after its commit)."""
    script = textwrap.dedent("""
        import sys, time
        from uws.store import Store
        store = Store(sys.argv[1])
        before = time.monotonic()        # CLOCK_MONOTONIC: one clock for all processes
        won = store.mark_aborted(sys.argv[2])
        committed = time.monotonic()
        print(won, repr(before), repr(committed))
        store.close()
    """)

    def run(job_id: str):
        out = subprocess.run([sys.executable, "-c", script, db_url, job_id],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        won, before, committed = out.stdout.split()
        return won == "True", float(before), float(committed)

    return run


def test_wait_wakes_on_change_by_another_process(live_server, other_process_abort):
    job = http_create(live_server.url, DURATION="30")
    job_id = job.rsplit("/", 1)[-1]
    waiter = Waiter(f"{job}?WAIT=10")
    waiter.start()
    assert until(lambda: watch_of(live_server.app).waiting >= 1, 5), "the WAIT never parked"
    won, before, committed = other_process_abort(job_id)
    waiter.join(timeout=15)
    assert won, "the other process could not abort the PENDING job"
    assert not waiter.is_alive() and waiter.error is None, waiter.error
    assert waiter.response.status_code == 200
    assert phase_of(waiter.response.content) == "ABORTED"
    # The waiter may see the commit before the other process reads its clock again.
    assert waiter.returned_at >= before, "the WAIT returned before the other process acted"
    delay = waiter.returned_at - committed
    assert delay < 0.5, f"the WAIT returned {delay * 1000:.0f} ms after the other " \
                        "process's commit (50 ms polling; bench/ measures the latency)"


# -- limits and bad requests -------------------------------------------------------------

@pytest.fixture
def short_wait_app(tmp_path, db_url):
    app = create_app(make_config(tmp_path, db_url, wait_max=1))
    app.test_client_class = ValidatingClient
    yield app
    shutdown(app)


@pytest.mark.parametrize("wait", ["-1", "30"])
def test_wait_minus_one_or_beyond_wait_max_is_capped(short_wait_app, wait):
    client = short_wait_app.test_client()
    path = create(client, DURATION="5")
    r, elapsed = timed_get(client, f"{path}?WAIT={wait}")
    assert r.status_code == 200 and phase_of(r.data) == "PENDING"
    assert 0.9 <= elapsed < 3.0, f"WAIT={wait} with wait_max=1 took {elapsed:.2f} s"


@pytest.mark.parametrize("value", ["abc", "1.5", "ten", "1e3", "",
                                   "-2", "-60", "-9999999999999999999"])
def test_wait_other_than_minus_one_or_whole_seconds_is_400(client, value):
    path = create(client, DURATION="5")
    r, elapsed = timed_get(client, f"{path}?WAIT={value}")
    assert r.status_code == 400
    assert "WAIT" in r.get_data(as_text=True)
    assert elapsed < 1.0


@pytest.mark.parametrize("value", ["BOGUS", "RUN", ""])
def test_unknown_phase_with_wait_is_400(client, value):
    path = create(client, DURATION="5")
    r, elapsed = timed_get(client, f"{path}?WAIT=5&PHASE={value}")
    assert r.status_code == 400
    assert "PHASE" in r.get_data(as_text=True)
    assert elapsed < 1.0


def test_unknown_phase_with_wait_on_finished_job_is_400(client):
    path = create(client, DURATION="5")
    drive_to(client, path, "ABORTED")
    assert client.get(f"{path}?WAIT=5&PHASE=BOGUS").status_code == 400


# -- many waiters ----------------------------------------------------------------------------

@pytest.fixture
def big_server(tmp_path, db_url):
    app = create_app(make_config(tmp_path, db_url, threads=400))
    try:
        with LiveServer(app, threads=400) as server:
            yield server
    finally:
        shutdown(app)


def test_wait_beyond_waiter_limit_returns_at_once(tmp_path, db_url):
    """With max_waiters=2, a third WAIT is cut short (UWS lets a server do so)
    instead of holding another thread."""
    app = create_app(make_config(tmp_path, db_url, max_waiters=2))
    try:
        with LiveServer(app) as server:
            job = http_create(server.url, DURATION="30")
            waiters = [Waiter(f"{job}?WAIT=20") for _ in range(2)]
            for w in waiters:
                w.start()
            try:
                assert until(lambda: watch_of(app).waiting >= 2, 5), "the WAITs never parked"
                started = time.monotonic()
                r = requests.get(f"{job}?WAIT=20", timeout=HTTP_TIMEOUT)
                elapsed = time.monotonic() - started
                assert r.status_code == 200 and phase_of(r.content) == "PENDING"
                assert elapsed < 1.0, f"the third WAIT blocked {elapsed:.2f} s"
            finally:
                requests.post(f"{job}/phase", data={"PHASE": "ABORT"}, timeout=HTTP_TIMEOUT)
                for w in waiters:
                    w.join(timeout=10)
            assert all(not w.is_alive() for w in waiters)
    finally:
        shutdown(app)


def test_hundreds_of_waiters_do_not_block_other_requests(big_server):
    url, app = big_server.url, big_server.app
    jobs = [http_create(url, DURATION="30") for _ in range(10)]
    other = http_create(url, DURATION="30")
    waiters = [Waiter(f"{jobs[i % len(jobs)]}?WAIT=20") for i in range(300)]
    for w in waiters:
        w.start()
    try:
        parked = until(lambda: watch_of(app).waiting >= 300, 10)
        assert parked, f"only {watch_of(app).waiting} of 300 WAITs parked"
        early = [w for w in waiters if w.returned_at is not None]
        assert not early, f"{len(early)} WAITs returned before any change"

        started = time.monotonic()
        r = requests.get(other, timeout=HTTP_TIMEOUT)
        elapsed = time.monotonic() - started
        assert r.status_code == 200 and phase_of(r.content) == "PENDING"
        assert elapsed < 1.0, f"GET of a job took {elapsed:.2f} s with 300 WAITs parked"

        started = time.monotonic()
        r = requests.post(f"{url}/sleep", data={"DURATION": "1"}, allow_redirects=False,
                          timeout=HTTP_TIMEOUT)
        elapsed = time.monotonic() - started
        assert r.status_code == 303
        assert elapsed < 1.0, f"creating a job took {elapsed:.2f} s with 300 WAITs parked"

        started = time.monotonic()
        r = requests.get(f"{url}/sleep?LAST=5", timeout=HTTP_TIMEOUT)
        elapsed = time.monotonic() - started
        assert r.status_code == 200
        assert elapsed < 1.0, f"the job list took {elapsed:.2f} s with 300 WAITs parked"
    finally:
        released = time.monotonic()
        for job in jobs:
            requests.post(f"{job}/phase", data={"PHASE": "ABORT"}, timeout=HTTP_TIMEOUT)
        deadline = released + 10
        for w in waiters:
            w.join(timeout=max(0.0, deadline - time.monotonic()))
    stuck = [w for w in waiters if w.is_alive()]
    assert not stuck, f"{len(stuck)} WAITs still blocked 10 s after their jobs were aborted"
    errors = [w.error for w in waiters if w.error is not None]
    assert not errors, f"{len(errors)} WAITs failed, e.g. {errors[0]!r}"
    statuses = {w.response.status_code for w in waiters}
    assert statuses == {200}
    assert {phase_of(w.response.content) for w in waiters} == {"ABORTED"}
    slowest = max(w.returned_at for w in waiters) - released
    assert slowest < 5.0, f"the last WAIT returned {slowest:.2f} s after the aborts began"


def test_a_failing_phase_read_is_logged_once_a_minute_and_waiters_keep_waiting(caplog):
    from uws.domain.phases import Phase
    from uws.usecases.waiting import PhaseWatch
    calls = []

    def broken(ids):
        calls.append(ids)
        raise ConnectionError("database gone")

    watch = PhaseWatch(broken, interval=0.01)
    try:
        with caplog.at_level("ERROR", logger="uws.usecases.waiting"):
            assert watch.wait("a" * 32, Phase.EXECUTING, 0.3) is False
        assert len(calls) >= 5     # it kept trying ...
        logged = [r for r in caplog.records if "waited-for jobs" in r.getMessage()]
        assert len(logged) == 1    # ... but said so once
        assert "database gone" in caplog.text
    finally:
        watch.stop()
