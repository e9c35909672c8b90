#!/usr/bin/env python
"""Embedded server against front ends + Celery workers on PostgreSQL, side by side.

Measures, for (1) the embedded ``uws serve`` (SQLite, local executor, 2 slots) and
(2) PostgreSQL with 2 front ends and 2 ``uws worker`` processes (RabbitMQ, 2 slots
each): creation rate, no-op jobs completed per second, create+RUN -> COMPLETED
latency, and WAIT wake latency across front ends; then creation and completion
throughput with 1, 2, 4 front ends (2 workers) and 1, 2, 4 workers (2 front ends).
Prints a table and writes it as JSON.  See bench/README.rst.

    python bench/scale.py [--jobs 200] [--clients 8] [--rounds 30] [--wake-rounds 10]
                          [--json scale.json] [--keep]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (  # noqa: E402
    HOST,
    REQUEST_ERRORS,
    SERVICE,
    WAIT_SECONDS,
    Clients,
    HttpClient,
    Waiter,
    busy_cpu_seconds,
    free_port,
    job_id_of,
    load_average,
    percentile,
    phase_of,
    send,
)

POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
RABBITMQ = "amqp://guest:guest@127.0.0.1:5672//"
SLOTS = 2
ACTIVE = ("PENDING", "QUEUED", "EXECUTING")


# -- the processes under test ---------------------------------------------------------------

class Deployment:
    """``uws serve`` front ends and ``uws worker`` processes sharing one config file.

    ``broker`` None: the embedded shape (SQLite in the data directory, local executor,
    one front end, no workers).  Otherwise a PostgreSQL schema of its own, dropped by
    ``stop``, and a Celery queue of its own on ``broker``, deleted by ``stop``."""

    def __init__(self, root: Path, broker: str | None):
        self.root, self.broker = root, broker
        root.mkdir(parents=True)
        self.queue = f"uws-bench-{uuid.uuid4().hex[:8]}"
        self.schema = f"uws_bench_{uuid.uuid4().hex[:12]}" if broker else ""
        self.front_ends: list[tuple[str, subprocess.Popen]] = []
        self.workers: list[subprocess.Popen] = []
        self.config = root / "uws.toml"
        if self.schema:
            admin_sql(f"CREATE SCHEMA {self.schema}")
        self.config.write_text(self._toml())

    def _toml(self) -> str:
        # No [services] table: the demo services (``sleep``) stay on, everywhere.
        server = f'[server]\ndata_dir = "{self.root / "data"}"\n'
        if not self.broker:
            return server + f'\n[executor]\nkind = "local"\nslots = {SLOTS}\n'
        db = f"{POSTGRES}?options=-csearch_path%3D{self.schema}"
        return (server + f'database_url = "{db}"\n\n[executor]\nkind = "celery"\n'
                f'broker_url = "{self.broker}"\nqueue = "{self.queue}"\nslots = {SLOTS}\n')

    @property
    def urls(self) -> list[str]:
        return [url for url, _ in self.front_ends]

    def scale(self, front_ends: int, workers: int) -> None:
        """Start or stop processes until there are this many of each."""
        while len(self.front_ends) > front_ends:
            stop_process(self.front_ends.pop()[1])
        while len(self.workers) > workers:
            stop_process(self.workers.pop())
        started = []
        while len(self.front_ends) < front_ends:
            port = free_port()
            proc = self._start("serve", "--host", HOST, "--port", str(port), log=f"front-{port}")
            self.front_ends.append((f"http://{HOST}:{port}/", proc))
            started.append((proc, f"front-{port}", "UWS server on http://"))
        while len(self.workers) < workers:
            proc = self._start("worker", log=f"worker-{len(self.workers)}")
            self.workers.append(proc)
            started.append((proc, f"worker-{len(self.workers) - 1}", " ready."))
        for proc, log, ready in started:     # started together, waited for together
            self._wait_ready(proc, log, ready)

    def _start(self, command: str, *args: str, log: str) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if not k.startswith("UWS_")}
        with open(self.root / f"{log}.log", "ab") as out:
            # a session of its own: Ctrl-C reaches this script only, which stops it in order
            return subprocess.Popen([sys.executable, "-m", "uws", command, "--config",
                                     str(self.config), *args], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, cwd=self.root, start_new_session=True)

    def _wait_ready(self, proc: subprocess.Popen, log: str, ready: str) -> None:
        path, deadline = self.root / f"{log}.log", time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{log} exited with {proc.returncode}:\n{tail(path)}")
            if ready in path.read_text(errors="replace"):
                return
            time.sleep(0.05)
        raise RuntimeError(f"{log} not ready after 60 s:\n{tail(path)}")

    def stop(self) -> None:
        # a second Ctrl-C must not cut the cleanup short and leave processes behind
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self._stop()
        finally:
            signal.signal(signal.SIGINT, previous)

    def _stop(self) -> None:
        self.scale(0, 0)
        if self.schema:
            admin_sql(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        if self.broker:
            delete_queue(self.broker, self.queue)

    def problems(self) -> list[str]:
        """Error lines of every log (the processes log tracebacks)."""
        found = []
        for path in sorted(self.root.glob("*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if " ERROR " in line or " CRITICAL " in line or "Traceback" in line:
                    found.append(f"{path.name}: {line}")
        return found


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM to its process group (a worker's job processes too), SIGKILL after 20 s."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def admin_sql(sql: str) -> None:
    import sqlalchemy as sa
    engine = sa.create_engine(POSTGRES)
    with engine.begin() as conn:
        conn.execute(sa.text(sql))
    engine.dispose()


def delete_queue(broker: str, queue: str) -> None:
    """The Celery queue is durable: left alone it would outlive the run on RabbitMQ."""
    import kombu
    try:
        with kombu.Connection(broker, connect_timeout=5) as conn:
            conn.default_channel.queue_delete(queue)
    except Exception as exc:      # noqa: BLE001  (cleanup: say so, go on)
        print(f"could not delete the broker queue {queue}: {exc}", file=sys.stderr)


# -- measurements -----------------------------------------------------------------------------

@dataclasses.dataclass
class Plan:
    jobs: int = 200          # jobs per throughput measurement
    clients: int = 8         # client threads, spread round-robin over the front ends
    rounds: int = 30         # create+RUN -> COMPLETED rounds, one client
    wake_rounds: int = 10    # WAIT wake rounds
    deadline: float = 60.0   # longest wait for a burst of RUN jobs to complete, s


def clients_over(urls: list[str], n: int) -> Clients:
    """n keep-alive clients, client i on front end i mod len(urls)."""
    return Clients(http=[HttpClient(urls[i % len(urls)]) for i in range(n)])


def post_jobs(urls: list[str], plan: Plan, run: bool) -> tuple[int, float, list[str]]:
    """Create plan.jobs jobs over plan.clients clients: (created, wall s, errors)."""
    data = {"DURATION": "0", **({"PHASE": "RUN"} if run else {})}
    clients = clients_over(urls, plan.clients)
    try:
        sample = clients.run(range(plan.jobs),
                             lambda c, _: send(c, "POST", f"{c.base_url}/{SERVICE}", data=data),
                             303)
    finally:
        clients.close()
    errors = [f"{sum(sample.errors.values())} failed creations: {sample.first_error}"] \
        if sample.errors else []
    return sample.ok, sample.wall_s, errors


def count(client: HttpClient, phase: str) -> int:
    r = send(client, "HEAD", f"/{SERVICE}", params={"PHASE": phase})
    return int(r.headers.get("X-Job-Count", "-1"))


def creation_rate(urls: list[str], plan: Plan) -> tuple[float, list[str]]:
    # Untimed first: a front end just started answers its first requests slowly
    # (imports, connection pools), which would be counted against its shape.
    post_jobs(urls, dataclasses.replace(plan, jobs=2 * plan.clients), run=False)
    created, wall, errors = post_jobs(urls, plan, run=False)
    return created / wall, errors


def completion_rate(urls: list[str], plan: Plan) -> tuple[float, list[str]]:
    """Jobs/s from the first POST (PHASE=RUN) to the moment all are seen COMPLETED."""
    counter = HttpClient(urls[0])
    try:
        before = count(counter, "COMPLETED")
        t0 = time.perf_counter()
        created, _, errors = post_jobs(urls, plan, run=True)
        deadline, done = time.monotonic() + plan.deadline, 0
        while time.monotonic() < deadline:
            done = count(counter, "COMPLETED") - before
            if done >= created:
                break
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        if done < created:
            errors.append(f"only {done} of {created} COMPLETED within {plan.deadline:.0f} s "
                          f"({count(counter, 'ERROR')} in ERROR)")
    finally:
        counter.close()
    return done / wall, errors


def run_latency(url: str, rounds: int) -> tuple[list[float], list[str]]:
    """One client: POST PHASE=RUN, then WAIT on the phase seen until COMPLETED."""
    client, times, errors = HttpClient(url), [], []
    try:
        for _ in range(rounds):
            t0 = time.perf_counter()
            try:
                final = _run_one(client)
            except REQUEST_ERRORS as exc:
                final = type(exc).__name__
            if final == "COMPLETED":
                times.append((time.perf_counter() - t0) * 1000.0)
            else:
                errors.append(f"a RUN job ended {final}")
    finally:
        client.close()
    return times, errors[:3]


def _run_one(client: HttpClient) -> str:
    r = send(client, "POST", f"/{SERVICE}", data={"DURATION": "0", "PHASE": "RUN"})
    if r.status_code != 303:
        return f"HTTP {r.status_code}"
    job, phase = "/" + job_id_of(r), "QUEUED"
    for _ in range(20):      # each WAIT returns at the next phase change
        r = send(client, "GET", f"/{SERVICE}{job}", params={"WAIT": WAIT_SECONDS, "PHASE": phase})
        phase = phase_of(r) if r.status_code == 200 else f"HTTP {r.status_code}"
        if phase not in ACTIVE:
            break
    return phase


def wake_latency(wait_url: str, abort_url: str, rounds: int) -> tuple[list[float], list[str]]:
    """A WAIT on a PENDING job through one front end, its ABORT through another: ms
    from the ABORT's answer to the WAIT's answer (negative if the WAIT answered first)."""
    client, times, errors = HttpClient(abort_url), [], []
    try:
        for _ in range(rounds):
            r = send(client, "POST", f"/{SERVICE}", data={"DURATION": "0"})
            job = f"{SERVICE}/{job_id_of(r)}"
            waiter = Waiter(wait_url + job)
            time.sleep(0.3)       # the WAIT is blocking on the server by now
            r = send(client, "POST", f"/{job}/phase", data={"PHASE": "ABORT"})
            aborted_at = time.time()
            waiter.done.wait(WAIT_SECONDS + 10)
            problem = waiter.problem("ABORTED") or ("" if r.status_code == 303
                                                    else f"ABORT answered {r.status_code}")
            if problem:
                errors.append(problem)
            else:
                times.append((waiter.answered_at - aborted_at) * 1000.0)
    finally:
        client.close()
    return times, errors[:3]


# -- one row of the table ----------------------------------------------------------------------

@dataclasses.dataclass
class Row:
    shape: str
    front_ends: int
    workers: int
    created_per_s: float = math.nan
    completed_per_s: float = math.nan
    run_p50_ms: float = math.nan
    run_p99_ms: float = math.nan
    wake_p50_ms: float = math.nan
    wake_p99_ms: float = math.nan
    busy_cores: float = math.nan      # CPU the whole machine used over the row / its wall time
    load: str = ""
    problems: list[str] = dataclasses.field(default_factory=list)


def measure(row: Row, urls: list[str], plan: Plan, latencies: bool) -> Row:
    """Throughputs always; the latencies only for the two main shapes."""
    # The machine's CPU use over the row: on a shared machine it tells a row that
    # competed with other programs from one that had the cores to itself.
    t0, cpu0 = time.perf_counter(), busy_cpu_seconds()
    row.created_per_s, errors = creation_rate(urls, plan)
    row.problems += errors
    row.completed_per_s, errors = completion_rate(urls, plan)
    row.problems += errors
    if latencies:
        runs, errors = run_latency(urls[0], plan.rounds)
        row.run_p50_ms, row.run_p99_ms = percentile(runs, 50), percentile(runs, 99)
        row.problems += errors
        wakes, errors = wake_latency(urls[0], urls[-1], plan.wake_rounds)
        row.wake_p50_ms, row.wake_p99_ms = percentile(wakes, 50), percentile(wakes, 99)
        row.problems += errors
    row.busy_cores = (busy_cpu_seconds() - cpu0) / (time.perf_counter() - t0)
    row.load = load_average()
    print_row(row)
    return row


COLUMNS = ("shape", "FE", "W", "create/s", "done/s", "run p50", "run p99", "wake p50",
           "wake p99", "busy", "load avg")


def print_header() -> None:
    print(f"{COLUMNS[0]:<11}{COLUMNS[1]:>3}{COLUMNS[2]:>3}"
          + "".join(f"{c:>10}" for c in COLUMNS[3:9]) + f"{COLUMNS[9]:>7}  {COLUMNS[10]}")
    print(f"{'':<17}{'jobs/s':>10}{'jobs/s':>10}" + f"{'ms':>10}" * 4 + f"{'cores':>7}")


def print_row(row: Row) -> None:
    figures = (row.created_per_s, row.completed_per_s, row.run_p50_ms, row.run_p99_ms,
               row.wake_p50_ms, row.wake_p99_ms)
    cells = "".join(f"{'-':>10}" if math.isnan(x) else f"{x:>10.1f}" for x in figures)
    print(f"{row.shape:<11}{row.front_ends:>3}{row.workers:>3}{cells}{row.busy_cores:>7.2f}  "
          f"{row.load}", flush=True)


# -- the run ------------------------------------------------------------------------------

def embedded(root: Path, plan: Plan) -> list[Row]:
    dep = Deployment(root / "embedded", None)
    try:
        dep.scale(1, 0)
        return [measure(Row("sqlite", 1, 0), dep.urls, plan, latencies=True)]
    finally:
        dep.stop()
        problems.extend(dep.problems())


def distributed(root: Path, plan: Plan) -> list[Row]:
    """The main shape, then the scaling steps, adding and stopping processes in an
    order that never restarts one it will need again."""
    dep = Deployment(root / "postgres", RABBITMQ)
    rows = []
    try:
        for fronts, workers in ((2, 2), (2, 1), (2, 4), (1, 2), (4, 2)):
            dep.scale(fronts, workers)
            main_shape = (fronts, workers) == (2, 2)
            rows.append(measure(Row("postgresql", fronts, workers), dep.urls, plan,
                                latencies=main_shape))
    finally:
        dep.stop()
        problems.extend(dep.problems())
    return rows


problems: list[str] = []      # error lines of the processes' logs


def parse_args(argv=None) -> tuple[Plan, argparse.Namespace]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=200, help="jobs per throughput figure (200)")
    ap.add_argument("--clients", type=int, default=8, help="concurrent client threads (8)")
    ap.add_argument("--rounds", type=int, default=30, help="create+RUN latency rounds (30)")
    ap.add_argument("--wake-rounds", type=int, default=10, help="WAIT wake rounds (10)")
    ap.add_argument("--deadline", type=float, default=60.0,
                    help="longest wait for a burst of RUN jobs to complete, s (60)")
    ap.add_argument("--only", choices=("sqlite", "postgresql"), help="one shape only")
    ap.add_argument("--json", default="scale.json", help="where to write the table (scale.json)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    args = ap.parse_args(argv)
    return Plan(args.jobs, args.clients, args.rounds, args.wake_rounds, args.deadline), args


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    plan, args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    # also when started in the background by a shell, which ignores SIGINT for it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cores, load_before = os.cpu_count(), load_average()
    print(f"UWS scale: {plan.jobs} jobs per figure, {plan.clients} clients, "
          f"{plan.rounds} RUN rounds, {plan.wake_rounds} wake rounds; {cores} cores "
          f"(nproc {len(os.sched_getaffinity(0))}), load average {load_before}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="uws-scale-")).resolve()
    rows: list[Row] = []
    status = 0
    print_header()
    try:
        if args.only != "postgresql":
            rows += embedded(root, plan)
        if args.only != "sqlite":
            rows += distributed(root, plan)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        status = 130
    except Exception as exc:       # report what we have, keep the logs
        print(f"\nscale run aborted: {type(exc).__name__}: {exc}", file=sys.stderr)
        status = 1
    finish(rows, args, root, status, {"cores": cores, "load_before": load_before})
    return status


def finish(rows: list[Row], args, root: Path, status: int, info: dict) -> None:
    info["load_after"] = load_average()
    print(f"cores {info['cores']}; load average before {info['load_before']}, "
          f"after {info['load_after']}")
    for row in rows:
        for msg in row.problems:
            print(f"  problem ({row.shape} {row.front_ends} FE {row.workers} W): {msg}")
    for line in problems[:20]:
        print(f"  log: {line}")
    rows_json = [{k: (None if isinstance(v, float) and math.isnan(v) else v)
                  for k, v in dataclasses.asdict(row).items()} for row in rows]
    Path(args.json).write_text(json.dumps({**info, "plan": vars(args), "rows": rows_json},
                                          indent=2) + "\n")
    print(f"table written to {args.json}")
    if args.keep or status == 1:
        print(f"logs kept in {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
