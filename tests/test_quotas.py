"""Quotas and fairness: what one owner may hold and run, what one job may write,
and how the executor shares its slots among owners."""
from __future__ import annotations

import io
import sys
import time

import pytest

from uws.domain.errors import Forbidden
from uws.domain.model import Caller
from uws.domain.phases import Phase
from uws.usecases.jobs import Control
from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, make_config
from test_store_races import race
from uwshelp import settle, wait_for

PY = sys.executable
ALICE, BOB = Caller("alice"), Caller("bob")
SLEEP_PARAMS = [{"name": "DURATION", "type": "float", "default": 0},
                {"name": "FAIL", "type": "boolean", "default": False},
                {"name": "MESSAGE", "type": "string", "default": "", "max_length": 100000}]


def _app(tmp_path, db_url, services: dict, **settings):
    application = create_app(make_config(tmp_path, db_url, services=services, **settings))
    application.test_client_class = ValidatingClient
    return application


@pytest.fixture
def make_app(tmp_path, db_url):
    """A function making an app with the given services (shut down afterwards)."""
    made = []

    def make(services: dict, **settings):
        made.append(_app(tmp_path, db_url, services, **settings))
        return made[-1]

    yield make
    for application in made:
        shutdown(application)


def queue(api, caller: Caller, count: int = 1) -> list[str]:
    """``count`` QUEUED jobs of ``caller`` in the service "s", oldest first."""
    return [api.create("s", [], {}, Control(run=True), caller) for _ in range(count)]


def owner_of(api, job_id: str) -> str:
    return api.store.get_job(job_id, "s", None).owner


def claim(api, caps=None) -> str | None:
    return api.store.claim_next("worker", ["s"], 60, caps)


# -- fair dispatch ----------------------------------------------------------------------

@pytest.fixture
def idle_api(make_app):
    application = make_app({"s": {"runner": "uws.demo:sleep", "parameters": SLEEP_PARAMS}},
                           executor="none")
    return application.extensions["uws"]


def test_an_owner_running_fewer_jobs_goes_before_one_who_queued_earlier(idle_api):
    api = idle_api
    queue(api, ALICE, 5)
    bobs = queue(api, BOB)
    assert owner_of(api, claim(api)) == "alice"     # both run nothing: the longest waiting
    assert claim(api) == bobs[0]                    # alice runs one, bob none


def test_owners_with_many_queued_jobs_take_turns(idle_api):
    api = idle_api
    queue(api, ALICE, 4)
    queue(api, BOB, 4)
    owners = [owner_of(api, claim(api)) for _ in range(8)]
    assert owners == ["alice", "bob"] * 4


def test_each_owners_jobs_still_start_oldest_first(idle_api):
    api = idle_api
    alices = queue(api, ALICE, 3)
    claimed = [claim(api) for _ in range(3)]
    assert claimed == alices


def test_an_owner_at_its_running_cap_has_its_further_jobs_held(idle_api):
    api = idle_api
    alices = queue(api, ALICE, 3)
    caps = lambda service, owner: 2 if owner == "alice" else 0     # noqa: E731
    assert [claim(api, caps) for _ in range(2)] == alices[:2]
    assert claim(api, caps) is None
    assert api.store.get_job(alices[2], "s", None).phase is Phase.HELD    # see test_holds
    bobs = queue(api, BOB)
    assert claim(api, caps) == bobs[0]      # others are not held up by alice's cap


def test_a_job_ending_frees_a_slot_under_the_running_cap(idle_api):
    api = idle_api
    alices = queue(api, ALICE, 2)
    caps = lambda service, owner: 1     # noqa: E731
    assert claim(api, caps) == alices[0]
    assert claim(api, caps) is None
    api.abort("s", alices[0], ALICE)
    assert claim(api, caps) == alices[1]


def test_concurrent_claims_never_take_an_owner_past_its_running_cap(idle_api):
    api = idle_api
    queue(api, ALICE, 12)
    caps = lambda service, owner: 3     # noqa: E731

    def claim_all(worker):
        got = []
        while (job_id := api.store.claim_next(worker, ["s"], 60, caps)) is not None:
            got.append(job_id)
        return got

    claimed = [j for ids in race(*[(lambda i=i: claim_all(f"w{i}")) for i in range(6)])
               for j in ids]
    assert len(claimed) == 3
    assert api.count("s", _query(Phase.EXECUTING), Caller(admin=True)) == 3


def _query(phase):
    from uws.domain.model import ListQuery
    return ListQuery(phases=(phase,))


def test_the_executor_keeps_an_owner_to_its_running_cap(make_app):
    application = make_app({"s": {"runner": "uws.demo:sleep", "parameters": SLEEP_PARAMS,
                                  "max_running_per_owner": 1}}, slots=3)
    api = application.extensions["uws"]
    alices = [api.create("s", [("DURATION", "1")], {}, Control(run=True), ALICE)
              for _ in range(3)]
    wait_for(lambda: api.get("s", alices[0], ALICE).phase is Phase.EXECUTING)
    admin = Caller(admin=True)
    for _ in range(10):         # for half a second, while two slots stay free
        assert api.count("s", _query(Phase.EXECUTING), admin) == 1
        time.sleep(0.05)
    wait_for(lambda: all(api.get("s", j, ALICE).phase is Phase.COMPLETED for j in alices),
             timeout=30)


# -- what an owner may keep ---------------------------------------------------------------

CHECKSUM = {"runner": "uws.demo:checksum",
            "parameters": [{"name": "FILE", "type": "file", "required": True}]}


def upload(client, size: int, service: str = "c"):
    return client.post(f"/{service}", data={"FILE": (io.BytesIO(b"x" * size), "f.bin")},
                       content_type="multipart/form-data")


def test_anonymous_callers_together_keep_at_most_anonymous_max_jobs(make_app):
    application = make_app({"s": {"runner": "uws.demo:sleep", "anonymous_max_jobs": 2}},
                           executor="none")
    client, api = application.test_client(), application.extensions["uws"]
    assert [client.post("/s").status_code for _ in range(3)] == [303, 303, 403]
    assert api.create("s", [], {}, Control(), ALICE)       # named owners have their own


def test_an_identified_owner_keeps_at_most_max_jobs_per_owner(make_app):
    application = make_app({"s": {"runner": "uws.demo:sleep", "max_jobs_per_owner": 2}},
                           executor="none")
    api = application.extensions["uws"]
    for _ in range(2):
        api.create("s", [], {}, Control(), ALICE)
    with pytest.raises(Forbidden, match="2 jobs"):
        api.create("s", [], {}, Control(), ALICE)
    api.create("s", [], {}, Control(), BOB)      # each owner has their own


def test_an_upload_beyond_the_owners_stored_bytes_answers_403_and_leaves_nothing(
        make_app, tmp_path):
    application = make_app({"c": {**CHECKSUM, "anonymous_max_bytes": 1000}}, executor="none")
    client = application.test_client()
    assert upload(client, 600).status_code == 303
    r = upload(client, 600)
    assert r.status_code == 403 and b"bytes" in r.data
    assert client.head("/c").headers["X-Job-Count"] == "1"
    uploads = list((tmp_path / "data" / "jobs").rglob("uploads/*"))
    assert len(uploads) == 1


def test_deleting_a_job_frees_its_bytes(make_app):
    application = make_app({"c": {**CHECKSUM, "anonymous_max_bytes": 1000}}, executor="none")
    client = application.test_client()
    first = upload(client, 600).headers["Location"].replace("http://localhost", "")
    assert client.delete(first).status_code == 303
    assert upload(client, 600).status_code == 303


def test_an_upload_to_a_pending_job_counts_towards_the_owners_bytes(make_app):
    application = make_app({"c": {**CHECKSUM, "anonymous_max_bytes": 1000}}, executor="none")
    client = application.test_client()
    path = upload(client, 600).headers["Location"].replace("http://localhost", "")
    r = client.post(f"{path}/parameters", data={"FILE": (io.BytesIO(b"y" * 600), "g.bin")},
                    content_type="multipart/form-data")
    assert r.status_code == 403
    assert upload(client, 300).status_code == 303


def test_what_a_finished_job_wrote_counts_towards_its_owners_bytes(make_app):
    application = make_app({"s": {"runner": "uws.demo:sleep", "parameters": SLEEP_PARAMS,
                                  "anonymous_max_bytes": 5000}})
    client = application.test_client()
    r = client.post("/s", data={"MESSAGE": "m" * 6000, "PHASE": "RUN"})
    path = r.headers["Location"].replace("http://localhost", "")
    assert b"COMPLETED" in settle(client, path).data
    r = client.post("/s")
    assert r.status_code == 403 and b"5000 bytes" in r.data


def test_a_completed_job_counts_exactly_the_bytes_its_directory_holds(make_app):
    application = make_app({"s": {"runner": "uws.demo:sleep", "parameters": SLEEP_PARAMS}})
    api, client = application.extensions["uws"], application.test_client()
    r = client.post("/s", data={"MESSAGE": "m" * 6000, "PHASE": "RUN"})
    path = r.headers["Location"].replace("http://localhost", "")
    assert b"COMPLETED" in settle(client, path).data
    kept = api.files.usage(path.rsplit("/", 1)[-1]).total
    assert kept > 6000 and api.store.stored_bytes("s", "") == kept


def test_identified_owners_have_no_bytes_limit_by_default(make_app):
    application = make_app({"c": CHECKSUM}, executor="none")
    api = application.extensions["uws"]
    service = api.service("c")
    assert service.quota("alice").bytes == 0 and service.quota("").bytes > 0


# -- what one job may write -----------------------------------------------------------------

def writer(script: str, **limits) -> dict:
    return {"command": ["sh", "-c", script], **limits}


@pytest.fixture
def writers(make_app):
    application = make_app({
        "many": writer("for i in 1 2 3 4 5 6 7 8 9 10; do head -c 200000 /dev/zero > f$i; "
                       "done; sleep 30", max_result_bytes=1_000_000),
        # no file may outgrow the larger of the two limits, whatever it holds
        "huge": writer("head -c 5000000 /dev/zero > big; sleep 30",
                       max_result_bytes=1_000_000, max_log_bytes=1_000_000),
        "chatty": writer("head -c 3000000 /dev/zero; sleep 30", max_log_bytes=1_000_000),
        "modest": writer("head -c 500000 /dev/zero > f; head -c 500000 /dev/zero",
                         max_result_bytes=1_000_000, max_log_bytes=1_000_000),
        # empty files and folders weigh nothing, but each is an inode
        "scattered": writer("mkdir d; for i in $(seq 1 60); do : > d/f$i; done; sleep 30",
                            max_result_files=50),
        "tidy": writer("mkdir d; for i in $(seq 1 49); do : > d/f$i; done", max_result_files=50),
    })
    return application.test_client(), application.config


def ended(client, service: str):
    r = client.post(f"/{service}", data={"PHASE": "RUN"})
    path = r.headers["Location"].replace("http://localhost", "")
    return path, settle(client, path, timeout=20).get_data(as_text=True)


def test_a_job_writing_more_files_than_max_result_bytes_is_stopped_in_error(writers):
    client, _ = writers
    _, doc = ended(client, "many")
    assert "<uws:phase>ERROR</uws:phase>" in doc and "max_result_bytes" in doc


def test_one_file_cannot_grow_past_the_limit_before_the_job_is_stopped(writers, tmp_path):
    client, _ = writers
    path, doc = ended(client, "huge")
    assert "<uws:phase>ERROR</uws:phase>" in doc and "max_result_bytes" in doc
    job_id = path.rsplit("/", 1)[1]
    big = tmp_path / "data" / "jobs" / job_id[:2] / job_id / "results" / "big"
    assert big.stat().st_size <= 1_000_001


def test_a_job_printing_more_than_max_log_bytes_is_stopped_in_error(writers):
    client, _ = writers
    _, doc = ended(client, "chatty")
    assert "<uws:phase>ERROR</uws:phase>" in doc and "max_log_bytes" in doc


def test_a_job_making_more_than_max_result_files_files_is_stopped_in_error(writers):
    client, _ = writers
    _, doc = ended(client, "scattered")
    assert "<uws:phase>ERROR</uws:phase>" in doc and "max_result_files" in doc


def test_a_job_making_max_result_files_files_and_folders_completes(writers):
    client, _ = writers
    _, doc = ended(client, "tidy")
    assert "<uws:phase>COMPLETED</uws:phase>" in doc


def test_a_job_within_its_limits_completes(writers):
    client, _ = writers
    _, doc = ended(client, "modest")
    assert "<uws:phase>COMPLETED</uws:phase>" in doc


def test_files_written_beside_the_working_directory_count_against_the_limits(make_app):
    application = make_app({
        "beside": writer("mkdir ../x; for i in $(seq 1 60); do : > ../x/f$i; done; sleep 30",
                         max_result_files=50),
        "beside-big": writer("head -c 2000000 /dev/zero > ../big; sleep 30",
                             max_result_bytes=1_000_000, max_log_bytes=3_000_000),
    })
    client = application.test_client()
    for service, limit in (("beside", "max_result_files"), ("beside-big", "max_result_bytes")):
        _, doc = ended(client, service)
        assert "<uws:phase>ERROR</uws:phase>" in doc and limit in doc, service
