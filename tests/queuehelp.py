"""A Celery cluster (PostgreSQL, RabbitMQ, front ends and workers as the installed
``uws`` command) whose service lets owners set priorities and retries transient
exits: for the tests of when and in which order queued jobs start."""
from __future__ import annotations

import uuid
from pathlib import Path

import requests

from test_distributed import RABBITMQ, Cluster, _need


def queue_cluster(root: Path, slots: int = 1) -> Cluster:
    """A cluster (see tests/test_distributed.py) of a ``work`` service: each run
    appends the job's id to ``cluster.runs``, then sleeps ``SECS``; its first run
    exits 75 when ``FLAKY`` is 1, a transient error it retries at once."""
    _need(5432, "PostgreSQL")
    _need(5672, "RabbitMQ")
    cluster = Cluster(root, RABBITMQ)
    runs = cluster.runs
    script = (f'echo "$UWS_JOB_ID" >> {runs}; '
              f'if [ "$2" = 1 ] && [ "$(grep -c "$UWS_JOB_ID" {runs})" = 1 ]; then exit 75; fi; '
              'sleep "$1"')
    cluster.config.write_text(f"""
[server]
data_dir = "{root / 'data'}"
database_url = "{cluster.database}"

[executor]
kind = "celery"
broker_url = "{RABBITMQ}"
queue = "uws-test-{uuid.uuid4().hex[:8]}"
slots = {slots}

[services.work]
command = ["sh", "-c", {script!r}, "work", "{{SECS}}", "{{FLAKY}}"]
priority_min = -5
priority_max = 5
max_attempts = 2
retry_backoff = 0
retry_exit_codes = [75]

[[services.work.parameters]]
name = "SECS"
type = "float"
default = 0

[[services.work.parameters]]
name = "FLAKY"
type = "integer"
default = 0
""")
    return cluster


def run(front_end: str, **params) -> str:
    r = requests.post(f"{front_end}/work", data={"SECS": "0", **params, "PHASE": "RUN"},
                      allow_redirects=False, timeout=30)
    assert r.status_code == 303, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def ran(cluster: Cluster) -> list[str]:
    """The ids of the jobs run, in the order they started (a job run twice, twice)."""
    return cluster.runs.read_text().split() if cluster.runs.exists() else []
