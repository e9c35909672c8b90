"""Crash recovery: the server is really killed with SIGKILL and started again."""
from __future__ import annotations

import signal
import subprocess

import pytest
import requests

from uws.execution.strays import job_pids

from conftest import free_port
from uwshelp import UWS_COMMAND, gone, wait_for

# The demo's sleep service (uws.demo:sleep with its three parameters), twice: "again"
# is the same service marked safe to run again after a crash.
SLEEP = """runner = "uws.demo:sleep"
parameters = [
    {name = "DURATION", type = "float", default = 1},
    {name = "FAIL", type = "boolean", default = false},
    {name = "MESSAGE", type = "string", default = ""},
]"""
CONFIG = """
[server]
database_url = "{db_url}"
[executor]
slots = 1
[services.sleep]
{sleep}
[services.again]
retry = true
{sleep}
"""


class Server:
    def __init__(self, tmp_path, db_url):
        self.config = tmp_path / "uws.toml"
        self.config.write_text(CONFIG.format(db_url=db_url, sleep=SLEEP))
        self.data = tmp_path / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = None

    def start(self):
        self.process = subprocess.Popen(
            [UWS_COMMAND, "serve", "--config", str(self.config),
             "--data-dir", str(self.data), "--port", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._up, timeout=20, step=0.1)

    def _up(self):
        try:
            return requests.get(self.url + "/", timeout=5).status_code == 200
        except requests.RequestException:     # not listening yet, or still starting
            return False

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def run(self, service, **params) -> str:
        r = requests.post(f"{self.url}/{service}", data={**params, "PHASE": "RUN"},
                          allow_redirects=False, timeout=10)
        assert r.status_code == 303
        return r.headers["Location"]

    def phase(self, job_url) -> str:
        return requests.get(f"{job_url}/phase", timeout=10).text


@pytest.fixture
def server(tmp_path, db_url):
    s = Server(tmp_path, db_url)
    s.start()
    yield s
    s.stop()


def _executing(server, job_url):
    job_id = job_url.rsplit("/", 1)[1]
    wait_for(lambda: server.phase(job_url) == "EXECUTING" and job_pids(job_id), timeout=20)
    return job_pids(job_id)


def test_killed_server_leaves_no_job_process_running(server):
    pids = _executing(server, server.run("sleep", DURATION="60"))
    server.kill()
    wait_for(lambda: gone(pids), timeout=3)


def test_after_restart_an_interrupted_job_ends_in_transient_error(server):
    job = server.run("sleep", DURATION="60")
    _executing(server, job)
    server.kill()
    server.start()
    wait_for(lambda: server.phase(job) == "ERROR", timeout=10)
    doc = requests.get(job, timeout=10).text
    assert 'type="transient"' in doc and "worker running this job was lost" in doc


def test_after_restart_queued_jobs_still_run(server):
    first = server.run("sleep", DURATION="60")
    _executing(server, first)
    queued = server.run("sleep", DURATION="0")
    assert server.phase(queued) == "QUEUED"     # one slot, taken by the first job
    server.kill()
    server.start()
    wait_for(lambda: server.phase(queued) == "COMPLETED", timeout=20)


def test_after_restart_a_job_of_a_retry_safe_service_runs_again(server):
    job = server.run("again", DURATION="2")
    _executing(server, job)
    server.kill()
    server.start()
    wait_for(lambda: server.phase(job) == "COMPLETED", timeout=20)


def test_no_job_stays_executing_after_restart(server):
    jobs = [server.run("sleep", DURATION="60")]
    _executing(server, jobs[0])
    jobs += [server.run("sleep", DURATION="60") for _ in range(2)]
    server.kill()
    server.start()
    wait_for(lambda: server.phase(jobs[0]) != "EXECUTING", timeout=10)
    for job in jobs:
        requests.post(f"{job}/phase", data={"PHASE": "ABORT"}, timeout=10)
    assert all(server.phase(j) in ("ERROR", "ABORTED") for j in jobs)


def test_a_stopped_server_ends_its_running_jobs_as_interrupted(server):
    job = server.run("sleep", DURATION="60")
    pids = _executing(server, job)
    server.stop()                   # SIGTERM: a graceful stop
    assert gone(pids)
    server.start()
    doc = requests.get(job, timeout=10).text
    assert "<uws:phase>ERROR</uws:phase>" in doc and "server stopped" in doc


def test_a_stopped_server_queues_retry_safe_jobs_again(server):
    job = server.run("again", DURATION="1")
    _executing(server, job)
    server.stop()
    server.start()
    wait_for(lambda: server.phase(job) == "COMPLETED", timeout=20)
