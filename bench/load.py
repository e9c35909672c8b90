#!/usr/bin/env python
"""Bounded load test of the embedded UWS server (``uws serve``) on 127.0.0.1.

Starts the server as bench.py does (fresh temporary data directory, free port),
runs N client threads for S seconds of mixed operations on the demo ``sleep``
service (create, run, WAIT, list, abort, delete), records every status code,
then checks that every job it created is accounted for.  See bench/README.rst.

    python bench/load.py [--clients 50] [--seconds 60] [--seed N] [--keep]
                         [--hostile] [--idle N] [--slow-readers N] [--oversize N]
                         [--wrong-passwords N]

With a hostile mix (bench/hostile.py) running beside the honest clients, in a
process of its own, it also prints the honest clients' p50/p99 latency and error
count under that mix.  With --wrong-passwords the server runs with HTTP Basic
authentication on (the honest clients stay anonymous) and threads send wrong
passwords for its one user.

Exit status: 0 when no answer was 5xx, every request was answered, every answer
was one the operation allows, and every job is accounted for; 1 otherwise; 130
when interrupted.
"""
from __future__ import annotations

import argparse
import base64
import collections
import os
import random
import re
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory import RssSampler, mib  # noqa: E402

from bench import (  # noqa: E402
    REQUEST_ERRORS,
    SERVICE,
    HttpClient,
    Response,
    Server,
    job_id_of,
    load_average,
    next_link,
    percentile,
    phase_of,
)
from hostile import Hostile, HostileProcess  # noqa: E402

TIMEOUT = (5, 30)        # (connect, read) seconds; the longest request is a WAIT=2
WAIT = 2                 # GET {job}?WAIT=...
MAX_OPS_PER_SECOND = 50  # per client: the count bound of a client's loop (never reached)
PAGE = 50                # extend=...
MAX_HOPS = 2             # rel="next" links followed after a first page
USER = "bench"           # the one [auth.users] name with --wrong-passwords
RSS_TARGET_MIB = 100     # the server's peak VmRSS during the load, above its idle figure
ACTIVE = ("PENDING", "QUEUED", "EXECUTING")
FINISHED = ("COMPLETED", "ERROR", "ABORTED", "ARCHIVED")
FILTERS = [("PENDING",), ("QUEUED",), ("EXECUTING",), ("COMPLETED",), ("ABORTED",),
           ("QUEUED", "EXECUTING"), ("COMPLETED", "ERROR", "ABORTED")]

#: operation -> (weight of the operation in the mix, statuses it may answer)
OPERATIONS = {
    "create":     (22, {303}),
    "run":        (10, {303, 403, 404}),    # 403: already finished, 404: deleted meanwhile
    "wait":       (10, {200, 404}),
    "list.last":  (9, {200}),               # GET /sleep?LAST=20
    "list.page":  (9, {200}),               # GET /sleep?extend=50 (+ up to 2 rel="next")
    "list.phase": (8, {200}),               # GET /sleep?PHASE=...[&PHASE=...]
    "list.head":  (8, {200}),               # HEAD /sleep[?PHASE=...]: X-Job-Count
    "abort":      (10, {303, 403, 404}),    # 403: COMPLETED or ERROR
    "delete":     (14, {303, 404}),         # 404: deleted by another client meanwhile
}
# pages after the first are timed as their own operation
ALLOWED = {op: ok for op, (_, ok) in OPERATIONS.items()} | {"list.next": {200},
                                                            "final.get": {200, 404},
                                                            "final.head": {200}}

_PHASES_RE = re.compile(rb"<uws:phase>([A-Z]+)</uws:phase>")


class Jobs:
    """Every job the clients created, and what they did to it (thread-safe)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.state: dict[str, str] = {}     # id -> "live", "deleted", "delete?" (no answer)
        self.live: list[str] = []           # the live ids, for random choice
        self.index: dict[str, int] = {}     # id -> position in live
        self.recent: collections.deque = collections.deque(maxlen=20)
        self.created_running = 0            # created with PHASE=RUN
        self.create_unanswered = 0          # POSTs without an answer: a job may exist

    def created(self, job_id: str, running: bool) -> None:
        with self.lock:
            self.state[job_id] = "live"
            self.index[job_id] = len(self.live)
            self.live.append(job_id)
            self.recent.append(job_id)
            self.created_running += running

    def pick(self, rng: random.Random) -> str | None:
        """A live job: half the time one of the 20 newest (so that clients meet on the
        same jobs), else any."""
        with self.lock:
            if not self.live:
                return None
            if rng.random() < 0.5 and self.recent:
                return rng.choice(self.recent)
            return rng.choice(self.live)

    def forget(self, job_id: str, state: str) -> None:
        """``state``: "deleted" (DELETE answered 303) or "delete?" (no answer)."""
        with self.lock:
            if self.state.get(job_id) != "live":
                return
            self.state[job_id] = state
            i = self.index.pop(job_id)
            last = self.live.pop()
            if last != job_id:
                self.live[i] = last
                self.index[last] = i
            try:
                self.recent.remove(job_id)
            except ValueError:
                pass


class Record:
    """One thread's requests: latency per operation, status per operation, problems."""

    def __init__(self):
        self.latencies: dict[str, list[float]] = collections.defaultdict(list)
        self.statuses: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.problems: list[str] = []

    def merge(self, other: Record) -> None:
        for op, values in other.latencies.items():
            self.latencies[op].extend(values)
        for op, counts in other.statuses.items():
            self.statuses[op].update(counts)
        self.problems.extend(other.problems)

    def call(self, client: HttpClient, op: str, method: str, url: str, **kwargs) -> Response | None:
        """Send one request; record its status (or the exception, as "no answer") and,
        when answered, its latency.  None when it was not answered."""
        t0 = time.perf_counter()
        try:
            r = client.request(method, url, **kwargs)
        except REQUEST_ERRORS as exc:
            self.statuses[op][f"no answer ({type(exc).__name__})"] += 1
            self.problems.append(f"{op} {method} {url}: no answer: {type(exc).__name__}: {exc}")
            return None
        self.latencies[op].append((time.perf_counter() - t0) * 1000.0)
        self.statuses[op][r.status_code] += 1
        if r.status_code not in ALLOWED[op]:
            self.problems.append(f"{op} {method} {url}: HTTP {r.status_code}: {r.text[:200]!r}")
        return r

    def inconsistent(self, msg: str) -> None:
        self.problems.append(msg)


class Load:
    def __init__(self, base_url: str, clients: int, seconds: float, seed: int):
        self.base_url = base_url
        self.clients = clients
        self.seconds = seconds
        self.seed = seed
        self.jobs = Jobs()
        self.records = [Record() for _ in range(clients)]
        self.ops_done = [0] * clients
        self.wall = 0.0
        names = list(OPERATIONS)
        self.names, self.weights = names, [OPERATIONS[n][0] for n in names]

    def url(self, path: str) -> str:
        return self.base_url.rstrip("/") + "/" + path.lstrip("/")

    # -- the clients' loop --------------------------------------------------------------

    def run(self) -> None:
        deadline = time.monotonic() + self.seconds
        max_ops = int(self.seconds * MAX_OPS_PER_SECOND) + 1
        threads = [threading.Thread(target=self.client, args=(i, deadline, max_ops), daemon=True)
                   for i in range(self.clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        # progress every 10 s; the threads stop by themselves at the deadline (each
        # request has a read timeout), so give up waiting for them a little later
        give_up = deadline + TIMEOUT[0] + TIMEOUT[1] + 5
        next_report = time.monotonic() + 10
        while any(t.is_alive() for t in threads) and time.monotonic() < give_up:
            time.sleep(0.2)
            if time.monotonic() >= next_report and time.monotonic() < deadline:
                next_report += 10
                print(f"  {time.perf_counter() - t0:5.0f} s: {sum(self.ops_done)} operations, "
                      f"{len(self.jobs.state)} jobs created, {len(self.jobs.live)} not deleted, "
                      f"{accept_queue(self.base_url)} connections waiting to be accepted",
                      flush=True)
        self.wall = time.perf_counter() - t0
        stuck = sum(t.is_alive() for t in threads)
        if stuck:
            self.records[0].problems.append(f"{stuck} client threads still running "
                                            f"{give_up - deadline:.0f} s after the deadline")

    def client(self, i: int, deadline: float, max_ops: int) -> None:
        rng = random.Random(self.seed * 1000 + i)
        rec = self.records[i]
        http = HttpClient(self.base_url, timeout=TIMEOUT)
        try:
            for _ in range(max_ops):
                if time.monotonic() >= deadline:
                    break
                op = rng.choices(self.names, self.weights)[0]
                getattr(self, "op_" + op.replace(".", "_"))(http, rec, rng)
                self.ops_done[i] += 1
        except Exception as exc:      # noqa: BLE001  (a bug here must show, not hang)
            rec.problems.append(f"client {i} stopped: {type(exc).__name__}: {exc}")
        finally:
            http.close()

    # -- the operations -----------------------------------------------------------------

    def op_create(self, http: HttpClient, rec: Record, rng: random.Random) -> None:
        data = {"DURATION": f"{rng.uniform(0, 2):.2f}"}
        running = rng.random() < 0.3
        if running:
            data["PHASE"] = "RUN"
        r = rec.call(http, "create", "POST", self.url(SERVICE), data=data)
        if r is None:
            with self.jobs.lock:
                self.jobs.create_unanswered += 1
        elif r.status_code == 303:
            self.jobs.created(job_id_of(r), running)

    def _job_op(self, http, rec, rng, op, method, suffix="", **kwargs) -> tuple[str, Response | None]:
        job_id = self.jobs.pick(rng)
        if job_id is None:           # nothing to act on yet: create instead
            self.op_create(http, rec, rng)
            return "", None
        return job_id, rec.call(http, op, method, self.url(f"{SERVICE}/{job_id}{suffix}"), **kwargs)

    def op_run(self, http, rec, rng) -> None:
        self._job_op(http, rec, rng, "run", "POST", "/phase", data={"PHASE": "RUN"})

    def op_abort(self, http, rec, rng) -> None:
        self._job_op(http, rec, rng, "abort", "POST", "/phase", data={"PHASE": "ABORT"})

    def op_wait(self, http, rec, rng) -> None:
        t0 = time.perf_counter()
        job_id, r = self._job_op(http, rec, rng, "wait", "GET", params={"WAIT": WAIT})
        if r is not None and r.status_code == 200:
            phase = phase_of(r)
            if phase not in ACTIVE + FINISHED:
                rec.inconsistent(f"wait {job_id}: phase {phase!r}")
            took = time.perf_counter() - t0
            if took > WAIT + 10:
                rec.inconsistent(f"wait {job_id}: WAIT={WAIT} answered after {took:.1f} s")

    def op_delete(self, http, rec, rng) -> None:
        job_id = self.jobs.pick(rng)
        if job_id is None:
            return self.op_create(http, rec, rng)
        url = self.url(f"{SERVICE}/{job_id}")
        if rng.random() < 0.2:       # the browser form's way
            r = rec.call(http, "delete", "POST", url, data={"ACTION": "DELETE"})
        else:
            r = rec.call(http, "delete", "DELETE", url)
        if r is None:
            self.jobs.forget(job_id, "delete?")
        elif r.status_code == 303:
            self.jobs.forget(job_id, "deleted")

    def op_list_last(self, http, rec, rng) -> None:
        r = rec.call(http, "list.last", "GET", self.url(SERVICE), params={"LAST": 20})
        if r is not None and r.status_code == 200:
            n = r.content.count(b"<uws:jobref ")
            if n > 20:
                rec.inconsistent(f"LAST=20 answered {n} jobrefs")

    def op_list_page(self, http, rec, rng) -> None:
        op, url = "list.page", self.url(f"{SERVICE}?extend={PAGE}")
        for _ in range(1 + rng.randint(0, MAX_HOPS)):
            r = rec.call(http, op, "GET", url)
            if r is None or r.status_code != 200:
                return
            n, url = r.content.count(b"<uws:jobref "), next_link(r)
            if n > PAGE or (url is not None and n != PAGE):
                rec.inconsistent(f"extend={PAGE}: {n} jobrefs, Link {'present' if url else 'absent'}")
            if url is None:
                return
            op = "list.next"

    def op_list_phase(self, http, rec, rng) -> None:
        phases = rng.choice(FILTERS)
        query = "&".join(f"PHASE={p}" for p in phases)
        if rng.random() < 0.5:
            query += "&LAST=50"
        r = rec.call(http, "list.phase", "GET", self.url(f"{SERVICE}?{query}"))
        if r is not None and r.status_code == 200:
            wrong = {m.decode() for m in _PHASES_RE.findall(r.content)} - set(phases)
            if wrong:
                rec.inconsistent(f"GET ?{query} listed jobs in {sorted(wrong)}")

    def op_list_head(self, http, rec, rng) -> None:
        query = f"?PHASE={rng.choice(ACTIVE + FINISHED[:3])}" if rng.random() < 0.5 else ""
        r = rec.call(http, "list.head", "HEAD", self.url(SERVICE + query))
        if r is not None and r.status_code == 200 and not (r.headers.get("X-Job-Count") or "").isdigit():
            rec.inconsistent(f"HEAD /{SERVICE}{query}: X-Job-Count {r.headers.get('X-Job-Count')!r}")

    # -- the accounting -----------------------------------------------------------------

    def account(self, rec: Record) -> dict:
        """GET every created job, then HEAD the list; returns what was found."""
        ids = list(self.jobs.state)
        work = iter(ids)
        lock = threading.Lock()
        found: dict[str, object] = {}         # id -> phase, 404, or another status / None

        def check() -> None:
            http = HttpClient(self.base_url, timeout=TIMEOUT)
            local = Record()
            try:
                while True:
                    with lock:
                        job_id = next(work, None)
                    if job_id is None:
                        return
                    r = local.call(http, "final.get", "GET", self.url(f"{SERVICE}/{job_id}"))
                    found[job_id] = (None if r is None else
                                     phase_of(r) if r.status_code == 200 else r.status_code)
            finally:
                http.close()
                with lock:
                    rec.merge(local)

        threads = [threading.Thread(target=check, daemon=True) for _ in range(8)]
        for t in threads:
            t.start()
        give_up = time.monotonic() + 300
        for t in threads:
            t.join(max(give_up - time.monotonic(), 0.1))

        unaccounted: list[str] = []
        phases: collections.Counter = collections.Counter()
        deleted = gone_unanswered = kept_unanswered = 0
        for job_id in ids:
            state, got = self.jobs.state[job_id], found.get(job_id, "not checked")
            if state == "deleted":
                deleted += 1
                if got != 404:
                    unaccounted.append(f"{job_id}: deleted (303), but GET answers {got}")
            elif state == "delete?":          # the DELETE had no answer: either is fine
                if got == 404:
                    deleted += 1
                    gone_unanswered += 1
                elif got in ACTIVE + FINISHED:
                    kept_unanswered += 1
                    phases[got] += 1
                else:
                    unaccounted.append(f"{job_id}: DELETE unanswered, GET answers {got}")
            elif got in ACTIVE + FINISHED:
                phases[got] += 1
            else:
                unaccounted.append(f"{job_id}: never deleted, GET answers {got}")

        expected = len(ids) - deleted
        http = HttpClient(self.base_url, timeout=TIMEOUT)
        r = rec.call(http, "final.head", "HEAD", self.url(SERVICE))
        http.close()
        count = r.headers.get("X-Job-Count") if r is not None and r.status_code == 200 else None
        return {"created": len(ids), "deleted": deleted, "phases": phases,
                "unaccounted": unaccounted, "expected": expected, "count": count,
                "delete_unanswered": (gone_unanswered, kept_unanswered)}


def accept_queue(base_url: str) -> int | None:
    """Connections in the server's listen backlog, not yet accepted (the LISTEN
    socket's rx_queue in Linux's /proc/net/tcp); None when unknown.  A new
    connection, honest or not, waits behind all of them."""
    port = int(base_url.rstrip("/").rsplit(":", 1)[1])
    try:
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":   # 0A: LISTEN
                return int(fields[4].split(":")[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return None


# -- printing ---------------------------------------------------------------------------------

def print_operations(rec: Record, wall: float, ops: list[str]) -> None:
    print(f"\nOperations over {wall:.1f} s (latency from sending to the whole answer read)")
    print(f"  {'operation':<11} {'requests':>8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}   statuses")
    total, everything = 0, []
    for op in ops:
        lat, st = rec.latencies.get(op, []), rec.statuses.get(op, collections.Counter())
        n = sum(st.values())
        if not n:
            continue
        total += n
        everything += lat
        print(f"  {op:<11} {n:8d} {n / wall:8.1f} {percentile(lat, 50):8.2f} "
              f"{percentile(lat, 99):8.2f}   {_statuses(st)}")
    print(f"  {'all':<11} {total:8d} {total / wall:8.1f} {percentile(everything, 50):8.2f} "
          f"{percentile(everything, 99):8.2f}")


def _statuses(counts: collections.Counter) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: str(kv[0])))


def count_5xx(rec: Record) -> int:
    return sum(v for st in rec.statuses.values() for k, v in st.items()
               if isinstance(k, int) and k >= 500)


def count_unanswered(rec: Record) -> int:
    return sum(v for st in rec.statuses.values() for k, v in st.items() if isinstance(k, str))


# -- main -----------------------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=_positive, default=50, help="client threads (50)")
    ap.add_argument("--seconds", type=float, default=60.0, help="duration of the load (60)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (printed; default: random)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary data directory")
    ap.add_argument("--idle", type=_count, default=0,
                    help="hostile: idle connections held open (0)")
    ap.add_argument("--slow-readers", type=_count, default=0,
                    help="hostile: connections asking for a 24 MiB file, never reading (0)")
    ap.add_argument("--oversize", type=_count, default=0,
                    help="hostile: connections sending oversize bodies, each second (0)")
    ap.add_argument("--wrong-passwords", type=_count, default=0,
                    help="hostile: threads sending HTTP Basic credentials of the server's "
                         f"user {USER!r} with wrong passwords; turns authentication on (0)")
    ap.add_argument("--hostile", action="store_true",
                    help="the hostile mix: --idle 1500 --slow-readers 100 --oversize 4 "
                         "--wrong-passwords 50")
    args = ap.parse_args(argv)
    if not 0 < args.seconds <= 3600:
        ap.error("--seconds must be in (0, 3600]")
    if args.hostile:
        args.idle = args.idle or 1500
        args.slow_readers = args.slow_readers or 100
        args.oversize = args.oversize or 4
        args.wrong_passwords = args.wrong_passwords or 50
    return args


def _count(text: str) -> int:
    n = int(text)
    if not 0 <= n <= 5000:
        raise argparse.ArgumentTypeError("between 0 and 5000")
    return n


def upload_for(base_url: str):
    """A function uploading bytes as a checksum job's FILE; the parameter's path."""
    import requests

    def upload(data: bytes) -> str:
        r = requests.post(base_url + "checksum", files={"FILE": ("big.bin", data)},
                          allow_redirects=False, timeout=60)
        r.raise_for_status()
        return "/" + r.headers["Location"].split("/", 3)[3] + "/parameters/FILE"
    return upload


def auth_users(wrong_passwords: int) -> tuple[dict[str, str] | None, str]:
    """The server's ``[auth.users]`` and the right password: only with a
    wrong-password mix, so that every other run keeps the server's defaults."""
    if not wrong_passwords:
        return None, ""
    from werkzeug.security import generate_password_hash
    password = secrets.token_urlsafe(16)
    return {USER: generate_password_hash(password)}, password


def check_auth(base_url: str, password: str) -> str | None:
    """A problem when the right password is not accepted (so the 401s of the mix
    would not be about the password), else None."""
    token = base64.b64encode(f"{USER}:{password}".encode()).decode()
    probe = HttpClient(base_url, timeout=TIMEOUT)
    try:
        r = probe.request("GET", base_url + SERVICE + "?LAST=1",
                          headers={"Authorization": "Basic " + token})
    finally:
        probe.close()
    return None if r.status_code == 200 else f"the right password answered {r.status_code}"


def print_memory(start_kib: int | None, peak_kib: int | None) -> None:
    def mib(kib):
        return "unknown" if kib is None else f"{kib / 1024:.1f} MiB"
    print(f"server memory: VmRSS {mib(start_kib)} after start, peak VmHWM {mib(peak_kib)} "
          "at the end (the server process; job processes not included)")


def print_rss(idle_kib: int | None, sampler: RssSampler | None, after_kib: int | None) -> None:
    """The server's VmRSS sampled during the load against its idle figure (printed only:
    the RESULT stays about correctness)."""
    if sampler is None or idle_kib is None or sampler.peak_kib is None:
        print("server RSS: not measured")
        return
    delta = sampler.peak_kib - idle_kib
    verdict = "PASS" if delta <= RSS_TARGET_MIB * 1024 else "FAIL"
    print(f"server RSS: idle {mib(idle_kib)} before the load, peak {mib(sampler.peak_kib)} during it "
          f"({sampler.samples} samples every {sampler.interval * 1000:.0f} ms), after "
          f"{mib(after_kib)}; peak − idle {mib(delta)}, target ≤ {RSS_TARGET_MIB} MiB {verdict}")


def print_honest(rec: Record, hostile: Hostile) -> None:
    # a WAIT's latency is mostly its wait (WAIT=2): left out, as is the accounting
    lat = [v for op, values in rec.latencies.items()
           if op != "wait" and not op.startswith("final.") for v in values]
    errors = count_5xx(rec) + count_unanswered(rec)
    beside = "beside the hostile mix" if hostile.active else "(no hostile mix)"
    print(f"\nHonest clients {beside}: {len(lat)} answers but WAITs, "
          f"p50 {percentile(lat, 50):.2f} ms, p99 {percentile(lat, 99):.2f} ms, "
          f"errors (5xx or no answer) {errors}")
    if hostile.active:
        print(f"  hostile mix: {hostile.summary()}")


def _positive(text: str) -> int:
    n = int(text)
    if not 0 < n <= 1000:
        raise argparse.ArgumentTypeError("between 1 and 1000")
    return n


def main(argv=None) -> int:
    args = parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    signal.signal(signal.SIGTERM, signal.default_int_handler)    # SIGTERM: stop cleanly
    print(f"UWS load test: {args.clients} clients, {args.seconds:g} s, seed {seed}; "
          f"{os.cpu_count()} CPUs, load average {load_average()}", flush=True)
    data_dir = Path(tempfile.mkdtemp(prefix="uws-load-")).resolve()
    users, password = auth_users(args.wrong_passwords)
    server = Server(data_dir / "data", data_dir / "server.log", users=users)
    rec = Record()
    failures: list[str] = []
    result = None
    status = 0
    load = None
    hostile = Hostile("", 0, 0, 0, 0)
    mix = HostileProcess(hostile)
    memory = [None, None]       # the server's VmRSS after start, VmHWM at the end
    rss: list = [None, None, None]     # idle VmRSS, the sampler during the load, VmRSS after
    try:
        server.start()
        memory[0] = server.memory_kib("VmRSS")
        print(f"server {server.url} data {server.data_dir}"
              + (f", HTTP Basic on for {USER!r}" if users else ""), flush=True)
        if users and (problem := check_auth(server.url, password)):
            failures.append(problem)
        probe = HttpClient(server.url, timeout=TIMEOUT)
        before = probe.request("HEAD", server.url + SERVICE).headers.get("X-Job-Count")
        probe.close()
        if before != "0":
            failures.append(f"the server did not start empty: X-Job-Count {before}")
        load = Load(server.url, args.clients, args.seconds, seed)
        rss[1] = RssSampler(server.proc.pid)
        rss[0] = rss[1].read()
        host, port = server.url.split("//")[1].rstrip("/").rsplit(":", 1)
        hostile = Hostile(host, int(port), args.idle, args.slow_readers, args.oversize,
                          args.wrong_passwords, USER)
        if hostile.active:
            hostile.prepare(upload_for(server.url))
            mix = HostileProcess(hostile)
            mix.start(args.seconds)     # in its own process: not sharing our GIL
            print(f"hostile mix: {args.idle} idle, {args.slow_readers} slow readers, "
                  f"{args.oversize} oversize bodies a second, {args.wrong_passwords} "
                  "wrong-password threads", flush=True)
            time.sleep(2)       # let it take its connections before the honest load
        print(f"\nLoad: {args.clients} clients for {args.seconds:g} s", flush=True)
        rss[1].start()
        try:
            load.run()
            mix.join()
        finally:
            rss[1].stop()
        for r in load.records:
            rec.merge(r)
        print("\nAccounting: GET of every created job, then HEAD /" + SERVICE, flush=True)
        result = load.account(rec)
        if server.proc is None or server.proc.poll() is not None:
            failures.append("the server exited during the test")
        memory[1] = server.memory_kib("VmHWM")
        rss[2] = server.memory_kib("VmRSS")
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        status = 130
    except Exception as exc:
        print(f"\nload test aborted: {type(exc).__name__}: {exc}", file=sys.stderr)
        status = 1
    finally:
        mix.stop()              # before the server: its sockets would only be refused
        server.stop()

    if load is not None:
        ops = list(OPERATIONS) + ["list.next"]
        print_operations(rec, load.wall or args.seconds, ops)
        print(f"  (after the load: {sum(rec.statuses['final.get'].values())} × GET {{job}} "
              f"[{_statuses(rec.statuses['final.get'])}] and 1 × HEAD for the accounting)")
    if load is not None:
        print_honest(rec, hostile)
        print_memory(*memory)
        print_rss(*rss)
    n5xx, unanswered = count_5xx(rec), count_unanswered(rec)
    print(f"\n5xx answers: {n5xx}" + ("" if n5xx == 0 else "   FAIL (must be 0)"))
    print(f"requests without an answer: {unanswered}")
    if n5xx:
        failures.append(f"{n5xx} answers were 5xx")
    if unanswered:
        failures.append(f"{unanswered} requests had no answer")
    other = [p for p in rec.problems if "no answer" not in p]
    if other:
        failures.append(f"{len(other)} unexpected or inconsistent answers")
        print(f"unexpected or inconsistent answers: {len(other)}")
        for p in other[:20]:
            print(f"  - {p}")

    if result is not None:
        j = load.jobs
        print("\nJobs")
        print(f"  created {result['created']} ({j.created_running} with PHASE=RUN), "
              f"deleted {result['deleted']}, POSTs without an answer {j.create_unanswered}")
        gone, kept = result["delete_unanswered"]
        if gone or kept:
            print(f"  DELETEs without an answer: {gone} jobs gone, {kept} still there")
        print("  not deleted, by phase: " + (", ".join(
            f"{p} {result['phases'][p]}" for p in ACTIVE + FINISHED if result["phases"][p]) or "none"))
        unaccounted = result["unaccounted"]
        print(f"  unaccounted: {len(unaccounted)}")
        for line in unaccounted[:20]:
            print(f"    - {line}")
        if unaccounted:
            failures.append(f"{len(unaccounted)} jobs unaccounted for")
        ok = result["count"] is not None and result["count"] == str(result["expected"])
        print(f"  HEAD /{SERVICE} X-Job-Count {result['count']}, created − deleted "
              f"= {result['expected']}: {'OK' if ok else 'MISMATCH'}")
        if not ok:
            failures.append(f"X-Job-Count {result['count']} != created − deleted {result['expected']}")
        if j.create_unanswered:
            failures.append(f"{j.create_unanswered} creations had no answer: jobs may exist unseen")
    elif status == 0:
        failures.append("no accounting was done")

    log_lines = server.log_problems()
    print(f"\nServer log ({server.log_path}): {len(log_lines)} error lines")
    for line in log_lines[:20]:
        print(f"  {line}")
    if log_lines:
        failures.append(f"{len(log_lines)} error lines in the server log")
    print(f"load average after {load_average()}")

    if status == 0 and failures:
        status = 1
    print("\nRESULT: " + ("PASS" if status == 0 else "FAIL"
                          + "".join(f"\n  - {f}" for f in failures)))
    if args.keep or status != 0:
        print(f"data directory kept: {data_dir}")
    else:
        shutil.rmtree(data_dir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
