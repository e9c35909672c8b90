"""What starting and ending a job costs the store: the statements a claim and an end
run (issue 12's job-start targets), with what they must still record."""
from __future__ import annotations

import datetime as dt
import re
import threading
import time

import pytest
import sqlalchemy as sa

from uws.domain import timeutil
from uws.domain.model import ANONYMOUS, Caller
from uws.domain.phases import Phase
from uws.store import running
from uws.usecases.jobs import Control

#: one database is enough here (job processes; the store's claims are in test_store_races.py;
#: tests/README.rst)
BACKENDS = ("sqlite",)

ALICE, BOB = Caller("alice"), Caller("bob")


@pytest.fixture
def api(idle):
    return idle[1]


def queue(api, caller: Caller = ALICE, duration: str | None = None) -> str:
    return api.create("sleep", [], {}, Control(run=True, execution_duration=duration), caller)


def claim(api, caps=None) -> str | None:
    return api.store.claim_next("worker", ["sleep"], 60, caps)


def executed(store, action) -> list[tuple[str, object]]:
    """The SQL statements ``action()`` runs, with their parameters (not the app's
    sweeps, which may run in their own thread meanwhile)."""
    seen: list[tuple[str, object]] = []
    caller = threading.get_ident()

    def listener(conn, cursor, statement, params, *args):
        if threading.get_ident() == caller:
            seen.append((statement, params))

    sa.event.listen(store.engine, "before_cursor_execute", listener)
    try:
        action()
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", listener)
    return seen


def statements(store, action) -> list[str]:
    """The SQL statements ``action()`` runs, whitespace collapsed."""
    return [" ".join(statement.split()) for statement, _ in executed(store, action)]


def job_updates(seen: list[str]) -> list[str]:
    return [s for s in seen if s.startswith("UPDATE uws_job SET")]


def test_a_claim_with_one_owner_queued_does_not_count_running_jobs(api):
    queue(api)
    seen = statements(api.store, lambda: claim(api))
    assert not [s for s in seen if "count(*)" in s]


def test_owners_are_still_weighed_by_their_running_jobs(api):
    first = queue(api, ALICE)
    queue(api, ALICE)
    bobs = queue(api, BOB)
    assert claim(api) == first
    assert claim(api) == bobs      # alice runs one, bob none: bob goes first


def unlimited(api, job_id: str) -> str:
    """The job, its execution duration made unlimited (the demo service has a maximum)."""
    assert api.store.set_execution_duration(job_id, 0)
    return job_id


def test_a_job_without_an_execution_duration_starts_in_one_update(api, monkeypatch):
    # However slow this machine, this claim waits for no lock: its start stands.
    monkeypatch.setattr(running, "_LATE_START", dt.timedelta(hours=1))
    job_id = unlimited(api, queue(api))
    seen = statements(api.store, lambda: claim(api))
    assert len(job_updates(seen)) == 1
    job = api.store.get_job(job_id, "sleep", None)
    assert job.phase is Phase.EXECUTING and job.start_time is not None


def test_a_job_with_an_execution_duration_gets_its_deadline_from_its_start(api):
    job_id = queue(api, duration="30")
    claim(api)
    job = api.store.get_job(job_id, "sleep", None)
    assert job.start_time is not None
    with api.store.engine.connect() as conn:
        deadline = conn.execute(sa.text("SELECT deadline FROM uws_job WHERE id = :id"),
                                {"id": job_id}).scalar()
    if isinstance(deadline, str):       # SQLite keeps the text
        deadline = dt.datetime.fromisoformat(deadline)
    assert deadline == job.start_time + dt.timedelta(seconds=30)


@pytest.mark.parametrize("limited", [True, False])
def test_a_job_claimed_by_a_clock_behind_its_creation_starts_at_its_creation(
        api, monkeypatch, limited):
    job_id = queue(api) if limited else unlimited(api, queue(api))
    created = api.store.get_job(job_id, "sleep", None).creation_time
    behind = created - dt.timedelta(seconds=5)
    monkeypatch.setattr(timeutil, "now", lambda: behind)
    claim(api)
    assert api.store.get_job(job_id, "sleep", None).start_time == created


def test_a_claim_and_an_end_read_no_job_times_back(api):
    job_id = queue(api)
    seen = statements(api.store, lambda: claim(api))
    seen += statements(api.store, lambda: api.store.mark_completed(job_id))
    assert not [s for s in seen if s.startswith("SELECT uws_job.id, uws_job.creation_time")]


def test_a_claim_and_an_end_still_add_a_wait_and_a_run_time(client_and_api):
    client, api = client_and_api
    job_id = queue(api, ANONYMOUS)
    claim(api)
    api.store.mark_completed(job_id)
    doc = client.get("/sleep/stats", headers={"Accept": "application/json"}).get_json()
    assert doc["all"]["waitTime"]["samples"] == 1 and doc["all"]["runTime"]["samples"] == 1


@pytest.fixture
def client_and_api(idle):
    return idle


def test_an_end_whose_owner_has_no_quota_held_job_releases_nothing(api):
    job_id = queue(api)
    claim(api)
    seen = statements(api.store, lambda: api.store.mark_completed(job_id))
    assert not [s for s in seen if "first_held" in s]


def test_an_end_whose_owner_has_a_quota_held_job_queues_it_again(api):
    first, second = queue(api), queue(api)
    caps = lambda service, owner: 1     # noqa: E731
    assert claim(api, caps) == first
    assert claim(api, caps) is None
    assert api.store.get_job(second, "sleep", None).phase is Phase.HELD
    api.store.mark_completed(first)
    assert api.store.get_job(second, "sleep", None).phase is Phase.QUEUED


# SQLite's one write lock makes the claim wait (on PostgreSQL it skips locked rows).
@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_claim_that_waited_for_the_lock_does_not_start_the_job_before_it_was_queued(api):
    queue(api)          # the owner has a job queued: the claim goes ahead
    # No deadline: a claim on time writes the start with one UPDATE.
    pending = unlimited(api, api.create("sleep", [], {}, Control(), ALICE))
    locked, queued_at = threading.Event(), []

    def queue_it_slowly():
        with api.store.engine.begin() as conn:     # holds the write lock for a second
            conn.execute(sa.text("UPDATE uws_job SET priority = 0 WHERE id = :id"),
                         {"id": pending})
            locked.set()
            time.sleep(1.0)
            queued_at.append(timeutil.now())
            conn.execute(sa.text("UPDATE uws_job SET phase = 'QUEUED', priority = 5 "
                                 "WHERE id = :id"), {"id": pending})

    writer = threading.Thread(target=queue_it_slowly)
    writer.start()
    locked.wait()
    claimed = claim(api)        # waits for the lock, then finds this job first
    writer.join()
    assert claimed == pending
    assert api.store.get_job(pending, "sleep", None).start_time >= queued_at[0]


def later(minutes: int = 60) -> str:
    return (timeutil.now() + dt.timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def prioritised(api, job_id: str, priority: int) -> str:
    """The queued job, its priority set as an administrator may (the demo service
    bounds its owners' to 0)."""
    assert api.store.set_priority(job_id, priority, {Phase.QUEUED})
    return job_id


def queue_later(api, caller: Caller) -> str:
    return api.create("sleep", [], {}, Control(run=True, start_after=later()), caller)


def test_an_owner_whose_queued_jobs_are_not_due_yet_is_passed_over(api):
    waiting = prioritised(api, queue_later(api, ALICE), 5)
    bobs = queue(api, BOB)
    assert claim(api) == bobs
    assert claim(api) is None
    assert api.store.get_job(waiting, "sleep", None).phase is Phase.QUEUED


def test_an_owner_takes_its_turn_by_its_best_job_due_not_one_waiting_for_its_start(api):
    prioritised(api, queue_later(api, ALICE), 9)
    alices = queue(api, ALICE)
    bobs = prioritised(api, queue(api, BOB), 5)
    assert claim(api) == bobs
    assert claim(api) == alices


def test_between_owners_alike_the_one_whose_oldest_job_waits_longest_goes_first(api):
    bobs = queue(api, BOB)
    alices = queue(api, ALICE)
    assert claim(api) == bobs
    assert claim(api) == alices


def plans(store, seen: list[tuple[str, object]]) -> list[str]:
    """The query plans of the statements in ``seen`` that read uws_job, one text each."""
    out = []
    with store.engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        for statement, params in seen:
            if "uws_job " not in statement and "uws_job AS" not in statement:
                continue
            if conn.dialect.name == "sqlite":
                rows = raw.execute("EXPLAIN QUERY PLAN " + statement, params).fetchall()
                out.append("\n".join(row[-1] for row in rows))
            else:
                cur = raw.cursor()
                cur.execute("EXPLAIN " + statement, params)
                out.append("\n".join(row[0] for row in cur.fetchall()))
                raw.rollback()
    return out


#: uws_job walked (SQLite's SCAN, PostgreSQL's Seq Scan; the small counters table,
#: uws_job_count, may be), or rows sorted
_WALK = re.compile(r"\bSCAN (uws_job|head|candidate)\b(?!_)|TEMP B-TREE"
                   r"|Seq Scan on uws_job\b(?!_)|\bSort\b")


def assert_seeks(plan: str) -> None:
    assert not _WALK.search(plan), plan


def analysed(api) -> None:
    """PostgreSQL's statistics of the jobs as they are now, as its autovacuum keeps them."""
    with api.store.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("ANALYZE uws_job"))
            conn.execute(sa.text("ANALYZE uws_job_count"))


def test_a_claim_seeks_its_job_however_many_jobs_are_stored(api):
    """A claim used to group every job of the service by owner: 9 ms a claim with
    10^5 jobs stored.  Its statements now seek the owner's next job by index."""
    for _ in range(50):
        queue(api, BOB)
    mine = queue(api, ALICE)
    api.store.seed_jobs("sleep", 3000, owner="earlier")
    analysed(api)
    claimed: list[str | None] = []
    seen = executed(api.store, lambda: claimed.extend([claim(api), claim(api)]))
    assert mine in claimed
    found = plans(api.store, seen)
    assert found
    for plan in found:
        assert_seeks(plan)


_SET_TIMES = sa.text("UPDATE uws_job SET start_time = :s, end_time = :e WHERE id = :id"
                     ).bindparams(sa.bindparam("s", type_=sa.DateTime),
                                  sa.bindparam("e", type_=sa.DateTime))


def finished_with_run_times(api, n: int) -> None:
    """``n`` completed jobs created a second apart, the k-th (oldest first) run for
    (n - k) minutes: the older a job, the later it ended."""
    api.store.seed_jobs("sleep", n, owner="earlier")
    with api.store.engine.begin() as conn:
        ids = conn.execute(sa.text("SELECT id, creation_time FROM uws_job "
                                   "ORDER BY creation_time")).all()
        for k, (job_id, created) in enumerate(ids):
            if isinstance(created, str):        # SQLite keeps the text
                created = dt.datetime.fromisoformat(created)
            conn.execute(_SET_TIMES,
                         {"s": created, "e": created + dt.timedelta(minutes=n - k),
                          "id": job_id})
    analysed(api)


def test_the_typical_run_time_comes_from_the_completed_jobs_created_last(api):
    finished_with_run_times(api, 30)
    newest = [60.0 * (30 - k) for k in range(10, 30)]     # not the 20 that ended last
    assert sorted(api.store.recent_run_seconds("sleep")) == sorted(newest)


def test_the_typical_run_time_is_read_without_sorting_the_jobs_stored(api):
    """Sorting a service's completed jobs by their end took 0.44 s at 10^6, once a
    minute on some GET of a job (its quote)."""
    finished_with_run_times(api, 2000)
    seen = executed(api.store, lambda: api.store.recent_run_seconds("sleep"))
    found = plans(api.store, seen)
    assert len(found) == 1
    assert_seeks(found[0])
