"""The job processes alone: no-op jobs forked through the fork server, without the
HTTP server, its database or its executor (issue 12, "job start").

    python bench/forkjobs.py [N]

Starts a fork server for the demo runners, as the executor does, and runs N ``sleep``
jobs (DURATION=0) one after the other, each with its log files, report channel and
task.  Prints per job: the wall time, the CPU of the job processes (supervisor and
work: the fork server's reaped children, /proc cutime+cstime), of the fork server
itself, and their page faults (copy-on-write faults mostly: the steadiest measure of
how much a forked job writes on a busy machine).  Then the floor under those figures:
the same number of bare jobs, a fork that forks once more (the supervisor and the
work) and both exit at once, from a fresh process with the fork server's imports.
"""
from __future__ import annotations

import dataclasses
import gc
import importlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from uws.config.settings import demo_services
from uws.execution.forkclient import ForkServer
from uws.execution.forkserver import PRELOADED, REPORT_FD
from uws.execution.task import job_environment

TICK = os.sysconf("SC_CLK_TCK")


def usage_of(pid: int) -> tuple[float, float, int]:
    """CPU seconds of ``pid``, of its reaped children, and their page faults."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return ((int(f[11]) + int(f[12])) / TICK, (int(f[13]) + int(f[14])) / TICK, int(f[8]))


def sleep_task(job_dir: Path, job_id: str) -> dict:
    service = demo_services()["sleep"]
    return {"job_id": job_id, "service": "sleep", "workdir": str(job_dir / "results"),
            "uploads": str(job_dir / "uploads"), "fetched": str(job_dir / "fetched"),
            "parameters": [["DURATION", "0", False], ["FAIL", "false", False],
                           ["MESSAGE", "", False]],
            "fetch": {"hosts": [], "max_bytes": 1 << 20}, "max_file_bytes": 1 << 30,
            "specs": [dataclasses.asdict(s) for s in service.parameters],
            "runner": service.runner}


def run_job(forks: ForkServer, root: Path, n: int) -> float:
    """One job to its end; how long its fork request took."""
    job_id = f"job{n}"
    job_dir = root / job_id
    (job_dir / "results").mkdir(parents=True)
    (job_dir / "tmp").mkdir()
    out = os.open(job_dir / "stdout.log", os.O_WRONLY | os.O_CREAT, 0o600)
    err = os.open(job_dir / "stderr.log", os.O_WRONLY | os.O_CREAT, 0o600)
    report_r, report_w = os.pipe()
    task_r, task_w = os.pipe()
    t0 = time.perf_counter()
    job = forks.fork(job_environment(job_id, REPORT_FD, job_dir / "tmp"),
                     str(job_dir / "results"), [task_r, out, err, report_w])
    forked = time.perf_counter() - t0
    for fd in (task_r, out, err, report_w):
        os.close(fd)
    os.write(task_w, json.dumps(sleep_task(job_dir, job_id)).encode())
    os.close(task_w)
    while os.read(report_r, 1 << 16):
        pass
    os.close(report_r)
    if job.wait() != 0:
        raise RuntimeError(f"{job_id} failed: {(job_dir / 'stderr.log').read_text()}")
    return forked


def bare_jobs(n: int) -> None:
    """In a fresh process: n forks that fork once more, both exiting at once, from the
    fork server's image (its imports, the objects frozen out of the collector)."""
    for name in (*PRELOADED, "uws.demo"):
        importlib.import_module(name)
    gc.freeze()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            work = os.fork()
            if work == 0:
                os._exit(0)
            os.waitpid(work, 0)
            os._exit(0)
        os.waitpid(pid, 0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    print(f"floor, {n} bare jobs (two forks, nothing run): CPU per job: job processes "
          f"{cpu / n * 1000:.2f} ms; {(after.ru_minflt - before.ru_minflt) / n:.0f} page faults "
          "per job")


def main() -> None:
    if sys.argv[1:2] == ["--bare"]:
        bare_jobs(int(sys.argv[2]))
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    root = Path(tempfile.mkdtemp(prefix="uws-forkjobs-"))
    forks = ForkServer(["uws.demo"])
    try:
        run_job(forks, root, -1)        # starts the fork server
        pid = forks.pid
        assert pid is not None
        before, t0 = usage_of(pid), time.perf_counter()
        fork_times = [run_job(forks, root, i) for i in range(n)]
        wall, after = time.perf_counter() - t0, usage_of(pid)
    finally:
        forks.stop()
        shutil.rmtree(root, ignore_errors=True)
    own, jobs, faults = (b - a for a, b in zip(before, after))
    print(f"{n} jobs: {wall / n * 1000:.2f} ms each (fork request "
          f"{statistics.median(fork_times) * 1000:.2f} ms); CPU per job: job processes "
          f"{jobs / n * 1000:.2f} ms, fork server {own / n * 1000:.2f} ms; "
          f"{faults / n:.0f} page faults per job", flush=True)
    subprocess.run([sys.executable, __file__, "--bare", str(n)], check=True)


if __name__ == "__main__":
    main()
