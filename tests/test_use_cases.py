"""The use cases (uws.usecases.jobs.Jobs) on in-memory ports: no HTTP, no processes, no
database, so each rule of UWS 1.1 they enforce is checked in microseconds."""
from __future__ import annotations

import copy
import io

import pytest

from uws.config import settings as config_mod
from uws.domain import queueing
from uws.domain.errors import BadRequest, Forbidden, NotFound
from uws.domain.model import Caller, ListQuery
from uws.domain.phases import Phase
from uws.execution.files import JobFiles
from uws.usecases.jobs import Control, Jobs

from fakes import MemoryStore, NoWait, RecordingExecutor

ALICE, BOB, ADMIN = Caller("alice"), Caller("bob"), Caller("root", admin=True)


class Upload:
    def __init__(self, data: bytes):
        self.stream = io.BytesIO(data)


@pytest.fixture
def world(tmp_path):
    settings = config_mod.from_dict({"services": {
        "s": {"runner": "uws.demo:sleep", "max_jobs_per_owner": 3,
              "parameters": [{"name": "DURATION", "type": "float", "default": 0},
                             {"name": "FAIL", "type": "boolean", "default": False},
                             {"name": "MESSAGE", "type": "string", "default": ""}]},
        "c": {"runner": "uws.demo:checksum", "max_bytes_per_owner": 100,
              "parameters": [{"name": "FILE", "type": "file", "required": True}]},
    }}, env={}, data_dir=tmp_path / "data")
    store, executor = MemoryStore(), RecordingExecutor()
    jobs = Jobs(config=settings, store=store, files=JobFiles(tmp_path / "data", 10_000),
                executor=executor, watch=NoWait())
    return jobs, store, executor


def create(jobs, caller=ALICE, service="s", run=False, pairs=(), uploads=None):
    return jobs.create(service, list(pairs), uploads or {}, Control(run=run), caller)


def test_a_new_job_is_pending_and_owned_by_its_creator(world):
    jobs, _, executor = world
    job = jobs.get("s", create(jobs), ALICE)
    assert job.phase is Phase.PENDING and job.owner == "alice"
    assert executor.submitted == []


def test_run_queues_the_job_and_hands_it_to_the_executor(world):
    jobs, _, executor = world
    job_id = create(jobs)
    jobs.run("s", job_id, ALICE)
    assert jobs.get("s", job_id, ALICE).phase is Phase.QUEUED
    assert executor.submitted == [job_id]


#: every change a client can ask of one job, under the name of service "c"
CHANGES = {
    "run": lambda jobs, job_id, who: jobs.run("c", job_id, who),
    "abort": lambda jobs, job_id, who: jobs.abort("c", job_id, who),
    "delete": lambda jobs, job_id, who: jobs.delete("c", job_id, who),
    "repeat": lambda jobs, job_id, who: jobs.repeat("c", job_id, who, run=True),
    "executionduration": lambda jobs, job_id, who: jobs.set_execution_duration(
        "c", job_id, "10", who),
    "destruction": lambda jobs, job_id, who: jobs.set_destruction(
        "c", job_id, "2099-01-01T00:00:00Z", who),
    "callback": lambda jobs, job_id, who: jobs.set_callback(
        "c", job_id, "https://example.org/done", who),
    "parameters": lambda jobs, job_id, who: jobs.update_parameters(
        "c", job_id, [("DURATION", "5")], {}, who, run_id="other"),
    "priority": lambda jobs, job_id, who: jobs.reschedule(
        "c", job_id, queueing.Schedule(priority=1), who),
}


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("caller", [ALICE, ADMIN], ids=["owner", "admin"])
def test_no_change_reaches_a_job_under_another_services_name(world, caller, change):
    """A job is of its own service only: its id under another service's name is no
    job, whoever asks and whatever the change, and nothing changes."""
    jobs, store, executor = world
    job_id = create(jobs)
    before = copy.deepcopy(store.jobs)
    with pytest.raises(NotFound):
        CHANGES[change](jobs, job_id, caller)
    assert store.jobs == before
    assert executor.submitted == []


def test_run_of_a_stored_job_of_a_service_not_served_is_not_found(world):
    """A job stored under a service this server does not serve (removed from its
    configuration, or another front end's on the same database) is no job here."""
    jobs, store, executor = world
    job_id = create(jobs)
    store.jobs[job_id].service = "gone"
    with pytest.raises(NotFound, match="gone"):
        jobs.run("gone", job_id, ADMIN)
    assert store.jobs[job_id].phase is Phase.PENDING
    assert executor.submitted == []


@pytest.mark.parametrize("bad", ["a\x00b", "", "x" * 300, "../x"])
def test_run_of_an_id_no_job_can_have_is_not_found(world, bad):
    jobs, _, _ = world
    with pytest.raises(NotFound):
        jobs.run("s", bad, ADMIN)


def test_run_on_a_queued_job_changes_nothing(world):
    jobs, _, executor = world
    job_id = create(jobs, run=True)
    jobs.run("s", job_id, ALICE)
    assert executor.submitted == [job_id]


def test_run_on_a_finished_job_is_forbidden(world):
    jobs, store, _ = world
    job_id = create(jobs, run=True)
    store.mark_aborted(job_id)
    with pytest.raises(Forbidden, match="ABORTED"):
        jobs.run("s", job_id, ALICE)


def test_abort_stops_the_work_and_aborting_twice_is_harmless(world):
    jobs, _, executor = world
    job_id = create(jobs, run=True)
    jobs.abort("s", job_id, ALICE)
    jobs.abort("s", job_id, ALICE)
    assert jobs.get("s", job_id, ALICE).phase is Phase.ABORTED
    assert executor.aborted == [job_id]


def test_another_owners_job_is_forbidden_and_an_unknown_one_not_found(world):
    jobs, _, _ = world
    job_id = create(jobs, ALICE)
    with pytest.raises(Forbidden):
        jobs.get("s", job_id, BOB)
    with pytest.raises(NotFound):
        jobs.get("s", "0" * 32, ALICE)
    with pytest.raises(NotFound):
        jobs.get("nosuch", job_id, ALICE)


def test_an_administrator_reaches_every_owners_job(world):
    jobs, _, _ = world
    job_id = create(jobs, ALICE)
    assert jobs.get("s", job_id, ADMIN).owner == "alice"


def test_a_list_holds_only_the_callers_jobs_newest_first(world):
    jobs, _, _ = world
    mine = [create(jobs, ALICE) for _ in range(3)]
    create(jobs, BOB)
    assert [ref.id for ref in jobs.list("s", ListQuery(limit=10), ALICE)] == mine[::-1]
    assert jobs.count("s", ListQuery(), ADMIN) == 4


def test_delete_forgets_the_job_and_its_files_and_stops_its_work(world, tmp_path):
    jobs, _, executor = world
    job_id = create(jobs, service="c", uploads={"FILE": Upload(b"abc")})
    assert any((tmp_path / "data" / "jobs").rglob("FILE"))
    jobs.delete("c", job_id, ALICE)
    with pytest.raises(NotFound):
        jobs.get("c", job_id, ALICE)
    assert executor.aborted == [job_id]
    assert not any((tmp_path / "data" / "jobs").rglob("FILE"))


def test_another_owner_cannot_delete_a_job(world):
    jobs, _, _ = world
    job_id = create(jobs, ALICE)
    with pytest.raises(Forbidden):
        jobs.delete("s", job_id, BOB)
    assert jobs.get("s", job_id, ALICE)


def test_an_owner_at_the_jobs_limit_cannot_create_another(world):
    jobs, _, _ = world
    for _ in range(3):
        create(jobs, ALICE)
    with pytest.raises(Forbidden, match="3 jobs"):
        create(jobs, ALICE)
    create(jobs, BOB)


def test_uploads_past_the_owners_bytes_limit_are_refused_and_removed(world, tmp_path):
    jobs, _, _ = world
    create(jobs, service="c", uploads={"FILE": Upload(b"x" * 60)})
    with pytest.raises(Forbidden, match="bytes"):
        create(jobs, service="c", uploads={"FILE": Upload(b"y" * 60)})
    assert len(list((tmp_path / "data" / "jobs").rglob("FILE"))) == 1


def test_the_execution_duration_is_fixed_once_the_job_runs(world):
    jobs, store, _ = world
    job_id = create(jobs, run=True)
    jobs.set_execution_duration("s", job_id, "30", ALICE)
    assert jobs.get("s", job_id, ALICE).execution_duration == 30
    store.mark_executing(job_id)
    with pytest.raises(Forbidden, match="EXECUTING"):
        jobs.set_execution_duration("s", job_id, "60", ALICE)


def test_a_destruction_time_in_the_past_is_a_bad_request(world):
    jobs, _, _ = world
    with pytest.raises(BadRequest, match="future"):
        jobs.set_destruction("s", create(jobs), "2001-01-01T00:00:00Z", ALICE)


def test_parameters_change_only_while_pending(world):
    jobs, _, _ = world
    job_id = create(jobs)
    jobs.update_parameters("s", job_id, [("DURATION", "5")], {}, ALICE)
    assert jobs.get("s", job_id, ALICE).parameter_values("DURATION") == ["5"]
    jobs.run("s", job_id, ALICE)
    with pytest.raises(Forbidden):
        jobs.update_parameters("s", job_id, [("DURATION", "6")], {}, ALICE)


def test_an_unknown_parameter_value_type_is_a_bad_request(world):
    jobs, _, _ = world
    with pytest.raises(BadRequest, match="DURATION"):
        create(jobs, pairs=[("DURATION", "soon")])


def test_wait_on_a_finished_job_answers_at_once(world):
    jobs, store, _ = world
    job_id = create(jobs, run=True)
    store.mark_aborted(job_id)
    assert jobs.wait("s", job_id, 30, None, ALICE).phase is Phase.ABORTED
