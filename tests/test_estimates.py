"""Quotes (UWS 1.1 §2.1.6) and the time remaining shown in jobInfo: pure arithmetic."""
from __future__ import annotations

import datetime as dt

from uws.domain import estimates
from uws.domain.model import Job
from uws.domain.phases import Phase

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


def job(phase=Phase.EXECUTING, started_ago=10.0, progress=None, duration=600) -> Job:
    start = NOW - dt.timedelta(seconds=started_ago) if started_ago is not None else None
    return Job(id="ab" * 16, service="sleep", owner="", phase=phase, creation_time=NOW,
               execution_duration=duration, destruction=None, start_time=start,
               progress=progress)


def test_remaining_time_is_extrapolated_from_progress():
    assert estimates.remaining_seconds(job(progress=25.0), NOW) == 30.0


def test_no_remaining_time_before_one_percent_is_reported():
    assert estimates.remaining_seconds(job(progress=None), NOW) is None
    assert estimates.remaining_seconds(job(started_ago=0.1, progress=0.01), NOW) is None


def test_remaining_time_never_passes_the_execution_duration():
    slow = job(started_ago=100.0, progress=2.0, duration=600)
    assert estimates.remaining_seconds(slow, NOW) == 500.0


def test_unlimited_execution_duration_does_not_cap_the_remaining_time():
    slow = job(started_ago=100.0, progress=2.0, duration=0)
    assert estimates.remaining_seconds(slow, NOW) == 4900.0


def test_a_finished_job_has_no_remaining_time():
    assert estimates.remaining_seconds(job(Phase.COMPLETED, progress=100.0), NOW) is None


def test_a_queued_job_is_quoted_after_the_waves_ahead_of_it():
    queued = job(Phase.QUEUED, started_ago=None)
    # 5 jobs ahead on 2 slots: two full waves, then this job's own run.
    assert estimates.quote(queued, NOW, typical=10.0, ahead=5, slots=2) == \
        NOW + dt.timedelta(seconds=30)


def test_without_history_a_pending_job_has_no_quote():
    assert estimates.quote(job(Phase.PENDING, started_ago=None), NOW, None, 0, 2) is None


def test_an_executing_job_without_progress_is_quoted_from_its_typical_run():
    assert estimates.quote(job(started_ago=4.0), NOW, typical=10.0, ahead=0, slots=1) == \
        NOW + dt.timedelta(seconds=6)


def test_an_executing_job_is_quoted_from_its_progress():
    assert estimates.quote(job(progress=50.0), NOW, typical=1000.0, ahead=0, slots=1) == \
        NOW + dt.timedelta(seconds=10)


def test_an_executing_job_is_never_quoted_past_its_execution_duration():
    short = job(started_ago=4.0, duration=10)
    assert estimates.quote(short, NOW, typical=3600.0, ahead=0, slots=1) == \
        NOW + dt.timedelta(seconds=6)
