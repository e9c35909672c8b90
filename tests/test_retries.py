"""Automatic retries: a job ending in a transient error (a lost worker, a runner
raising uws.runner.Retryable, a command exiting with a declared code) is QUEUED
again after a backoff, keeping its id, until its service's max_attempts."""
from __future__ import annotations

import sys

import pytest

from uws.config.settings import ConfigError
from uws.domain import timeutil
from uws.domain.phases import Phase
from uws.domain.queueing import backoff_seconds
from uws.usecases.sweeps import Sweeps
from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, assert_valid_uws, make_config
from uwshelp import NS, job_id, job_xml, phase, runner_module, settle, text, wait_for

Q = {"q": "urn:ivoa-uws-server:queue", **NS}
# Appends "<time>" to RUNS/<job id> at each run, reports progress and a result of
# its own, then fails transiently until attempt SUCCEED_ON.
RUNNERS = '''
import time
from pathlib import Path
from uws.runner import Retryable
RUNS = Path({runs!r})

def flaky(params, ctx):
    with open(RUNS / ctx.job_id, "a") as log:
        log.write(f"{{time.time()}}\\n")
    n = len((RUNS / ctx.job_id).read_text().split())
    (ctx.workdir / f"part{{n}}.txt").write_text("partial")
    ctx.add_result(f"part{{n}}", f"part{{n}}.txt", "text/plain")
    ctx.progress(50, f"attempt {{n}}")
    if n < params["SUCCEED_ON"]:
        raise Retryable(f"service busy on attempt {{n}}")
'''
FLAKY = {"runner": "retryrunners:flaky", "max_attempts": 3, "retry_backoff": 0.5,
         "retry_backoff_max": 1.0,
         "parameters": [{"name": "SUCCEED_ON", "type": "integer", "default": 1}]}


def command(runs, code: int) -> list[str]:
    """A command that logs its run, then exits with ``code`` on its first run only."""
    script = (f'date +%s.%N >> {runs}/$UWS_JOB_ID; '
              f'[ "$(wc -l < {runs}/$UWS_JOB_ID)" -ge 2 ] || exit {code}')
    return ["sh", "-c", script]


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """Where the runners log their runs: one file per job, a line per run."""
    logs = tmp_path / "runs"
    logs.mkdir()
    runner_module(tmp_path, monkeypatch, "retryrunners", RUNNERS.format(runs=str(logs)))
    return logs


@pytest.fixture
def config(tmp_path, db_url, runs):
    return make_config(tmp_path, db_url, services={
        "flaky": FLAKY,
        "once": {**FLAKY, "max_attempts": 1},
        "slow": {**FLAKY, "retry_backoff": 30, "retry_backoff_max": 30},
        "exits": {"command": command(runs, 75), "retry_exit_codes": [75], "max_attempts": 2,
                  "retry_backoff": 0},
        "fails": {"command": command(runs, 3), "retry_exit_codes": [75], "max_attempts": 2},
        "sleep": {"runner": "uws.demo:sleep", "max_attempts": 2, "retry_backoff": 0,
                  "parameters": [{"name": "DURATION", "type": "float", "default": 0},
                                 {"name": "FAIL", "type": "boolean", "default": False},
                                 {"name": "MESSAGE", "type": "string", "default": ""}]},
    })


def run(client, service: str, **params) -> str:
    r = client.post(f"/{service}", data={**params, "PHASE": "RUN"})
    assert r.status_code == 303, r.data
    return r.headers["Location"].replace("http://localhost", "")


def runs_of(runs, path: str) -> list[float]:
    log = runs / path.rsplit("/", 1)[1]
    return [float(line) for line in log.read_text().split()] if log.exists() else []


def queue_info(client, path: str):
    return job_xml(client, path).find("uws:jobInfo/q:queue", Q)


def failed_attempts(client, path: str) -> list[str]:
    return [el.text for el in queue_info(client, path).findall("q:failedAttempt", Q)]


# -- Python runners ----------------------------------------------------------------

def test_a_retryable_error_runs_the_job_again_keeping_its_id(client, runs):
    path = run(client, "flaky", SUCCEED_ON="2")
    assert settle(client, path).status_code == 200
    assert phase(client, path) == "COMPLETED"
    assert len(runs_of(runs, path)) == 2
    assert queue_info(client, path).get("attempt") == "2"
    assert failed_attempts(client, path) == ["service busy on attempt 1"]


def test_the_failed_attempt_results_are_dropped(client):
    path = run(client, "flaky", SUCCEED_ON="2")
    settle(client, path)
    ids = [r.get("id") for r in job_xml(client, path).findall("uws:results/uws:result", NS)]
    assert ids == ["part2"]


def test_once_attempts_are_used_up_the_job_ends_in_error(client, runs):
    path = run(client, "flaky", SUCCEED_ON="9")
    settle(client, path, timeout=30)
    doc = job_xml(client, path)
    assert text(doc, "phase") == "ERROR"
    assert doc.find("uws:errorSummary", NS).get("type") == "transient"
    assert doc.findtext("uws:errorSummary/uws:message", namespaces=NS) == \
        "service busy on attempt 3"
    assert len(runs_of(runs, path)) == 3
    assert failed_attempts(client, path) == ["service busy on attempt 1",
                                             "service busy on attempt 2"]


def test_attempts_wait_the_backoff_doubled_each_time_up_to_its_maximum(client, runs):
    path = run(client, "flaky", SUCCEED_ON="3")
    settle(client, path, timeout=30)
    first, second, third = runs_of(runs, path)
    assert second - first >= 0.5
    assert third - second >= 1.0


def test_without_max_attempts_a_retryable_error_ends_the_job_at_once(client, runs):
    path = run(client, "once", SUCCEED_ON="2")
    settle(client, path)
    assert phase(client, path) == "ERROR"
    assert len(runs_of(runs, path)) == 1


def test_an_abort_during_the_backoff_wins_and_the_job_never_runs_again(client, runs):
    path = run(client, "slow", SUCCEED_ON="2")
    wait_for(lambda: queue_info(client, path).get("attempt") == "2", timeout=15)
    assert phase(client, path) == "QUEUED"
    assert queue_info(client, path).get("startAfter") is not None
    assert client.post(f"{path}/phase", data={"PHASE": "ABORT"}).status_code == 303
    assert phase(client, path) == "ABORTED"
    assert len(runs_of(runs, path)) == 1


def test_the_job_page_shows_the_attempt_and_the_previous_errors(client):
    path = run(client, "flaky", SUCCEED_ON="2")
    settle(client, path)
    page = client.get(path, headers={"Accept": "text/html"}).get_data(as_text=True)
    assert 'data-role="attempt">2' in page
    assert "service busy on attempt 1" in page


# -- command runners ---------------------------------------------------------------

def test_a_command_exiting_with_a_declared_code_is_run_again(client, runs):
    path = run(client, "exits")
    settle(client, path)
    assert phase(client, path) == "COMPLETED"
    assert len(runs_of(runs, path)) == 2
    assert failed_attempts(client, path) == ["the job exited with status 75"]


def test_a_command_exiting_with_another_code_ends_in_error_at_once(client, runs):
    path = run(client, "fails")
    settle(client, path)
    assert phase(client, path) == "ERROR"
    assert len(runs_of(runs, path)) == 1


# -- lost workers ----------------------------------------------------------------------

@pytest.fixture
def idle(tmp_path, db_url):
    """(client, api) of a server that runs nothing itself: lost workers are simulated."""
    base = {"runner": "uws.demo:sleep", "max_attempts": 2,
            "parameters": [{"name": "DURATION", "type": "float", "default": 0},
                           {"name": "FAIL", "type": "boolean", "default": False},
                           {"name": "MESSAGE", "type": "string", "default": ""}]}
    app = create_app(make_config(tmp_path, db_url, executor="none", scheduler=False, services={
        "sleep": {**base, "retry_backoff": 60}, "quick": {**base, "retry_backoff": 0}}))
    app.test_client_class = ValidatingClient
    yield app.test_client(), app.extensions["uws"]
    shutdown(app)


def lose_worker(api, service: str, job_id: str) -> None:
    """Claim the job for a worker that vanishes at once, then sweep for it."""
    assert api.store.claim_next("elsewhere:1:gone", [service], 0) == job_id
    wait_for(lambda: api.store.lost_leases(timeutil.now()))
    Sweeps(config=api.config, store=api.store, files=api.files,
           executor=api.executor).recover_lost()


def test_a_lost_worker_job_is_queued_again_after_the_backoff_while_attempts_remain(idle):
    client, api = idle
    path = run(client, "sleep")
    lose_worker(api, "sleep", job_id(path))
    info = queue_info(client, path)
    assert phase(client, path) == "QUEUED"
    assert info.get("attempt") == "2"
    assert failed_attempts(client, path) == ["the worker running this job was lost"]
    later = timeutil.parse_time(info.get("startAfter"))
    assert later >= timeutil.add_seconds(timeutil.now(), 50)


def test_a_lost_worker_job_ends_in_error_once_attempts_are_used_up(idle):
    client, api = idle
    path = run(client, "quick")
    lose_worker(api, "quick", job_id(path))
    lose_worker(api, "quick", job_id(path))
    assert phase(client, path) == "ERROR"
    assert job_xml(client, path).findtext("uws:errorSummary/uws:message", namespaces=NS) == \
        "the worker running this job was lost"


@pytest.mark.parametrize("stale_look", [False, True])
def test_a_lost_job_another_front_end_recovered_and_a_worker_took_is_left_running(
        idle, monkeypatch, stale_look):
    # Two front ends' sweeps read the same lost lease; the first queues the job again
    # and a worker claims it before the second acts on what it read (with
    # stale_look, even its last look before acting is from before: only the store's
    # fence on the lost claim stops it).
    client, api = idle
    path = run(client, "quick")
    assert api.store.claim_next("elsewhere:1:gone", ["quick"], 0) == job_id(path)
    wait_for(lambda: api.store.lost_leases(timeutil.now()))
    read_by_the_second = api.store.lost_leases(timeutil.now())
    sweeps = [Sweeps(config=api.config, store=api.store, files=api.files,
                     executor=api.executor) for _ in range(2)]
    sweeps[0].recover_lost()
    assert api.store.claim_next("elsewhere:2:new", ["quick"], 60) == job_id(path)
    monkeypatch.setattr(api.store, "lost_leases", lambda now: read_by_the_second)
    if stale_look:
        (lost, _service), = read_by_the_second
        monkeypatch.setattr(api.store, "lease_states", lambda ids: {
            lost.job_id: (Phase.EXECUTING, lost.worker, lost.started)})
    sweeps[1].recover_lost()
    monkeypatch.undo()
    assert phase(client, path) == "EXECUTING"
    assert api.store.lease_states([job_id(path)])[job_id(path)][1] == "elsewhere:2:new"
    assert failed_attempts(client, path) == ["the worker running this job was lost"]


# -- the declarations --------------------------------------------------------------------

def test_the_backoff_doubles_per_attempt_up_to_its_maximum():
    assert [backoff_seconds(n, 10, 60) for n in (1, 2, 3, 4, 5)] == [10, 20, 40, 60, 60]


def test_retry_exit_codes_are_for_command_services(tmp_path, db_url):
    with pytest.raises(ConfigError, match="retry_exit_codes"):
        make_config(tmp_path, db_url, services={"s": {"runner": "uws.demo:sleep",
                                                      "retry_exit_codes": [75]}})


@pytest.mark.parametrize("codes", [[0], [256]])
def test_retry_exit_codes_are_exit_statuses(tmp_path, db_url, codes):
    with pytest.raises(ConfigError, match="retry_exit_codes"):
        make_config(tmp_path, db_url, services={"s": {"command": [sys.executable],
                                                      "retry_exit_codes": codes}})


def test_max_attempts_is_at_least_one(tmp_path, db_url):
    with pytest.raises(ConfigError, match="max_attempts"):
        make_config(tmp_path, db_url, services={"s": {"runner": "uws.demo:sleep",
                                                      "max_attempts": 0}})


def test_every_retried_job_document_is_valid_uws(client):
    path = run(client, "flaky", SUCCEED_ON="2")
    settle(client, path)
    r = client.get(path)
    assert r.status_code == 200, r.data
    assert_valid_uws(r.data)
