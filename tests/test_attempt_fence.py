"""A worker's writes about the attempt it runs are fenced by that attempt's start
time: once another attempt has the job (this worker was paused past its lease, a
sweep queued the job again and another worker claimed it), the late worker's
progress, results and outcome change nothing, however its own checks raced the
takeover.  Its writes while the attempt is its own are recorded as before.

The takeover is made as the lost-lease sweep makes it: requeue, then another claim."""
from __future__ import annotations

import pytest

from uws.model import ErrorSummary, Result
from uws.phases import Phase

from uwshelp import create_id

SERVICE = "sleep"
FAILED = ErrorSummary("transient", "a late failure")


@pytest.fixture
def store(idle):
    return idle[1].store


@pytest.fixture
def client(idle):
    return idle[0]


def claim(store, worker: str) -> str:
    job_id = store.claim_next(worker, [SERVICE], 30.0)
    assert job_id is not None
    return job_id


def started(store, job_id: str):
    return store.get_job(job_id, SERVICE, None).start_time


@pytest.fixture
def takeover(client, store):
    """(job id, the first attempt's start, the second's): the job EXECUTING under
    worker B after worker A's attempt was taken from it."""
    job_id = create_id(client)
    assert store.mark_queued(job_id)
    assert claim(store, "host:1:A") == job_id
    first = started(store, job_id)
    assert store.requeue(job_id)        # the sweep: A's lease expired
    assert claim(store, "host:2:B") == job_id
    second = started(store, job_id)
    assert first is not None and second is not None and first != second
    return job_id, first, second


def job(store, job_id: str):
    return store.get_job(job_id, SERVICE, None)


def test_a_superseded_attempt_cannot_complete_the_job(store, takeover):
    job_id, first, _ = takeover
    assert store.mark_completed(job_id, stored_bytes=0,
                                results=[Result("old", "old.txt", "text/plain", 1)],
                                started=first) is False
    after = job(store, job_id)
    assert after.phase is Phase.EXECUTING
    assert after.results == []


def test_a_superseded_attempt_cannot_fail_the_job(store, takeover):
    job_id, first, _ = takeover
    assert store.mark_failed(job_id, FAILED, started=first) is False
    assert job(store, job_id).phase is Phase.EXECUTING


def test_a_superseded_attempt_cannot_queue_the_job_again(store, takeover):
    job_id, first, _ = takeover
    assert store.retry_later(job_id, FAILED, 5, lambda attempt: 0.0, started=first) is False
    assert store.requeue(job_id, started=first) is False
    after = job(store, job_id)
    assert after.phase is Phase.EXECUTING
    assert after.attempt == 1       # no attempt was recorded as failed


def test_a_superseded_attempts_progress_is_not_recorded(store, takeover):
    job_id, first, second = takeover
    store.set_progress(job_id, 30.0, "the new attempt", started=second)
    store.set_progress(job_id, 90.0, "the old attempt", started=first)
    after = job(store, job_id)
    assert (after.progress, after.progress_message) == (30.0, "the new attempt")


def test_a_superseded_attempts_result_is_not_recorded(store, takeover):
    job_id, first, _ = takeover
    assert store.add_result(job_id, Result("old", "old.txt", "text/plain", 1),
                            started=first) is False
    assert job(store, job_id).results == []


def test_a_superseded_attempts_result_is_not_added_once_the_new_attempt_completed(
        store, takeover):
    job_id, first, second = takeover
    assert store.mark_completed(job_id, stored_bytes=0,
                                results=[Result("new", "new.txt", "text/plain", 1)],
                                started=second)
    assert store.add_result(job_id, Result("old", "old.txt", "text/plain", 1),
                            started=first) is False
    after = job(store, job_id)
    assert after.phase is Phase.COMPLETED
    assert [r.id for r in after.results] == ["new"]


def test_the_attempt_that_holds_the_job_records_its_progress_and_end(store, takeover):
    job_id, _, second = takeover
    store.set_progress(job_id, 50.0, "half", started=second)
    assert job(store, job_id).progress == 50.0
    assert store.mark_completed(job_id, stored_bytes=0,
                                results=[Result("out", "out.txt", "text/plain", 1)],
                                started=second)
    after = job(store, job_id)
    assert after.phase is Phase.COMPLETED
    assert [r.id for r in after.results] == ["out"]


def test_the_attempt_that_holds_the_job_can_fail_it(store, takeover):
    job_id, _, second = takeover
    assert store.mark_failed(job_id, FAILED, started=second)
    assert job(store, job_id).phase is Phase.ERROR


def test_an_attempt_aborted_while_it_ran_still_records_what_it_reported(client, store):
    job_id = create_id(client)
    assert store.mark_queued(job_id)
    claim(store, "host:1:A")
    start = started(store, job_id)
    assert store.mark_aborted(job_id)
    assert store.add_result(job_id, Result("partial", "partial.txt", "text/plain", 1),
                            started=start)
    assert [r.id for r in job(store, job_id).results] == ["partial"]
