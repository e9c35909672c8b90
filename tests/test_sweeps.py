"""The scheduled sweeps are idempotent: several processes may run them at once."""
from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
import sys
import threading

import pytest

from uws.domain.phases import Phase
from uws.execution import NullExecutor
from uws.usecases.sweeps import Sweeps
from uws.web.app import create_app, shutdown

from conftest import make_config
from uwshelp import wait_for


@pytest.fixture
def app(tmp_path, db_url):
    # No executor and no scheduler of its own: the test runs the sweeps itself.
    application = create_app(make_config(tmp_path, db_url, executor="none", scheduler=False))
    yield application
    shutdown(application)


def _sweepers(api, n=4):
    return [Sweeps(config=api.config, store=api.store, files=api.files, executor=NullExecutor())
            for _ in range(n)]


def _at_once(calls):
    errors = []

    def run(call):
        try:
            call()
        except Exception as exc:    # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []


def _expire(api, job_ids):
    past = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(seconds=1)
    for job_id in job_ids:
        assert api.store.set_destruction(job_id, past, past)


def _overdue(api, job_id, when):
    """Move an EXECUTING job's deadline (start + execution duration) back to ``when``."""
    from uws.store.tables import job
    with api.store.engine.begin() as conn:
        conn.execute(job.update().where(job.c.id == job_id).values(deadline=when))


def _create(client, n):
    return [client.post("/sleep", data={"DURATION": "0"}).headers["Location"].rsplit("/", 1)[1]
            for _ in range(n)]


def test_concurrent_destruction_sweeps_forget_each_job_once(client, api):
    jobs = _create(client, 20)
    _expire(api, jobs)
    _at_once([s.destroy_expired for s in _sweepers(api)])
    assert api.store.phases_of(jobs) == {}
    assert all(client.get(f"/sleep/{j}").status_code == 404 for j in jobs)


def test_a_destruction_time_that_has_come_cannot_be_moved_before_the_sweep(client, api):
    """The sweep may have read the job as expired already: a later time granted now
    would be a 303 for a job destroyed anyway."""
    (job_id,) = _create(client, 1)
    _expire(api, [job_id])
    expired = api.store.get_job(job_id, "sleep", None).destruction
    r = client.post(f"/sleep/{job_id}/destruction", data={"DESTRUCTION": "2099-01-01T00:00:00Z"})
    assert r.status_code == 403
    assert b"destruction time has come" in r.data
    assert api.store.get_job(job_id, "sleep", None).destruction == expired
    _sweepers(api)[0].destroy_expired()
    assert client.get(f"/sleep/{job_id}").status_code == 404


def test_concurrent_deadline_sweeps_abort_each_overdue_job_once(client, api):
    jobs = _create(client, 10)
    for job_id in jobs:
        assert api.store.mark_queued(job_id)
        assert api.store.claim_next("test-worker", ["sleep"], 60) is not None
    past = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(seconds=1)
    for job_id in jobs:
        _overdue(api, job_id, past)
    _at_once([s.enforce_deadlines for s in _sweepers(api)])
    assert set(api.store.phases_of(jobs).values()) == {Phase.ABORTED}
    assert "execution duration was exceeded" in client.get(f"/sleep/{jobs[0]}").get_data(
        as_text=True)


def test_concurrent_lease_sweeps_fail_each_lost_job_once(client, api):
    jobs = _create(client, 10)
    for job_id in jobs:
        api.store.mark_queued(job_id)
        api.store.claim_next("gone-host:1:x", ["sleep"], -1)     # a lease already expired
    _at_once([s.recover_lost for s in _sweepers(api)])
    for job_id in jobs:
        doc = client.get(f"/sleep/{job_id}").get_data(as_text=True)
        assert "<uws:phase>ERROR</uws:phase>" in doc
        assert doc.count("<uws:errorSummary") == 1


def test_a_job_whose_files_cannot_be_removed_stays_for_the_next_sweep(client, api,
                                                                       monkeypatch):
    [job_id] = _create(client, 1)
    _expire(api, [job_id])
    sweeps = Sweeps(config=api.config, store=api.store, files=api.files, executor=NullExecutor())
    monkeypatch.setattr(api.files, "remove", lambda _job_id: False)     # e.g. EACCES
    sweeps.destroy_expired()
    assert client.get(f"/sleep/{job_id}").status_code == 200
    monkeypatch.undo()
    sweeps.destroy_expired()
    assert client.get(f"/sleep/{job_id}").status_code == 404


def test_a_killed_server_not_yet_reaped_counts_as_dead():
    from uws.usecases.sweeps import _alive, _zombie
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        wait_for(lambda: _zombie(child.pid), timeout=10)    # exited, not waited for
        assert not _alive(f"{socket.gethostname()}:{child.pid}:nonce")
    finally:
        child.wait()
    assert _alive(f"{socket.gethostname()}:{os.getpid()}:nonce")


EXIT_WHILE_ANSWERING = """
import sys, tempfile, time
from concurrent.futures import ThreadPoolExecutor
from uws.config import settings as config
from uws.web.app import create_app
app = create_app(config.load(None, env={}, data_dir=tempfile.mkdtemp()))
ThreadPoolExecutor(1).submit(time.sleep, 2)     # a request still answered at exit
time.sleep(0.5)
sys.exit(0)
"""


def test_a_process_exiting_while_a_request_is_answered_logs_no_scheduler_errors(tmp_path):
    # what a gunicorn worker does when reloaded while a WAIT blocks
    done = subprocess.run([sys.executable, "-c", EXIT_WHILE_ANSWERING], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
