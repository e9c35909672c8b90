#!/usr/bin/env python
"""How the server's cost per request grows with concurrent clients (issue 12).

    python bench/concurrency.py [--clients 1,2,4,8] [--requests 400]

Starts ``uws serve`` and the ceiling (bench/ceiling.py) as bench.py does, and for
each number of clients sends creations, GETs of one job and deletions, printing the
rate, the p50, the server's user and system CPU per request and its context
switches per request (voluntary: waiting for a lock, the GIL or I/O; involuntary:
preempted).  A server whose CPU per request climbs with the clients is losing it
to contention (an event loop spinning, the GIL passed back and forth, writers
polling for SQLite's lock), which the 1-client figures of bench.py do not show.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from bench import CREATE_FORM, SERVICE, Ceiling, Clients, Server, job_id_of, send

TICK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid: int) -> tuple[int, int]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def switches(pid: int) -> tuple[int, int]:
    """Voluntary and involuntary context switches of every thread of ``pid``."""
    voluntary = involuntary = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue            # a thread that ended meanwhile
        for line in text.splitlines():
            if line.startswith("voluntary_ctxt_switches"):
                voluntary += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                involuntary += int(line.split()[1])
    return voluntary, involuntary


def measure(server: Server, label: str, clients: Clients, items, call, expect: int):
    """Run ``call`` over ``items`` and print the figures; the sample."""
    pid = server.proc.pid
    (u0, s0), (v0, i0) = cpu_ticks(pid), switches(pid)
    sample = clients.run(items, call, expect, keep=job_id_of if expect == 303 else None)
    (u1, s1), (v1, i1) = cpu_ticks(pid), switches(pid)
    n = max(sample.ok, 1)
    print(f"  {label:28} {sample.rate:8.0f}/s  p50 {sample.p50:6.2f} ms  "
          f"CPU/req user {(u1 - u0) / TICK / n * 1e3:5.2f} sys {(s1 - s0) / TICK / n * 1e3:5.2f} ms  "
          f"switches/req {(v1 - v0) / n:6.1f} vol {(i1 - i0) / n:5.1f} invol"
          + (f"  ({sum(sample.errors.values())} failed: {sample.first_error})"
             if sample.errors else ""), flush=True)
    return sample


def creations(server: Server, clients: Clients, n: int, requests: int):
    """``requests`` job creations over ``n`` clients (after a few untimed ones)."""
    url = server.url + SERVICE
    clients.run(range(20), lambda c, _: send(c, "POST", url, data=CREATE_FORM), 303)
    return measure(server, f"create, {n} clients", clients, range(requests),
                   lambda c, _: send(c, "POST", url, data=CREATE_FORM), 303)


def run_uws(server: Server, n: int, requests: int) -> None:
    clients = Clients(n, server.url)
    url = server.url + SERVICE
    created = creations(server, clients, n, requests)
    job = f"{url}/{created.values[0]}"
    measure(server, f"GET job, {n} clients", clients, range(2 * requests),
            lambda c, _: send(c, "GET", job), 200)
    measure(server, f"delete, {n} clients", clients, created.values,
            lambda c, job_id: send(c, "DELETE", f"{url}/{job_id}"), 303)
    clients.close()


def run_ceiling(ceiling: Ceiling, n: int, requests: int) -> None:
    clients = Clients(n, ceiling.url)
    creations(ceiling, clients, n, requests)
    clients.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,2,4,8", help="client counts, comma-separated")
    parser.add_argument("--requests", type=int, default=400, help="creations per client count")
    args = parser.parse_args()
    counts = [int(x) for x in args.clients.split(",")]
    work = Path(tempfile.mkdtemp(prefix="uws-concurrency-"))
    server = Server(work / "data", work / "server.log")
    ceiling = Ceiling(work / "ceiling", work / "ceiling.log")
    try:
        server.start()
        ceiling.start()
        print("uws serve")
        for n in counts:
            run_uws(server, n, args.requests)
        print("the ceiling (bare Flask, same HTTP server)")
        for n in counts:
            run_ceiling(ceiling, n, args.requests)
    finally:
        server.stop()
        ceiling.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
