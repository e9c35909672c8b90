"""A worker paused past its lease (kill -STOP) whose job a sweep queued again and
another worker claimed: once it runs again, its attempt is no longer its own.  It
ends that attempt's own processes and records nothing of it, sparing the new
attempt's (same job id, cgroup name and UWS_JOB_ID).

The takeover is written to the database as a reclaim leaves it: the job EXECUTING
under another worker's lease."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import sqlalchemy as sa

from uws.domain import timeutil
from uws.execution import process as executor_process
from uws.execution.strays import job_pids
from uws.store.tables import job as J
from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, make_config
from uwshelp import NS, gone, job_id, job_xml, phase, runner_module, wait_for

NEW_WORKER = "elsewhere:1:x"
# Reports a result at once with EARLY, waits for GO/<job id>, then reports another
# and ends well.
RUNNERS = '''
import time
from pathlib import Path
from uws.runner import Retryable
GO = Path({go!r})

def report(ctx, name):
    (ctx.workdir / f"{{name}}.txt").write_text(name)
    ctx.add_result(name, f"{{name}}.txt", "text/plain")

def hold(params, ctx):
    if params["EARLY"]:
        report(ctx, "early")
    while not (GO / ctx.job_id).exists():
        time.sleep(0.01)
    report(ctx, "late")

def flaky(params, ctx):
    while not (GO / ctx.job_id).exists():
        time.sleep(0.01)
    raise Retryable("a transient failure")
'''
HOLD = {"runner": "holdrunners:hold", "max_attempts": 3,
        "parameters": [{"name": "EARLY", "type": "boolean", "default": False}]}
FLAKY = {"runner": "holdrunners:flaky", "max_attempts": 3}


@pytest.fixture
def go(tmp_path, monkeypatch):
    """Where a test tells a job to go on: touch GO/<job id>."""
    go = tmp_path / "go"
    go.mkdir()
    runner_module(tmp_path, monkeypatch, "holdrunners", RUNNERS.format(go=str(go)))
    return go


@pytest.fixture
def app(tmp_path, db_url, go):
    # no sweeps: the lease this worker can no longer renew must not be recovered here
    application = create_app(make_config(tmp_path, db_url, scheduler=False,
                                         services={"hold": HOLD, "flaky": FLAKY}))
    application.test_client_class = ValidatingClient
    yield application
    shutdown(application)


@pytest.fixture
def standins():
    """Processes standing in for the new attempt; killed at the end."""
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def start(client, service="hold", **params) -> tuple[str, list[int]]:
    """Run a job; its path and the pids of its (first) attempt once it runs."""
    r = client.post(f"/{service}", data={**params, "PHASE": "RUN"})
    assert r.status_code == 303, r.data
    path = r.headers["Location"].replace("http://localhost", "")
    wait_for(lambda: phase(client, path) == "EXECUTING" and job_pids(job_id(path)), timeout=20)
    return path, job_pids(job_id(path))


def take_over(api, job: str) -> None:
    """What a sweep's reclaim and another worker's claim leave: EXECUTING, its lease."""
    with api.store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE uws_job SET lease_owner = :w WHERE id = :id"),
                     {"w": NEW_WORKER, "id": job})


def reclaim(api, job: str) -> None:
    """All a reclaim leaves, its new start time too: what the store fences writes by."""
    with api.store.engine.begin() as conn:
        conn.execute(J.update().where(J.c.id == job).values(
            lease_owner=NEW_WORKER, start_time=timeutil.now()))


def new_attempt(api, job: str, standins) -> subprocess.Popen:
    """A process of the new attempt: its UWS_JOB_ID, its cgroup (where there are
    cgroups), a process group of its own."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                         env={**os.environ, "UWS_JOB_ID": job}, start_new_session=True)
    standins.append(p)
    cgroups = api.executor.processes.cgroups
    if cgroups is not None:
        assert cgroups.enter(job, p.pid)
    return p


def kill_stale(pids) -> None:
    """What the sweep's end_lost did to the stale attempt while its worker was paused."""
    for group in {os.getpgid(pid) for pid in pids if not gone([pid])}:
        os.killpg(group, signal.SIGKILL)


def let_go(api, job: str) -> None:
    wait_for(lambda: job not in api.executor.running_ids, timeout=10)


def lease(api, job: str) -> tuple[str, str | None]:
    with api.store.engine.connect() as conn:
        return tuple(conn.execute(sa.text("SELECT phase, lease_owner FROM uws_job WHERE id = :id"),
                                  {"id": job}).one())


def result_ids(api, job: str) -> list[str]:
    with api.store.engine.connect() as conn:
        return list(conn.execute(sa.text("SELECT id FROM uws_result WHERE job_id = :id"),
                                 {"id": job}).scalars())


def test_the_end_of_a_superseded_attempt_is_not_recorded(client, api):
    path, pids = start(client)
    take_over(api, job_id(path))
    kill_stale(pids)
    let_go(api, job_id(path))
    assert lease(api, job_id(path)) == ("EXECUTING", NEW_WORKER)
    assert job_xml(client, path).find("uws:errorSummary", NS) is None


def test_a_worker_ends_its_superseded_attempt_within_a_second(client, api):
    path, pids = start(client)
    take_over(api, job_id(path))
    wait_for(lambda: gone(pids), timeout=2)
    assert lease(api, job_id(path)) == ("EXECUTING", NEW_WORKER)


def test_a_superseded_attempt_records_no_results(client, api, go):
    path, _ = start(client)
    take_over(api, job_id(path))
    (go / job_id(path)).touch()     # it reports a result, then ends well
    let_go(api, job_id(path))
    assert result_ids(api, job_id(path)) == []
    assert lease(api, job_id(path)) == ("EXECUTING", NEW_WORKER)


@pytest.mark.parametrize("killed_by_the_sweep", [True, False])
def test_the_new_attempts_processes_outlive_the_superseded_one(client, api, standins,
                                                              killed_by_the_sweep):
    path, pids = start(client)
    take_over(api, job_id(path))
    new = new_attempt(api, job_id(path), standins)
    if killed_by_the_sweep:
        kill_stale(pids)
    let_go(api, job_id(path))
    assert gone(pids)
    assert new.poll() is None
    assert new.pid in job_pids(job_id(path))


def test_an_abort_still_ends_the_jobs_processes_and_keeps_its_results(client, api):
    path, pids = start(client, EARLY="true")
    wait_for(lambda: (api.files.results_dir(job_id(path)) / "early.txt").exists(), timeout=5)
    assert client.post(f"{path}/phase", data={"PHASE": "ABORT"}).status_code == 303
    wait_for(lambda: gone(pids) and job_id(path) not in api.executor.running_ids, timeout=5)
    assert phase(client, path) == "ABORTED"
    assert [r.get("id") for r in job_xml(client, path).findall("uws:results/uws:result", NS)] \
        == ["early"]


@pytest.fixture
def blind(monkeypatch):
    """The worker's look at the lease always comes just before the takeover: only
    the store's fence on the attempt's claim stands between it and the new attempt."""
    monkeypatch.setattr(executor_process, "superseded", lambda lease, claim: False)


def test_a_worker_whose_lease_check_raced_the_takeover_still_records_nothing(
        client, api, go, blind):
    path, _ = start(client)
    reclaim(api, job_id(path))
    (go / job_id(path)).touch()     # it reports a result, then ends well
    let_go(api, job_id(path))
    assert result_ids(api, job_id(path)) == []
    assert lease(api, job_id(path)) == ("EXECUTING", NEW_WORKER)
    assert job_xml(client, path).find("uws:errorSummary", NS) is None


def test_a_superseded_transient_failure_leaves_the_new_attempts_files(client, api, go, blind):
    path, _ = start(client, "flaky")
    reclaim(api, job_id(path))
    written = api.files.results_dir(job_id(path)) / "new-attempt.txt"
    written.write_text("the new attempt's work")
    (go / job_id(path)).touch()     # the old attempt fails: it would be retried
    let_go(api, job_id(path))
    assert written.read_text() == "the new attempt's work"
    assert lease(api, job_id(path)) == ("EXECUTING", NEW_WORKER)


def test_an_executor_failure_after_a_takeover_leaves_the_new_attempt_running(
        client, api, go, blind, monkeypatch):
    path, _ = start(client)
    reclaim(api, job_id(path))

    def broken(*args, **kwargs):
        raise RuntimeError("the database went away while the worker was paused")

    monkeypatch.setattr(api.executor.outcomes, "record", broken)
    failures: list[bool] = []
    mark_failed = api.executor.store.mark_failed
    monkeypatch.setattr(api.executor.store, "mark_failed",
                        lambda *args, **kwargs: failures.append(mark_failed(*args, **kwargs)))
    (go / job_id(path)).touch()
    wait_for(lambda: failures, timeout=10)
    assert failures == [False]      # the worker tried, and the store refused
    assert lease(api, job_id(path)) == ("EXECUTING", NEW_WORKER)
    assert job_xml(client, path).find("uws:errorSummary", NS) is None


def test_a_worker_ends_its_attempt_when_it_claimed_the_job_again_itself(client, api):
    # Paused past its lease, the job queued again, and one of this worker's own
    # slots claimed it: the same lease owner, another attempt (another start).
    path, pids = start(client)
    worker = api.executor.worker_id
    with api.store.engine.begin() as conn:
        conn.execute(J.update().where(J.c.id == job_id(path)).values(
            start_time=timeutil.now()))
    wait_for(lambda: gone(pids), timeout=2)
    assert lease(api, job_id(path)) == ("EXECUTING", worker)
    assert job_xml(client, path).find("uws:errorSummary", NS) is None


def test_an_attempt_starts_without_what_an_earlier_one_left_in_its_results(client, api, go):
    r = client.post("/hold")
    assert r.status_code == 303
    path = r.headers["Location"].replace("http://localhost", "")
    left = api.files.results_dir(job_id(path))
    left.mkdir(parents=True)
    (left / "stale.txt").write_text("an earlier attempt's")
    assert client.post(f"{path}/phase", data={"PHASE": "RUN"}).status_code == 303
    wait_for(lambda: phase(client, path) == "EXECUTING" and job_pids(job_id(path)), timeout=20)
    assert not (api.files.results_dir(job_id(path)) / "stale.txt").exists()
