"""A worker's writes about the attempt it runs are fenced by that attempt's claim
(its start time and its worker's lease): once another attempt has the job (this
worker was paused past its lease, a sweep queued the job again and another worker
claimed it), the late worker's progress, results and outcome change nothing,
however its own checks raced the takeover.  Its writes while the attempt is its
own are recorded as before.

The takeover is made as the lost-lease sweep makes it: requeue, then another claim."""
from __future__ import annotations

import pytest

from uws.domain.model import Claim, ErrorSummary, Result
from uws.domain.phases import Phase

from uwshelp import create_id

SERVICE = "sleep"
FAILED = ErrorSummary("transient", "a late failure")


@pytest.fixture
def store(idle):
    return idle[1].store


@pytest.fixture
def client(idle):
    return idle[0]


def claim(store, worker: str) -> Claim:
    claimed = store.claim(worker, [SERVICE], 30.0)
    assert claimed is not None
    return claimed


def result(name: str) -> Result:
    return Result(name, f"{name}.txt", "text/plain", 1)


@pytest.fixture
def takeover(client, store) -> tuple[Claim, Claim]:
    """The claims of worker A's attempt, taken from it, and of worker B's, which
    has the job EXECUTING now."""
    job_id = create_id(client)
    assert store.mark_queued(job_id)
    first = claim(store, "host:1:A")
    assert store.requeue(job_id)        # the sweep: A's lease expired
    second = claim(store, "host:2:B")
    assert first.job_id == second.job_id == job_id
    assert first.started != second.started
    return first, second


def job(store, claimed: Claim):
    return store.get_job(claimed.job_id, SERVICE, None)


def test_a_claim_is_what_the_job_shows(client, store):
    job_id = create_id(client)
    assert store.mark_queued(job_id)
    claimed = claim(store, "host:1:A")
    assert claimed.job_id == job_id
    assert job(store, claimed).start_time == claimed.started


def test_a_superseded_attempt_cannot_complete_the_job(store, takeover):
    first, _ = takeover
    assert store.mark_completed(first.job_id, stored_bytes=0, results=[result("old")],
                                claim=first) is False
    after = job(store, first)
    assert after.phase is Phase.EXECUTING
    assert after.results == []


def test_a_superseded_attempt_cannot_fail_the_job(store, takeover):
    first, _ = takeover
    assert store.mark_failed(first.job_id, FAILED, claim=first) is False
    assert job(store, first).phase is Phase.EXECUTING


def test_a_superseded_attempt_cannot_queue_the_job_again(store, takeover):
    first, _ = takeover
    ran = []
    assert store.retry_later(first.job_id, FAILED, 5, lambda attempt: 0.0, claim=first,
                             then=lambda: ran.append(True)) is False
    assert store.requeue(first.job_id, claim=first) is False
    after = job(store, first)
    assert after.phase is Phase.EXECUTING
    assert after.attempt == 1       # no attempt was recorded as failed
    assert ran == []                # what goes with a retry did not go


def test_a_superseded_attempts_progress_is_not_recorded(store, takeover):
    first, second = takeover
    store.set_progress(second.job_id, 30.0, "the new attempt", claim=second)
    store.set_progress(first.job_id, 90.0, "the old attempt", claim=first)
    after = job(store, first)
    assert (after.progress, after.progress_message) == (30.0, "the new attempt")


def test_a_superseded_attempts_result_is_not_recorded(store, takeover):
    first, _ = takeover
    assert store.add_result(first.job_id, result("old"), claim=first) is False
    assert job(store, first).results == []


def test_a_superseded_attempts_result_is_not_added_once_the_new_attempt_completed(
        store, takeover):
    first, second = takeover
    assert store.mark_completed(second.job_id, stored_bytes=0, results=[result("new")],
                                claim=second)
    assert store.add_result(first.job_id, result("old"), claim=first) is False
    after = job(store, first)
    assert after.phase is Phase.COMPLETED
    assert [r.id for r in after.results] == ["new"]


def test_an_attempt_with_the_same_start_but_another_worker_is_another_attempt(
        store, takeover):
    # Clocks apart: a claim's start is never before the job's creation, so two
    # attempts may share one; the lease still tells them apart.
    _, second = takeover
    impostor = second._replace(worker="host:1:A")
    assert store.mark_failed(second.job_id, FAILED, claim=impostor) is False
    assert store.add_result(second.job_id, result("old"), claim=impostor) is False
    assert job(store, second).phase is Phase.EXECUTING


def test_the_attempt_that_holds_the_job_records_its_progress_and_end(store, takeover):
    _, second = takeover
    store.set_progress(second.job_id, 50.0, "half", claim=second)
    assert job(store, second).progress == 50.0
    assert store.mark_completed(second.job_id, stored_bytes=0, results=[result("out")],
                                claim=second)
    after = job(store, second)
    assert after.phase is Phase.COMPLETED
    assert [r.id for r in after.results] == ["out"]


def test_the_attempt_that_holds_the_job_can_fail_it(store, takeover):
    _, second = takeover
    assert store.mark_failed(second.job_id, FAILED, claim=second)
    assert job(store, second).phase is Phase.ERROR


def test_the_attempt_that_holds_the_job_can_queue_it_again(store, takeover):
    _, second = takeover
    ran = []
    assert store.retry_later(second.job_id, FAILED, 5, lambda attempt: 0.0, claim=second,
                             then=lambda: ran.append(True))
    assert job(store, second).phase is Phase.QUEUED
    assert ran == [True]


def test_an_attempt_aborted_while_it_ran_still_records_what_it_reported(client, store):
    job_id = create_id(client)
    assert store.mark_queued(job_id)
    claimed = claim(store, "host:1:A")
    assert store.mark_aborted(job_id)
    assert store.add_result(job_id, result("partial"), claim=claimed)
    assert [r.id for r in job(store, claimed).results] == ["partial"]
