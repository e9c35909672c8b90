"""Job counters (uws_job_count): always equal to COUNT(*) of the jobs, by service,
owner and phase, whatever concurrent creations, phase changes, sweeps and
deletions made of them; and what HEAD, the list page and the statistics read.
"""
from __future__ import annotations

import base64
import datetime as dt
import functools
import os
import random
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from werkzeug.security import generate_password_hash

from uws.domain import timeutil
from uws.domain.model import ErrorSummary, Job, ListQuery, Result, new_job_id
from uws.domain.phases import Phase
from uws.execution import NullExecutor
from uws.store import Store
from uws.store.tables import job as J
from uws.store.tables import job_bytes
from uws.store.tables import job_count as C
from uws.usecases.sweeps import Sweeps
from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, make_config
from fakes import MemoryStore
from test_store_races import race

SERVICES = {"plain": {"runner": "uws.demo:sleep"},
            "retried": {"runner": "uws.demo:sleep", "retry": True},
            "kept": {"runner": "uws.demo:sleep", "archive": True}}
OWNERS = ("alice", "bob", "")
FATES = ("stay", "hold", "delete", "abort", "complete", "fail", "lost", "dead", "expire")


def new_job(service: str, owner: str, rng: random.Random) -> Job:
    now = timeutil.now()
    expires = rng.random() < 0.15       # swept while it churns
    return Job(id=new_job_id(), service=service, owner=owner, phase=Phase.PENDING,
               creation_time=now, execution_duration=rng.choice((0, 1, 60)),
               destruction=now + dt.timedelta(seconds=-1 if expires else 3600))


def churn(store, seed: int, rounds: int, dead_worker: str) -> None:
    """Create ``rounds`` jobs and send each to a random fate, racing whoever else
    runs this on the same database (other threads, engines, processes, sweeps)."""
    rng = random.Random(seed)
    for _ in range(rounds):
        service = rng.choice(sorted(SERVICES))
        job = new_job(service, rng.choice(OWNERS), rng)
        store.insert_job(job, stored_bytes=rng.randrange(5000))
        fate = rng.choice(FATES)
        if fate == "hold":
            store.mark_held(job.id)
        elif fate == "delete":
            store.delete_job(job.id)
        elif fate == "expire":
            store.set_destruction(job.id, timeutil.now() - dt.timedelta(seconds=1),
                                  timeutil.now())
        if fate in ("stay", "hold", "delete", "expire") or not store.mark_queued(job.id):
            continue
        if fate == "abort":
            store.mark_aborted(job.id)
            continue
        worker = dead_worker if fate == "dead" else f"churn-{seed}"
        claimed = store.claim_next(worker, [service], -1 if fate == "lost" else 60)
        if claimed is None or fate in ("lost", "dead"):
            continue        # left to the sweeps
        wrote = rng.randrange(5000)
        if fate == "complete" and rng.random() < 0.5:   # as the executor ends a job well
            store.mark_completed(claimed, stored_bytes=wrote)
        elif fate == "complete":
            store.set_stored_bytes(claimed, wrote)
            store.mark_completed(claimed)
        else:
            store.set_stored_bytes(claimed, wrote)
            store.mark_failed(claimed, ErrorSummary("fatal", "churned"))
        if rng.random() < 0.2:
            store.delete_job(claimed)


def counters_and_rows(store: Store) -> tuple[dict, dict]:
    """Nonzero counters summed by (service, owner, phase), and COUNT(*) grouped alike."""
    with store.engine.connect() as conn:
        rows = {tuple(k): n for *k, n in conn.execute(
            sa.select(J.c.service, J.c.owner, J.c.phase, sa.func.count())
            .group_by(J.c.service, J.c.owner, J.c.phase))}
    counted = {(s, o, p.value): n for (s, o, p), n in store.job_counts().items()}
    return counted, rows


def bytes_totals_and_sums(store: Store) -> tuple[dict, dict]:
    """Each (service, owner)'s bytes as quotas read them, and summed over its jobs."""
    with store.engine.connect() as conn:
        sums = {(s, o): int(n) for s, o, n in conn.execute(
            sa.select(J.c.service, J.c.owner, sa.func.sum(job_bytes.c.bytes))
            .select_from(J.join(job_bytes, job_bytes.c.job_id == J.c.id))
            .where(J.c.phase != Phase.ARCHIVED.value)     # archived jobs' bytes do not count
            .group_by(J.c.service, J.c.owner))}
    totals = {(s, o): store.stored_bytes(s, o) for s in SERVICES for o in OWNERS}
    return ({key: n for key, n in totals.items() if n}, {key: n for key, n in sums.items() if n})


def lowest_counter(store: Store) -> int:
    with store.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.coalesce(sa.func.min(C.c.n), 0))).scalar_one()


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture
def api(tmp_path, db_url):
    """The use cases of an app with no executor and no scheduler: the test sweeps."""
    application = create_app(make_config(tmp_path, db_url, services=SERVICES, executor="none",
                                         scheduler=False))
    yield application.extensions["uws"]
    shutdown(application)


def sweep(api) -> None:
    sweeps = Sweeps(config=api.config, store=api.store, files=api.files, executor=NullExecutor())
    sweeps.enforce_deadlines()
    sweeps.recover_lost()
    sweeps.recover_dead_local_workers()
    sweeps.destroy_expired()


_CHURN = """
import sys
sys.path.insert(0, sys.argv[1])
from uws.store import Store
import test_counts
store = Store(sys.argv[2])
test_counts.churn(store, int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
store.close()
"""


def test_counters_equal_count_after_a_concurrent_churn_of_threads_engines_processes_and_sweeps(
        api, db_url):
    dead_worker = f"{socket.gethostname()}:{dead_pid()}:gone"
    engines = [api.store] + [Store(db_url) for _ in range(2)]
    done = threading.Event()
    errors: list[BaseException] = []
    lowest: list[int] = []

    def guarded(call):
        try:
            call()
        except BaseException as exc:     # re-raised in the test thread
            errors.append(exc)

    def sweeping():
        while not done.is_set():
            sweep(api)
            lowest.append(lowest_counter(api.store))

    workers = [threading.Thread(target=guarded, args=(
        lambda i=i: churn(engines[i % 3], i, 40, dead_worker),)) for i in range(6)]
    sweeper = threading.Thread(target=guarded, args=(sweeping,))
    tests_dir = str(Path(__file__).parent)
    processes = [subprocess.Popen([sys.executable, "-c", _CHURN, tests_dir, db_url,
                                   str(100 + i), "40", dead_worker],
                                  stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        for thread in [*workers, sweeper]:
            thread.start()
        for process in processes:
            _, err = process.communicate(timeout=300)
            assert process.returncode == 0, err
        for thread in workers:
            thread.join(300)
    finally:
        done.set()
        sweeper.join(300)
        for store in engines[1:]:
            store.close()
    assert not errors, errors
    sweep(api)      # what the churn left to the sweeps: lost, dead and expired jobs

    counted, rows = counters_and_rows(api.store)
    assert counted == rows
    totals, sums = bytes_totals_and_sums(api.store)
    assert totals == sums and sums
    phases_left = {phase for _, _, phase in rows}
    assert {"PENDING", "HELD", "COMPLETED", "ERROR", "ABORTED", "ARCHIVED"} <= phases_left
    assert sum(rows.values()) < 8 * 40          # deletions and destructions happened
    assert min(lowest + [lowest_counter(api.store)]) >= 0


def test_an_archived_jobs_bytes_leave_its_owners_total_and_its_deletion_takes_nothing(api):
    store = api.store
    job = new_job("plain", "alice", random.Random(1))
    store.insert_job(job, stored_bytes=700)
    store.mark_queued(job.id)
    assert store.claim_next("w", ["plain"], 60) == job.id
    store.set_stored_bytes(job.id, 900)     # what it wrote
    store.mark_completed(job.id)
    assert store.stored_bytes("plain", "alice") == 900
    assert store.archive(job.id)
    assert store.stored_bytes("plain", "alice") == 0
    assert store.delete_job(job.id)
    assert store.stored_bytes("plain", "alice") == 0


def commits_of(store: Store, call) -> int:
    """How many transactions ``call`` committed (in this thread)."""
    me, seen = threading.get_ident(), []

    def committed(_conn):
        if threading.get_ident() == me:
            seen.append(1)

    sa.event.listen(store.engine, "commit", committed)
    try:
        call()
    finally:
        sa.event.remove(store.engine, "commit", committed)
    return len(seen)


def running_job(store: Store, stored_bytes: int) -> str:
    job = new_job("plain", "alice", random.Random(2))
    store.insert_job(job, stored_bytes=stored_bytes)
    store.mark_queued(job.id)
    assert store.claim_next("w", ["plain"], 60) == job.id
    return job.id


def test_a_job_completed_with_its_bytes_counts_them_in_the_same_commit(api):
    store = api.store
    job_id = running_job(store, 700)
    assert commits_of(store, lambda: store.mark_completed(job_id, stored_bytes=900)) == 1
    assert store.get_job(job_id, "plain", None).phase is Phase.COMPLETED
    assert store.stored_bytes("plain", "alice") == 900
    totals, sums = bytes_totals_and_sums(store)
    assert totals == sums == {("plain", "alice"): 900}


def test_a_completion_that_lost_to_an_abort_records_no_bytes(api):
    """The executor then records them on their own (Outcomes.record)."""
    store = api.store
    job_id = running_job(store, 700)
    assert store.mark_aborted(job_id)
    assert store.mark_completed(job_id, stored_bytes=900) is False
    assert store.stored_bytes("plain", "alice") == 700


def test_a_job_completed_with_its_results_records_them_in_the_same_commit(api):
    store = api.store
    job_id = running_job(store, 0)
    store.add_result(job_id, Result("early", "early.txt", "text/plain", 1))
    held = [Result("late", "late.txt", "text/plain", 2), Result("early", "e2.txt", "", 3)]
    assert commits_of(store, lambda: store.mark_completed(job_id, stored_bytes=6,
                                                          results=held)) == 1
    job = store.get_job(job_id, "plain", None)
    assert job.phase is Phase.COMPLETED
    # in the order reported; a name reported again replaces the earlier result
    assert [(r.id, r.path, r.size) for r in job.results] == [("late", "late.txt", 2),
                                                              ("early", "e2.txt", 3)]


def test_a_completion_that_lost_to_an_abort_records_none_of_its_results(api):
    """The executor then records them as reported (Outcomes.record)."""
    store = api.store
    job_id = running_job(store, 0)
    assert store.mark_aborted(job_id)
    assert store.mark_completed(job_id, results=[Result("r", "r.txt", "", 1)]) is False
    assert store.get_job(job_id, "plain", None).results == []


def test_a_job_queued_again_gets_no_result_of_the_attempt_before(api):
    """A late report of a lost attempt (its lease expired and a sweep queued the job
    again) must not show in the next attempt's results."""
    store = api.store
    job_id = running_job(store, 0)
    assert store.requeue(job_id)
    assert store.add_result(job_id, Result("stale", "stale.txt", "", 1)) is False
    assert store.get_job(job_id, "plain", None).results == []


def test_a_completion_with_its_bytes_racing_a_deletion_leaves_exact_totals(api):
    """The completion locks the bytes row before the job's, as a deletion does: on
    PostgreSQL the other order could deadlock."""
    store = api.store
    for _ in range(10):
        job_id = running_job(store, 100)
        _, deleted = race(functools.partial(store.mark_completed, job_id, stored_bytes=900),
                          functools.partial(store.delete_job, job_id))
        assert deleted, "a deletion always wins, before or after the completion"
        totals, sums = bytes_totals_and_sums(store)
        assert totals == sums


def test_a_recount_repairs_counters_that_missed_changes(api):
    """As after servers of the revision before the counters kept running a while."""
    rng = random.Random(3)
    for number in range(12):
        api.store.insert_job(new_job(sorted(SERVICES)[number % 3], OWNERS[number % 3], rng))
    with api.store.engine.begin() as conn:     # unseen by the counters
        conn.execute(J.delete().where(J.c.owner == "bob"))
        conn.execute(J.update().where(J.c.owner == "alice").values(phase="QUEUED"))
    assert api.store.count_jobs("kept", "alice", ListQuery(phases=[Phase.QUEUED])) == 0
    api.store.recount_jobs()
    counted, rows = counters_and_rows(api.store)
    assert counted == rows
    assert api.store.count_jobs("kept", "alice", ListQuery(phases=[Phase.QUEUED])) == 4


def test_seeded_jobs_are_counted(api):
    api.store.seed_jobs("plain", 2500, owner="alice", batch=1000)
    assert api.store.count_jobs("plain", "alice", ListQuery()) == 2500
    assert api.store.job_counts("plain") == {("plain", "alice", Phase.COMPLETED): 2500}


def test_seeded_jobs_each_have_a_bytes_row_as_every_job_has(api):
    """A deletion racing a job's first record of its bytes could not lock a row not
    yet there (see revision 0012): no job may be without one."""
    api.store.seed_jobs("plain", 30, owner="alice", batch=7)
    with api.store.engine.connect() as conn:
        rows = conn.execute(sa.select(J.c.id, job_bytes.c.bytes)
                            .select_from(J.outerjoin(job_bytes, job_bytes.c.job_id == J.c.id))
                            ).all()
    assert len(rows) == 30 and all(n == 0 for _, n in rows)


def test_a_time_window_is_still_counted_from_the_jobs(api):
    seeding = timeutil.now()     # the window is taken from this, not from after the
    api.store.seed_jobs("plain", 10, owner="alice")     # one second apart, ending now
    since = seeding - dt.timedelta(seconds=4.5)    # seeding (which took 0.5 s once, in CI)
    assert api.store.count_jobs("plain", "alice", ListQuery(after=since)) == 4
    assert api.store.count_jobs("plain", "alice", ListQuery()) == 10


# -- counts by phase and owner, for the statistics -----------------------------------------


def scenario(store) -> None:
    """Two services, three owners, jobs in four phases (one deleted)."""
    rng = random.Random(7)
    made = {}
    for number, (service, owner) in enumerate(
            [("plain", "alice"), ("plain", "alice"), ("plain", "bob"), ("kept", "alice"),
             ("kept", ""), ("plain", ""), ("plain", "bob")]):
        job = new_job(service, owner, rng)
        store.insert_job(job)
        made[number] = job.id
    assert store.mark_queued(made[1])
    assert store.mark_aborted(made[2])
    assert store.mark_aborted(made[4])
    assert store.delete_job(made[6])


EXPECTED = {("plain", "alice", Phase.PENDING): 1, ("plain", "alice", Phase.QUEUED): 1,
            ("plain", "bob", Phase.ABORTED): 1, ("kept", "alice", Phase.PENDING): 1,
            ("kept", "", Phase.ABORTED): 1, ("plain", "", Phase.PENDING): 1}


@pytest.fixture(params=["sql", "memory"])
def any_store(request, api):
    """The SQL store, or the in-memory fake of the use cases' tests: both answer alike."""
    return api.store if request.param == "sql" else MemoryStore()


def test_counts_of_the_whole_server_by_service_owner_and_phase(any_store):
    scenario(any_store)
    assert any_store.job_counts() == EXPECTED


def test_counts_of_one_service(any_store):
    scenario(any_store)
    assert any_store.job_counts("kept") == {k: n for k, n in EXPECTED.items() if k[0] == "kept"}


def test_counts_of_one_owner_across_services(any_store):
    scenario(any_store)
    assert any_store.job_counts(owner="alice") == {
        k: n for k, n in EXPECTED.items() if k[1] == "alice"}


# -- over HTTP: HEAD's X-Job-Count and the list page's total ---------------------------------

USERS = {"alice": "wonderland", "bob": "builder", "root": "toor"}


def basic(user: str) -> dict:
    raw = f"{user}:{USERS[user]}".encode()
    return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


@pytest.fixture
def client(tmp_path, db_url):
    config = make_config(tmp_path, db_url, executor="none", scheduler=False)
    from uws.auth import AuthConfig
    config.auth = AuthConfig(
        modes=("basic",), admins=frozenset({"root"}),
        users={u: generate_password_hash(p, method="pbkdf2:sha256:1000")
               for u, p in USERS.items()})
    application = create_app(config)
    application.test_client_class = ValidatingClient
    yield application.test_client()
    shutdown(application)


def create(client, headers: dict, run: bool = False) -> str:
    data = {"DURATION": "0", **({"PHASE": "RUN"} if run else {})}
    r = client.post("/sleep", data=data, headers=headers)
    assert r.status_code == 303
    return r.headers["Location"].replace("http://localhost", "")


@pytest.fixture
def populated(client):
    """alice: 3 jobs (1 QUEUED, 1 ABORTED); bob: 2 (1 QUEUED); anonymous: 3 (1 deleted)."""
    alice, bob = basic("alice"), basic("bob")
    for headers, runs in ((alice, [True, False, False]), (bob, [True, False]),
                          ({}, [False, False, False])):
        paths = [create(client, headers, run) for run in runs]
        if headers is alice:
            assert client.post(f"{paths[2]}/phase", data={"PHASE": "ABORT"},
                               headers=alice).status_code == 303
        if not headers:
            assert client.delete(paths[0]).status_code == 303
    return client


def head_count(client, headers: dict, query: str = "") -> int:
    r = client.head(f"/sleep{query}", headers=headers)
    assert r.status_code == 200
    return int(r.headers["X-Job-Count"])


def listed(client, headers: dict, query: str = "") -> int:
    r = client.get(f"/sleep{query}", headers=headers)
    assert r.status_code == 200
    return r.data.count(b"<uws:jobref ")


@pytest.mark.parametrize("user", ["alice", "bob", "root", None])
@pytest.mark.parametrize("query", ["", "?PHASE=QUEUED", "?PHASE=ABORTED&PHASE=PENDING",
                                   "?PHASE=ARCHIVED"])
def test_head_counts_what_the_list_shows(populated, user, query):
    headers = basic(user) if user else {}
    assert head_count(populated, headers, query) == listed(populated, headers, query)


def test_head_counts_each_callers_own_jobs(populated):
    assert head_count(populated, basic("alice")) == 3
    assert head_count(populated, basic("bob")) == 2
    assert head_count(populated, {}) == 2
    assert head_count(populated, basic("root")) == 7
    assert head_count(populated, basic("alice"), "?PHASE=QUEUED") == 1
    assert head_count(populated, basic("root"), "?PHASE=QUEUED") == 2


# -- SQLite: a second store in one process keeps the first one's locks ---------------------


def posix_locks(path: Path) -> list[str]:
    """This process's POSIX locks on a file (Linux /proc/locks), without each line's
    ordinal (which moves as other processes take and drop locks), sorted."""
    inode = f":{path.stat().st_ino} "
    return sorted(line.split(None, 1)[1] for line in Path("/proc/locks").read_text().splitlines()
                  if f" {os.getpid()} " in line and inode in line)


def test_opening_another_store_on_a_sqlite_file_keeps_the_locks_of_the_open_one(tmp_path):
    """Closing any descriptor of a file drops all the process's POSIX locks on it:
    another process closing its last connection would then take itself for the last
    one and remove the WAL under this one (a "malformed" database)."""
    url = f"sqlite:///{tmp_path / 'uws.sqlite3'}"
    first = Store(url)
    try:
        with first.engine.connect() as conn:
            conn.execute(sa.select(sa.func.count()).select_from(J)).scalar_one()
            held = posix_locks(tmp_path / "uws.sqlite3")
            assert held
            Store(url).close()
            assert posix_locks(tmp_path / "uws.sqlite3") == held
    finally:
        first.close()
