"""Races decided by the store: every phase change is one compare-and-set, so
concurrent events on one job have exactly one winner, on SQLite and PostgreSQL.

Jobs are created over HTTP by an app with no executor, then moved with
``api.store.transition`` so nothing but the test touches them.
"""
from __future__ import annotations

import functools
import threading

import sqlalchemy as sa

from uws.domain.model import ErrorSummary
from uws.domain.phases import Phase
from uws.store.engine import create_schema, make_engine

from uwshelp import create_id

ROUNDS = 20


def queued(client, api) -> str:
    job_id = create_id(client)
    assert api.store.mark_queued(job_id)
    return job_id


def executing(client, api) -> str:
    job_id = queued(client, api)
    assert api.store.mark_executing(job_id)
    return job_id


def job(api, job_id: str):
    return api.store.get_job(job_id, "sleep", None)


def phase_over_http(client, job_id: str) -> str:
    return client.get(f"/sleep/{job_id}/phase").get_data(as_text=True)


def race(*calls) -> list:
    """Run ``calls`` in threads released at the same instant; their results in order."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)
    errors: list = []

    def run(i, call):
        try:
            barrier.wait()
            results[i] = call()
        except BaseException as exc:     # re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a racing thread hung"
    if errors:
        raise errors[0]
    return results


# -- ABORT against COMPLETE -----------------------------------------------------------------

def test_abort_racing_complete_has_exactly_one_winner(idle):
    client, api = idle
    for _ in range(ROUNDS):
        job_id = executing(client, api)
        aborted, completed = race(lambda: api.store.mark_aborted(job_id),
                                  lambda: api.store.mark_completed(job_id))
        assert aborted != completed, "both or neither transition won"
        expected = Phase.ABORTED if aborted else Phase.COMPLETED
        assert job(api, job_id).phase is expected
        assert phase_over_http(client, job_id) == expected.value


def test_abort_racing_fail_has_exactly_one_winner(idle):
    client, api = idle
    for _ in range(ROUNDS):
        job_id = executing(client, api)
        aborted, failed = race(
            lambda: api.store.mark_aborted(job_id),
            lambda: api.store.mark_failed(job_id, ErrorSummary("fatal", "late failure")))
        assert aborted != failed
        record = job(api, job_id)
        if aborted:
            assert record.phase is Phase.ABORTED
            assert record.error is None
        else:
            assert record.phase is Phase.ERROR
            assert record.error.message == "late failure"


def test_late_complete_never_overwrites_aborted(idle):
    client, api = idle
    job_id = executing(client, api)
    assert api.store.mark_aborted(job_id)
    ended = job(api, job_id).end_time
    assert api.store.mark_completed(job_id) is False
    record = job(api, job_id)
    assert record.phase is Phase.ABORTED
    assert record.end_time == ended
    assert phase_over_http(client, job_id) == "ABORTED"


def test_late_fail_never_overwrites_aborted(idle):
    client, api = idle
    job_id = executing(client, api)
    assert api.store.mark_aborted(job_id)
    assert api.store.mark_failed(job_id, ErrorSummary("fatal", "too late")) is False
    record = job(api, job_id)
    assert record.phase is Phase.ABORTED
    assert record.error is None


def test_late_start_never_revives_an_aborted_queued_job(idle):
    client, api = idle
    job_id = queued(client, api)
    assert api.store.mark_aborted(job_id)
    assert api.store.mark_executing(job_id) is False
    record = job(api, job_id)
    assert record.phase is Phase.ABORTED
    assert record.start_time is None


def test_abort_over_http_racing_complete_leaves_a_consistent_job(idle):
    client, api = idle
    for _ in range(ROUNDS // 2):
        job_id = executing(client, api)
        response, completed = race(
            lambda: client.application.test_client().post(f"/sleep/{job_id}/phase",
                                                          data={"PHASE": "ABORT"}),
            lambda: api.store.mark_completed(job_id))
        if completed:
            assert response.status_code == 403       # ABORT on a COMPLETED job
            assert job(api, job_id).phase is Phase.COMPLETED
        else:
            assert response.status_code == 303
            assert job(api, job_id).phase is Phase.ABORTED


# -- RUN from many threads ----------------------------------------------------------------------

def test_run_from_many_threads_has_exactly_one_winner(idle):
    client, api = idle
    for _ in range(ROUNDS // 2):
        job_id = create_id(client)
        won = race(*[lambda: api.store.mark_queued(job_id)] * 8)
        assert won.count(True) == 1
        assert job(api, job_id).phase is Phase.QUEUED


def test_abort_racing_run_on_a_pending_job_always_ends_aborted(idle):
    """ABORT is allowed from PENDING and from QUEUED, so whichever comes first it wins;
    RUN only succeeds if it came first."""
    client, api = idle
    for _ in range(ROUNDS):
        job_id = create_id(client)
        ran, aborted = race(lambda: api.store.mark_queued(job_id),
                            lambda: api.store.mark_aborted(job_id))
        assert aborted
        assert job(api, job_id).phase is Phase.ABORTED
        assert api.store.mark_queued(job_id) is False


def test_run_over_http_from_many_clients_queues_the_job_once(idle):
    client, api = idle
    job_id = create_id(client)
    changes = []
    api.store.listeners.append(lambda changed: changes.append(changed))
    responses = race(*[lambda: client.application.test_client().post(
        f"/sleep/{job_id}/phase", data={"PHASE": "RUN"})] * 8)
    assert [r.status_code for r in responses] == [303] * 8
    assert job(api, job_id).phase is Phase.QUEUED
    assert changes.count(job_id) == 1


# -- claim_next ------------------------------------------------------------------------------------

def claim_all(api, worker: str) -> list[str]:
    claimed = []
    while (job_id := api.store.claim_next(worker, ["sleep"], 60)) is not None:
        claimed.append(job_id)
    return claimed


def test_claim_next_hands_each_queued_job_to_exactly_one_claimant(idle):
    client, api = idle
    jobs = {queued(client, api) for _ in range(24)}
    per_worker = race(*[(lambda i=i: claim_all(api, f"worker-{i}")) for i in range(6)])
    claimed = [job_id for ids in per_worker for job_id in ids]
    assert len(claimed) == len(set(claimed)), "a job was claimed twice"
    assert set(claimed) == jobs
    for job_id in jobs:
        assert job(api, job_id).phase is Phase.EXECUTING


def test_claim_next_marks_the_job_started(idle):
    client, api = idle
    job_id = queued(client, api)
    assert api.store.claim_next("worker", ["sleep"], 60) == job_id
    record = job(api, job_id)
    assert record.phase is Phase.EXECUTING
    assert record.start_time is not None


def test_claim_next_takes_the_oldest_queued_job_first(idle):
    client, api = idle
    first, second = queued(client, api), queued(client, api)
    assert api.store.claim_next("worker", ["sleep"], 60) == first
    assert api.store.claim_next("worker", ["sleep"], 60) == second


def test_claim_next_ignores_jobs_that_are_not_queued(idle):
    client, api = idle
    pending = create_id(client)
    aborted = queued(client, api)
    assert api.store.mark_aborted(aborted)
    assert api.store.claim_next("worker", ["sleep"], 60) is None
    assert job(api, pending).phase is Phase.PENDING
    assert job(api, aborted).phase is Phase.ABORTED


def test_claim_next_only_takes_jobs_of_the_named_services(idle):
    client, api = idle
    job_id = queued(client, api)
    assert api.store.claim_next("worker", ["checksum"], 60) is None
    assert job(api, job_id).phase is Phase.QUEUED


def test_claimants_asking_at_once_each_get_a_job(idle):
    """As many claimants as QUEUED jobs, all at once: nobody should come back empty-handed."""
    client, api = idle
    jobs = {queued(client, api) for _ in range(16)}
    got = race(*[(lambda i=i: api.store.claim_next(f"w{i}", ["sleep"], 60))
                 for i in range(16)])
    assert None not in got
    assert set(got) == jobs


def test_claim_next_racing_abort_never_runs_an_aborted_job(idle):
    client, api = idle
    for _ in range(ROUNDS):
        job_id = queued(client, api)
        claimed, aborted = race(lambda: api.store.claim_next("worker", ["sleep"], 60),
                                lambda: api.store.mark_aborted(job_id))
        record = job(api, job_id)
        assert aborted, "ABORT is allowed from QUEUED and from EXECUTING"
        assert record.phase is Phase.ABORTED
        if claimed is None:
            assert record.start_time is None


def test_several_processes_may_create_the_schema_at_once(db_url):
    """Servers started together on an empty database each create the tables."""
    engines = [make_engine(db_url) for _ in range(6)]
    try:
        race(*[functools.partial(create_schema, e) for e in engines])
        assert {"uws_job", "uws_parameter", "uws_result"} <= \
            set(sa.inspect(engines[0]).get_table_names())
    finally:
        for e in engines:
            e.dispose()


def test_a_process_writes_in_sqlite_one_transaction_at_a_time(tmp_path):
    """Writers of one process queue on a lock rather than on SQLite's busy handler,
    so a transaction that reads before it writes sees no other's write between."""
    engine = make_engine(f"sqlite:///{tmp_path / 'counter.sqlite3'}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE counter (n INTEGER)")
        conn.exec_driver_sql("INSERT INTO counter VALUES (0)")

    def add(times: int) -> None:
        for _ in range(times):
            with engine.begin() as conn:
                n = conn.exec_driver_sql("SELECT n FROM counter").scalar_one()
                conn.exec_driver_sql("UPDATE counter SET n = ?", (n + 1,))

    try:
        race(*[functools.partial(add, 40) for _ in range(8)])
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT n FROM counter").scalar_one() == 320
    finally:
        engine.dispose()
