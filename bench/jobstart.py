"""Section [7] of bench.py alone, with where the CPU goes (issue 12, "job start").

    python bench/jobstart.py [--rounds 50] [--burst 200] [--repeat 1] [--stored 0,100000]

Starts ``uws serve`` as bench.py does and measures: create+RUN -> COMPLETED seen by
WAIT, one job at a time (p50), and ``--burst`` no-op jobs queued at once (completed
jobs/s).  For the burst it also prints the CPU per job of the server process (HTTP and
executor), of the fork server itself, and of the job processes (the fork server's
reaped children, /proc cutime+cstime), which a busy shared machine disturbs far less
than the wall-clock figures.  With JOBSTART_PERF=FILE set, the burst's fork server and
job processes are recorded with ``perf record -g`` into FILE.  ``--stored`` repeats it
all with that many finished jobs of another owner in the service (seeded into the
database while the server runs): a job's start must not cost more for them.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bench import (
    CREATE_FORM,
    SERVICE,
    WAIT_SECONDS,
    Clients,
    HttpClient,
    Server,
    inode_cost,
    percentile,
    phase_of,
    send,
)

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_of(pid: int, children: bool = False) -> float:
    """User + system CPU seconds of ``pid`` (with its reaped children's, if asked)."""
    fields = _stat(pid)
    own = int(fields[11]) + int(fields[12])
    return (own + (int(fields[13]) + int(fields[14]) if children else 0)) / TICK


def fork_server_of(server_pid: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if int(_stat(int(entry.name))[1]) != server_pid:
                continue
            if b"uws.execution.forkserver" in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except (OSError, ValueError):
            continue
    return None


def run_one(client: HttpClient, url: str) -> float:
    t0 = time.perf_counter()
    r = send(client, "POST", url, data={**CREATE_FORM, "PHASE": "RUN"})
    job = r.headers["Location"]
    for _ in range(10):
        r = send(client, "GET", job, params={"WAIT": WAIT_SECONDS})
        if phase_of(r) not in ("PENDING", "QUEUED", "EXECUTING"):
            break
    if phase_of(r) != "COMPLETED":
        raise RuntimeError(f"{job} ended {phase_of(r)}")
    return (time.perf_counter() - t0) * 1000


def completed(client: HttpClient, url: str) -> int:
    r = send(client, "HEAD", url, params={"PHASE": "COMPLETED"})
    return int(r.headers.get("X-Job-Count", "-1"))


def burst(server: Server, clients: Clients, n: int) -> None:
    url = server.url + SERVICE
    probe = clients.http[0]
    before = completed(probe, url)
    forks = fork_server_of(server.proc.pid)
    s0, f0 = cpu_of(server.proc.pid), cpu_of(forks, True) if forks else float("nan")
    fo0 = cpu_of(forks) if forks else float("nan")
    recorder = _record(forks)
    t0 = time.perf_counter()
    clients.run(range(n), lambda c, _: send(c, "POST", url,
                                            data={**CREATE_FORM, "PHASE": "RUN"}), 303)
    done = 0
    while time.perf_counter() - t0 < 120 and done < n:
        done = completed(probe, url) - before
        time.sleep(0.02)
    took = time.perf_counter() - t0
    if recorder is not None:
        recorder.send_signal(signal.SIGINT)
        recorder.wait()
    s1, f1 = cpu_of(server.proc.pid), cpu_of(forks, True) if forks else float("nan")
    fo1 = cpu_of(forks) if forks else float("nan")
    print(f"  burst: {done}/{n} in {took:.2f} s = {done / took:6.1f} jobs/s;  CPU per job: "
          f"server {(s1 - s0) / n * 1000:5.2f} ms, fork server {(fo1 - fo0) / n * 1000:4.2f}"
          f" ms, jobs {((f1 - f0) - (fo1 - fo0)) / n * 1000:5.2f} ms", flush=True)


def _record(forks: int | None) -> subprocess.Popen | None:
    """``perf record`` of the fork server and the jobs it forks, into the file named by
    $JOBSTART_PERF (none if unset)."""
    out = os.environ.get("JOBSTART_PERF")
    if not out or forks is None:
        return None
    perf = subprocess.Popen(["perf", "record", "-q", "-g", "-F", "4000", "-o", out,
                             "-p", str(forks)], stderr=subprocess.DEVNULL)
    time.sleep(1)
    return perf


def measure(server: Server, clients: Clients, rounds: int, burst_jobs: int) -> None:
    url = server.url + SERVICE
    print(f"  filesystem: {inode_cost(server.data_dir):.0f} us to make an inode", flush=True)
    for _ in range(5):
        run_one(clients.http[0], url)       # warm up
    lat = [run_one(clients.http[0], url) for _ in range(rounds)]
    print(f"  create+RUN -> COMPLETED: p50 {percentile(lat, 50):6.2f} ms, "
          f"p90 {percentile(lat, 90):6.2f} ms", flush=True)
    if burst_jobs:
        burst(server, clients, burst_jobs)


def seed(server: Server, n: int) -> None:
    """Finished jobs of another owner (the anonymous callers' quota stays free)."""
    from uws.store import Store
    store = Store(server.db_url)
    try:
        store.seed_jobs(SERVICE, n, owner="earlier")
    finally:
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--burst", type=int, default=200, help="0: none")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--stored", default="0",
                    help="comma-separated counts of finished jobs stored, ascending")
    args = ap.parse_args()
    sizes = [int(n) for n in args.stored.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="uws-jobstart-"))
    server = Server(tmp / "data", tmp / "server.log")
    server.start()
    clients = Clients(8, server.url)
    try:
        stored = 0
        for size in sizes:
            if size > stored:
                seed(server, size - stored)
                stored = size
            if len(sizes) > 1:
                print(f"  -- {size} finished jobs of another owner stored --", flush=True)
            for _ in range(args.repeat):
                measure(server, clients, args.rounds, args.burst)
    finally:
        clients.close()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
