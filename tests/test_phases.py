"""The declared phase rules (UWS 1.1 §2.1.3), independent of storage and HTTP."""
import pytest

from uws.domain.phases import ACTIVE, Event, Phase, allowed, parse_phase, target


def test_run_queues_a_pending_job():
    assert allowed(Event.RUN, Phase.PENDING) and target(Event.RUN) is Phase.QUEUED


def test_run_releases_a_held_job():
    assert allowed(Event.RUN, Phase.HELD)


@pytest.mark.parametrize("phase", [Phase.PENDING, Phase.QUEUED, Phase.EXECUTING])
def test_abort_is_allowed_before_the_job_finishes(phase):
    assert allowed(Event.ABORT, phase)


@pytest.mark.parametrize("phase", [Phase.COMPLETED, Phase.ERROR, Phase.ABORTED, Phase.ARCHIVED])
def test_nothing_reopens_a_finished_job(phase):
    reopening = [e for e in Event if allowed(e, phase) and e is not Event.ARCHIVE]
    assert reopening == []


def test_completion_only_follows_execution():
    assert [p for p in Phase if allowed(Event.COMPLETE, p)] == [Phase.EXECUTING]


def test_only_finished_jobs_are_archived():
    assert {p for p in Phase if allowed(Event.ARCHIVE, p)} == {
        Phase.COMPLETED, Phase.ERROR, Phase.ABORTED}


def test_blocking_waits_only_in_active_phases():
    assert ACTIVE == {Phase.PENDING, Phase.QUEUED, Phase.EXECUTING}


def test_phase_names_parse_case_insensitively():
    assert parse_phase(" executing ") is Phase.EXECUTING


def test_unknown_phase_name_is_rejected():
    with pytest.raises(ValueError):
        parse_phase("SUSPEND")
