"""Front ends and Celery workers on the real engines: PostgreSQL as the shared
store, RabbitMQ (and Redis) as the broker, every process the installed ``uws``
command.  These need the services the machine starts; with CI set, a missing
one fails the test instead of skipping it."""
from __future__ import annotations

import collections
import concurrent.futures
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import requests
import sqlalchemy as sa

from conftest import POSTGRES_URL, database_url, drop_database, free_port
from uwshelp import UWS_COMMAND, holds_throughout, wait_for

RABBITMQ = "amqp://guest:guest@127.0.0.1:5672//"
TERMINAL = {"COMPLETED", "ERROR", "ABORTED"}
#: the server's timings in these processes (uws.domain.timing): a lost worker's jobs are
#: recovered within seconds, not after the 30 s lease, and a front end looks for jobs
#: whose message was lost every second, not every 5
TIMINGS = "LEASE=6 LOST_LEASE_SWEEP=0.5 REDISPATCH=1"
REDISPATCH_S = 1.0
POSTGRES_PORT = sa.engine.make_url(POSTGRES_URL).port or 5432


def _reachable(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


def _need(port: int, what: str) -> None:
    if not _reachable(port):
        if os.environ.get("CI"):
            pytest.fail(f"{what} is not running on 127.0.0.1:{port}")
        pytest.skip(f"{what} is not running on 127.0.0.1:{port}")


class Cluster:
    """Front ends and workers sharing one PostgreSQL database and data directory."""

    def __init__(self, root: Path, broker: str):
        self.root = root
        self.database = database_url("postgresql", root)     # a schema of its own
        self.runs = root / "runs.log"
        self.config = root / "uws.toml"
        self.config.write_text(_config(root, self.database, broker, self.runs))
        self.processes: list[subprocess.Popen] = []
        self.front_ends: list[str] = []
        self.workers: list[subprocess.Popen] = []

    def front_end(self) -> str:
        port = free_port()
        self._start("serve", "--port", str(port), log=f"front-{port}.log")
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(url), timeout=60, step=0.2)
        self.front_ends.append(url)
        return url

    def worker(self) -> subprocess.Popen:
        process = self._start("worker", log=f"worker-{len(self.workers)}.log")
        self.workers.append(process)
        return process

    def _start(self, *args, log: str) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if not k.startswith("UWS_")}
        env["UWS_TEST_TIMINGS"] = TIMINGS
        with open(self.root / log, "ab") as out:
            process = subprocess.Popen([UWS_COMMAND, *args[:1], "--config", str(self.config),
                                        *args[1:]], stdout=out, stderr=subprocess.STDOUT,
                                       env=env, cwd=self.root)
        self.processes.append(process)
        return process

    def log(self, name: str) -> str:
        return (self.root / name).read_text(errors="replace")

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        drop_database(self.database)


def _config(root: Path, database_url: str, broker: str, runs: Path) -> str:
    # A command that leaves one line per run: "ran at most once" is counted, not assumed.
    script = f'echo "$UWS_JOB_ID" >> {runs}; sleep "$1"; echo done > out.txt'
    return f"""
[server]
data_dir = "{root / 'data'}"
database_url = "{database_url}"
metrics_public = true

[executor]
kind = "celery"
broker_url = "{broker}"
queue = "uws-test-{uuid.uuid4().hex[:8]}"
slots = 2

[services.work]
command = ["sh", "-c", {script!r}, "work", "{{SECS}}"]
outputs = [{{name = "out", file = "out.txt", mime_type = "text/plain"}}]
max_execution_duration = 600

[[services.work.parameters]]
name = "SECS"
type = "float"
default = 0
"""


def _answers(url: str) -> bool:
    try:
        return requests.get(url + "/", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def create(front_end: str, secs: float, **control) -> str:
    r = requests.post(f"{front_end}/work", data={"SECS": str(secs), "PHASE": "RUN",
                                                 **control},
                      allow_redirects=False, timeout=30)
    assert r.status_code == 303, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def phase(front_end: str, job_id: str) -> str:
    return requests.get(f"{front_end}/work/{job_id}/phase", timeout=30).text


def runs_of(cluster: Cluster) -> collections.Counter:
    lines = cluster.runs.read_text().split() if cluster.runs.exists() else []
    return collections.Counter(lines)


@pytest.fixture
def rabbit_cluster(tmp_path):
    _need(POSTGRES_PORT, "PostgreSQL")
    _need(5672, "RabbitMQ")
    cluster = Cluster(tmp_path, RABBITMQ)
    yield cluster
    cluster.stop()


@pytest.mark.over_a_minute("300 jobs through two Celery workers of 2 slots, one killed while "
                           "it runs some: the volume is what finds a job run twice (72 s "
                           "beside the other test processes in a CI run)")
def test_jobs_run_on_workers_once_each_whatever_front_end_or_worker_fails(rabbit_cluster):
    cluster = rabbit_cluster
    fronts = [cluster.front_end(), cluster.front_end()]
    doomed = cluster.worker()
    cluster.worker()
    plan = []       # (front end, seconds, control): quick ones, slow ones that time out
    for i in range(300):
        if i % 25 == 0:
            plan.append((fronts[i % 2], 30, {"EXECUTIONDURATION": "1"}))
        else:
            plan.append((fronts[i % 2], 2 if i % 40 == 1 else 0.02, {}))
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        jobs = list(pool.map(lambda p: (p[0], create(*p[:2], **p[2])), plan))
    aborted = [job_id for n, (_, job_id) in enumerate(jobs) if n % 30 == 7]
    for job_id in aborted:      # through the other front end than the one that made it
        requests.post(f"{fronts[1]}/work/{job_id}/phase", data={"PHASE": "ABORT"}, timeout=30)
    # kill one worker while it holds running jobs
    wait_for(lambda: _running(cluster) >= 1, timeout=60, step=0.05)
    assert all(w.poll() is None for w in cluster.workers), "a worker died by itself"
    doomed.send_signal(signal.SIGKILL)

    def all_ended():
        return all(phase(fronts[0], job_id) in TERMINAL for _, job_id in jobs)
    wait_for(all_ended, timeout=240, step=1.0)

    assert cluster.workers[1].poll() is None, "the other worker died too"
    runs = runs_of(cluster)
    assert max(runs.values()) == 1, "a job ran twice"
    phases = collections.Counter(phase(fronts[1], job_id) for _, job_id in jobs)
    assert sum(phases.values()) == 300
    assert phases["COMPLETED"] >= 250, phases
    for n, (_, job_id) in enumerate(jobs):
        final = phase(fronts[n % 2], job_id)
        if final == "COMPLETED":
            assert runs[job_id] == 1
            assert requests.get(f"{fronts[(n + 1) % 2]}/work/{job_id}/results/out",
                                timeout=30).text == "done\n"
        if n % 25 == 0 and job_id not in aborted:
            assert final in ("ABORTED", "ERROR"), (n, final)


def _running(cluster: Cluster) -> int:
    """Jobs started but not finished: run lines without a result file yet."""
    return len(runs_of(cluster)) - len(list((cluster.root / "data").rglob("out.txt")))


def test_a_wait_on_one_front_end_sees_an_abort_made_through_another(rabbit_cluster):
    cluster = rabbit_cluster
    first, second = cluster.front_end(), cluster.front_end()
    cluster.worker()
    job_id = create(first, 30)
    wait_for(lambda: phase(first, job_id) == "EXECUTING", timeout=30, step=0.1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(requests.get, f"{first}/work/{job_id}",
                              params={"WAIT": "30", "PHASE": "EXECUTING"}, timeout=60)
        wait_for(lambda: blocked_waits(first) == 1, timeout=10)    # parked before the abort
        aborted_at = time.monotonic()
        requests.post(f"{second}/work/{job_id}/phase", data={"PHASE": "ABORT"}, timeout=30)
        answer = waiting.result()
        woke_after = time.monotonic() - aborted_at
    assert "<uws:phase>ABORTED</uws:phase>" in answer.text
    assert woke_after < 1.0
    # and the worker killed the job: nothing of it left running
    wait_for(lambda: not _job_processes(job_id), timeout=5, step=0.1)


def blocked_waits(front_end: str) -> float:
    """The WAITs a front end holds, from its metrics."""
    r = requests.get(f"{front_end}/metrics", timeout=30)
    assert r.status_code == 200, r.text
    return float(re.search(r"^uws_blocked_waits (\S+)$", r.text, re.M).group(1))


def _job_processes(job_id: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if f"UWS_JOB_ID={job_id}".encode() in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


def test_front_ends_run_no_jobs(rabbit_cluster):
    cluster = rabbit_cluster
    front = cluster.front_end()
    job_id = create(front, 0)
    wait_for(lambda: messages_ready(cluster) == 1, timeout=10)     # published, not taken
    holds_throughout(lambda: phase(front, job_id) == "QUEUED", 3,
                     "a front end's executor would claim it within its 1 s queue poll")
    cluster.worker()
    wait_for(lambda: phase(front, job_id) == "COMPLETED", timeout=60, step=0.2)


# -- messages ------------------------------------------------------------------------------

def messages_ready(cluster: Cluster) -> int:
    """Messages in the cluster's queue that no worker has taken."""
    from kombu import Connection
    queue = re.search(r'^queue = "(.*)"$', cluster.config.read_text(), re.M).group(1)
    with Connection(RABBITMQ) as conn:
        return conn.default_channel.queue_declare(queue=queue, passive=True).message_count


def test_jobs_queued_with_no_worker_are_published_for_once_not_at_every_sweep(rabbit_cluster):
    front = rabbit_cluster.front_end()
    for _ in range(3):
        create(front, 0)
    wait_for(lambda: messages_ready(rabbit_cluster) == 3, timeout=10)
    holds_throughout(lambda: messages_ready(rabbit_cluster) == 3, 4 * REDISPATCH_S,
                     "a re-dispatch sweep runs every second, for jobs queued a second")


def test_no_message_waits_in_the_broker_while_a_workers_jobs_run(rabbit_cluster):
    # RabbitMQ closes the channel of a message unacknowledged for 30 minutes (its
    # consumer_timeout): a message must not wait behind jobs as long as they run
    front = rabbit_cluster.front_end()
    rabbit_cluster.worker()
    jobs = [create(front, 20) for _ in range(3)]      # 2 slots: one waits QUEUED
    wait_for(lambda: sum(phase(front, j) == "EXECUTING" for j in jobs) == 2, timeout=60)
    wait_for(lambda: messages_ready(rabbit_cluster) == 0, timeout=10)
    assert sorted(phase(front, j) for j in jobs) == ["EXECUTING", "EXECUTING", "QUEUED"]
    for job_id in jobs:     # or the worker, told to stop, lets them run their 20 s
        r = requests.post(f"{front}/work/{job_id}/phase", data={"PHASE": "ABORT"},
                          allow_redirects=False, timeout=30)
        assert r.status_code == 303, r.text


# -- a broker that goes away -------------------------------------------------------------

@pytest.fixture
def private_redis(tmp_path):
    """A redis-server of this test's own (so that it can be stopped and started)."""
    program = shutil.which("redis-server")
    if program is None:
        pytest.fail("redis-server is not installed")
    port = free_port()
    (tmp_path / "redis").mkdir()

    def start():
        process = subprocess.Popen([program, "--port", str(port), "--bind", "127.0.0.1",
                                    "--save", "", "--appendonly", "no",
                                    "--dir", str(tmp_path / "redis")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: _reachable(port), timeout=20, step=0.05)
        return process

    state = {"process": start()}

    class Redis:
        url = f"redis://127.0.0.1:{port}/0"

        def stop(self):
            state["process"].terminate()
            state["process"].wait(10)

        def restart(self):
            state["process"] = start()

    yield Redis()
    if state["process"].poll() is None:
        state["process"].terminate()
        state["process"].wait(10)


def test_a_job_queued_while_the_broker_is_down_runs_all_the_same(tmp_path, private_redis):
    _need(POSTGRES_PORT, "PostgreSQL")
    cluster = Cluster(tmp_path, private_redis.url)
    try:
        front = cluster.front_end()
        cluster.worker()
        assert phase(front, create(front, 0)) in ("QUEUED", "EXECUTING", "COMPLETED")
        private_redis.stop()
        started = time.monotonic()
        job_id = create(front, 0)           # 303, not 500: the job is kept
        assert time.monotonic() - started < 2   # one try to publish, not kombu's retries
        # the worker's own threads look for queued jobs: no message is needed
        wait_for(lambda: phase(front, job_id) == "COMPLETED", timeout=30, step=0.5)
        assert runs_of(cluster)[job_id] == 1
        private_redis.restart()
        log_of_front = next(p.name for p in tmp_path.glob("front-*.log"))
        wait_for(lambda: "the broker is back" in cluster.log(log_of_front), timeout=30, step=0.5)
        assert "the broker cannot be reached" in cluster.log(log_of_front)
    finally:
        cluster.stop()


def test_a_worker_told_to_stop_ends_its_running_job_and_takes_no_more(rabbit_cluster):
    cluster = rabbit_cluster
    front = cluster.front_end()
    worker = cluster.worker()
    jobs = [create(front, 2) for _ in range(6)]     # 2 slots: 4 of them wait
    wait_for(lambda: phase(front, jobs[0]) == "EXECUTING", timeout=60, step=0.1)
    worker.terminate()
    worker.wait(30)             # the running jobs end first: about 2 s, not 6
    phases = collections.Counter(phase(front, job_id) for job_id in jobs)
    assert phases["COMPLETED"] <= 2 and phases["QUEUED"] >= 4, phases
