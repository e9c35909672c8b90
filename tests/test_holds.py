"""HELD jobs: administrative holds of a service or of one owner (/{service}/holds),
and quota holds of jobs whose owner runs as many jobs as its service allows."""
from __future__ import annotations

import base64
import datetime as dt
import json
import threading
import time

import lxml.html
import pytest
import requests
import sqlalchemy as sa
from lxml import etree
from werkzeug.security import generate_password_hash

from uws.auth import AuthConfig
from uws.domain import timeutil
from uws.domain.model import Caller, ErrorSummary, Job, ListQuery, new_job_id
from uws.domain.phases import Phase
from uws.domain.timeutil import format_time
from uws.render import json as render_json
from uws.render.xml import Links
from uws.resources import schemas_dir
from uws.store.tables import event as EVENTS
from uws.store.tables import job as JOBS
from uws.usecases.holds import Holds
from uws.usecases.jobs import Control
from uws.usecases.sweeps import Sweeps
from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, make_config
from test_distributed import RABBITMQ, Cluster, _need, runs_of
from test_distributed import create as cluster_create
from test_distributed import phase as cluster_phase
from test_store_races import race
from uwshelp import wait_for

FAST_HASH = "pbkdf2:sha256:1000"
USERS = {"alice": "wonderland", "bob": "builder", "root": "toor"}
ALICE, BOB, ROOT = Caller("alice"), Caller("bob"), Caller("root", admin=True)
SLEEP = {"runner": "uws.demo:sleep",
         "parameters": [{"name": "DURATION", "type": "float", "default": 0},
                        {"name": "FAIL", "type": "boolean", "default": False},
                        {"name": "MESSAGE", "type": "string", "default": ""}]}
HOLDS_NS = {"h": "urn:ivoa-uws-server:holds"}
INFO = "{urn:ivoa-uws-server:jobinfo}held"
_holds_schema = etree.XMLSchema(etree.parse(str(schemas_dir() / "uws-holds.xsd")))


def basic(user: str) -> dict:
    raw = f"{user}:{USERS[user]}".encode()
    return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


def _app(tmp_path, db_url, services=None, **settings):
    cfg = make_config(tmp_path, db_url, services=services or {"s": SLEEP}, scheduler=False,
                      **settings)
    cfg.auth = AuthConfig(
        modes=("basic",),
        users={u: generate_password_hash(p, method=FAST_HASH) for u, p in USERS.items()},
        admins=frozenset({"root"}))
    application = create_app(cfg)
    application.test_client_class = ValidatingClient
    return application


@pytest.fixture
def make_app(tmp_path, db_url):
    made = []

    def make(services=None, **settings):
        made.append(_app(tmp_path, db_url, services, **settings))
        return made[-1]

    yield make
    for application in made:
        shutdown(application)


@pytest.fixture
def idle(make_app):
    """(client, api) of an app that runs nothing: QUEUED jobs stay QUEUED."""
    application = make_app(executor="none")
    return application.test_client(), application.extensions["uws"]


def holds_doc(client, user="root"):
    r = client.get("/s/holds", headers=basic(user))
    assert r.status_code == 200, r.data
    doc = etree.fromstring(r.data)
    assert _holds_schema.validate(doc), _holds_schema.error_log
    return doc


def post_holds(client, user="root", **form):
    return client.post("/s/holds", data=form, headers=basic(user))


def new_job(client, user: str, run: bool = False) -> str:
    data = {"DURATION": "0", **({"PHASE": "RUN"} if run else {})}
    r = client.post("/s", data=data, headers=basic(user))
    assert r.status_code == 303
    return r.headers["Location"].replace("http://localhost", "")


def phase(client, path: str, user: str) -> str:
    return client.get(f"{path}/phase", headers=basic(user)).get_data(as_text=True)


def run(client, path: str, user: str):
    return client.post(f"{path}/phase", data={"PHASE": "RUN"}, headers=basic(user))


# -- the holds resource -----------------------------------------------------------------

def test_only_administrators_see_and_change_holds(idle):
    client, _ = idle
    assert client.get("/s/holds", headers=basic("alice")).status_code == 403
    assert post_holds(client, "alice", ACTION="HOLD").status_code == 403
    assert client.get("/s/holds").status_code == 403     # anonymous
    assert holds_doc(client).findall("h:hold", HOLDS_NS) == []


def test_a_placed_hold_is_listed_with_its_owner_reason_and_author(idle):
    client, _ = idle
    r = post_holds(client, ACTION="HOLD", OWNER="alice", REASON="disk full")
    assert r.status_code == 303 and r.headers["Location"].endswith("/s/holds")
    (hold,) = holds_doc(client).findall("h:hold", HOLDS_NS)
    assert (hold.get("owner"), hold.get("who"), hold.findtext("h:reason", namespaces=HOLDS_NS)) \
        == ("alice", "root", "disk full")


def test_a_hold_on_the_whole_service_has_no_owner(idle):
    client, _ = idle
    post_holds(client, ACTION="HOLD", REASON="maintenance")
    (hold,) = holds_doc(client).findall("h:hold", HOLDS_NS)
    assert hold.get("owner") is None


def test_holds_as_json(idle):
    client, _ = idle
    post_holds(client, ACTION="HOLD", OWNER="bob", REASON="r")
    r = client.get("/s/holds", headers={**basic("root"), "Accept": "application/json"})
    assert r.mimetype == "application/json"
    doc = json.loads(r.data)
    assert doc["service"] == "s" and [(h["owner"], h["reason"]) for h in doc["holds"]] \
        == [("bob", "r")]


@pytest.mark.parametrize("form", [{}, {"ACTION": "PAUSE"}, {"ACTION": "HOLD", "COLOR": "red"},
                                  {"ACTION": "HOLD", "REASON": "x" * 2000},
                                  {"ACTION": "HOLD", "OWNER": "a\x01b"}])
def test_a_bad_holds_request_answers_400(idle, form):
    client, _ = idle
    assert post_holds(client, **form).status_code == 400
    assert holds_doc(client).findall("h:hold", HOLDS_NS) == []


def test_releasing_a_hold_that_is_not_there_answers_404(idle):
    client, _ = idle
    assert post_holds(client, ACTION="RELEASE", OWNER="alice").status_code == 404


def test_holds_of_an_unknown_service_answer_404(idle):
    client, _ = idle
    assert client.get("/nope/holds", headers=basic("root")).status_code == 404


# -- PHASE=RUN under a hold ---------------------------------------------------------------

def test_run_while_the_service_is_held_moves_the_job_to_held(idle):
    client, _ = idle
    post_holds(client, ACTION="HOLD")
    path = new_job(client, "alice")
    assert run(client, path, "alice").status_code == 303
    assert phase(client, path, "alice") == "HELD"


def test_creating_with_run_while_held_makes_a_held_job(idle):
    client, _ = idle
    post_holds(client, ACTION="HOLD")
    assert phase(client, new_job(client, "alice", run=True), "alice") == "HELD"


def test_run_on_a_held_job_is_accepted_and_keeps_it_held(idle):
    client, _ = idle
    post_holds(client, ACTION="HOLD")
    path = new_job(client, "alice", run=True)
    assert run(client, path, "alice").status_code == 303
    assert phase(client, path, "alice") == "HELD"


def test_a_hold_on_one_owner_leaves_other_owners_jobs_queued(idle):
    client, _ = idle
    post_holds(client, ACTION="HOLD", OWNER="alice")
    assert phase(client, new_job(client, "alice", run=True), "alice") == "HELD"
    assert phase(client, new_job(client, "bob", run=True), "bob") == "QUEUED"


def test_jobs_queued_before_a_hold_stay_queued(idle):
    client, _ = idle
    path = new_job(client, "alice", run=True)
    post_holds(client, ACTION="HOLD")
    assert phase(client, path, "alice") == "QUEUED"


def test_the_held_reason_is_shown_in_job_info(idle):
    client, _ = idle
    post_holds(client, ACTION="HOLD", REASON="database upgrade")
    path = new_job(client, "alice", run=True)
    doc = etree.fromstring(client.get(path, headers=basic("alice")).data)
    assert "database upgrade" in doc.find(f".//{INFO}").text


def test_the_held_reason_is_on_the_job_page_as_written(idle):
    client, _ = idle
    post_holds(client, ACTION="HOLD", REASON="Moving to NEW disks")
    path = new_job(client, "alice", run=True)
    page = lxml.html.fromstring(client.get(path, headers={**basic("alice"),
                                                          "Accept": "text/html"}).data)
    (held,) = page.xpath('//*[@data-role="held"]//p')
    assert held.text_content() == "Held by an administrator: Moving to NEW disks."


def test_the_held_reason_is_in_the_json_job_info(idle):
    client, api = idle
    post_holds(client, ACTION="HOLD", REASON="database upgrade")
    job_id = new_job(client, "alice", run=True).rsplit("/", 1)[1]
    doc = render_json.job(api.get("s", job_id, ALICE), Links(f"http://localhost/s/{job_id}"))
    assert "database upgrade" in doc["jobInfo"]["held"]


def test_releasing_queues_the_held_jobs_again_in_their_order(idle):
    client, api = idle
    post_holds(client, ACTION="HOLD")
    paths = [new_job(client, user, run=True) for user in ("alice", "bob", "alice")]
    assert post_holds(client, ACTION="RELEASE").status_code == 303
    assert [phase(client, p, u) for p, u in zip(paths, ("alice", "bob", "alice"))] \
        == ["QUEUED"] * 3
    ids = [p.rsplit("/", 1)[1] for p in paths]
    assert [api.store.queue_position(i, "s") for i in ids] == [0, 1, 2]


def test_releasing_the_service_keeps_the_jobs_an_owner_hold_still_holds(idle):
    client, _ = idle
    post_holds(client, ACTION="HOLD")
    post_holds(client, ACTION="HOLD", OWNER="alice")
    alices, bobs = new_job(client, "alice", run=True), new_job(client, "bob", run=True)
    post_holds(client, ACTION="RELEASE")
    assert (phase(client, alices, "alice"), phase(client, bobs, "bob")) == ("HELD", "QUEUED")
    post_holds(client, ACTION="RELEASE", OWNER="alice")
    assert phase(client, alices, "alice") == "QUEUED"


def test_a_held_job_may_be_aborted_and_deleted(idle):
    client, _ = idle
    post_holds(client, ACTION="HOLD")
    aborted, deleted = new_job(client, "alice", run=True), new_job(client, "alice", run=True)
    client.post(f"{aborted}/phase", data={"PHASE": "ABORT"}, headers=basic("alice"))
    assert client.delete(deleted, headers=basic("alice")).status_code == 303
    post_holds(client, ACTION="RELEASE")
    assert phase(client, aborted, "alice") == "ABORTED"
    assert client.get(deleted, headers=basic("alice")).status_code == 404


def test_a_held_job_runs_to_completion_once_released(make_app):
    application = make_app({"s": SLEEP, "other": SLEEP})
    client = application.test_client()
    post_holds(client, ACTION="HOLD")
    path = new_job(client, "alice", run=True)
    # a job of a service not held, queued after it, runs: the executor has looked for
    # work since, and the held job must still wait
    r = client.post("/other", data={"DURATION": "0", "PHASE": "RUN"}, headers=basic("alice"))
    assert r.status_code == 303
    other = r.headers["Location"].replace("http://localhost", "")
    wait_for(lambda: phase(client, other, "alice") == "COMPLETED", timeout=30)
    assert phase(client, path, "alice") == "HELD"
    post_holds(client, ACTION="RELEASE")
    wait_for(lambda: phase(client, path, "alice") == "COMPLETED", timeout=30)


# -- races ------------------------------------------------------------------------------------

def test_runs_racing_a_release_never_leave_a_job_held_without_a_hold(idle):
    _, api = idle
    holds = Holds(api)
    for _ in range(5):
        holds.hold("s", None, "", ROOT)
        ids = [api.create("s", [], {}, Control(), ALICE) for _ in range(8)]
        race(*[(lambda i=i: api.run("s", i, ALICE)) for i in ids],
             lambda: holds.release("s", None, ROOT))
        assert {api.get("s", i, ALICE).phase for i in ids} == {Phase.QUEUED}


def test_creations_with_run_racing_a_release_never_leave_a_job_held_without_a_hold(idle):
    _, api = idle
    holds = Holds(api)
    for _ in range(5):
        holds.hold("s", None, "", ROOT)
        made: list[str] = []
        race(*[(lambda made=made: made.append(api.create("s", [], {}, Control(run=True),
                                                          ALICE)))
               for _ in range(8)],
             lambda: holds.release("s", None, ROOT))
        assert len(made) == 8
        assert {api.get("s", i, ALICE).phase for i in made} == {Phase.QUEUED}


def test_creations_with_run_racing_a_batch_run_under_a_hold_all_end_held(make_app):
    # Each takes the owner's HELD and PENDING counters: in the same order, or
    # PostgreSQL finds a deadlock and one of them fails.
    application = make_app(executor="none")
    client, api = application.test_client(), application.extensions["uws"]
    batches = application.extensions["uws_batches"]
    Holds(api).hold("s", "alice", "", ROOT)
    for _ in range(15):
        made = client.post("/s/batches", data=json.dumps([{}] * 8),
                           content_type="application/json", headers=basic("alice"))
        assert made.status_code == 303
        batch = made.headers["Location"].rsplit("/", 1)[1]
        created, _ = race(lambda: api.create("s", [], {}, Control(run=True), ALICE),
                          lambda batch=batch: batches.run("s", batch, ALICE))
        assert api.get("s", created, ALICE).phase is Phase.HELD
    phases = [r.phase for r in api.list("s", ListQuery(limit=1000), ALICE)]
    assert len(phases) == 15 * 9 and set(phases) == {Phase.HELD}


def test_runs_racing_a_new_hold_end_queued_or_held(idle):
    _, api = idle
    holds = Holds(api)
    ids = [api.create("s", [], {}, Control(), ALICE) for _ in range(12)]
    race(*[(lambda i=i: api.run("s", i, ALICE)) for i in ids],
         lambda: holds.hold("s", None, "", ROOT))
    assert {api.get("s", i, ALICE).phase for i in ids} <= {Phase.QUEUED, Phase.HELD}
    holds.release("s", None, ROOT)
    assert {api.get("s", i, ALICE).phase for i in ids} == {Phase.QUEUED}


# -- quota holds ------------------------------------------------------------------------------

CAPPED = {"s": {**SLEEP, "max_running_per_owner": 2}}


def test_a_job_past_the_running_cap_waits_held_saying_why(make_app):
    application = make_app(CAPPED, slots=4)
    client, api = application.test_client(), application.extensions["uws"]
    ids = [api.create("s", [("DURATION", "5")], {}, Control(run=True), ALICE) for _ in range(3)]
    wait_for(lambda: api.get("s", ids[2], ALICE).phase is Phase.HELD)
    doc = etree.fromstring(client.get(f"/s/{ids[2]}", headers=basic("alice")).data)
    assert "max_running_per_owner" in doc.find(f".//{INFO}").text
    for job_id in ids:
        api.abort("s", job_id, ALICE)


def test_run_on_a_quota_held_job_keeps_it_held(make_app):
    application = make_app(CAPPED, slots=4)
    api = application.extensions["uws"]
    ids = [api.create("s", [("DURATION", "5")], {}, Control(run=True), ALICE) for _ in range(3)]
    wait_for(lambda: api.get("s", ids[2], ALICE).phase is Phase.HELD)
    api.run("s", ids[2], ALICE)
    assert api.get("s", ids[2], ALICE).phase is Phase.HELD
    for job_id in ids:
        api.abort("s", job_id, ALICE)


def test_other_owners_run_while_one_waits_for_its_cap(make_app):
    application = make_app(CAPPED, slots=4)
    api = application.extensions["uws"]
    alices = [api.create("s", [("DURATION", "5")], {}, Control(run=True), ALICE)
              for _ in range(3)]
    wait_for(lambda: api.get("s", alices[2], ALICE).phase is Phase.HELD)
    bobs = api.create("s", [("DURATION", "0")], {}, Control(run=True), BOB)
    wait_for(lambda: api.get("s", bobs, BOB).phase is Phase.COMPLETED)
    for job_id in alices:
        api.abort("s", job_id, ALICE)


def test_many_jobs_of_one_owner_never_run_more_than_the_cap_and_all_complete(make_app):
    application = make_app(CAPPED, slots=4)
    api = application.extensions["uws"]
    ids = [api.create("s", [("DURATION", "0.2")], {}, Control(run=True), ALICE)
           for _ in range(12)]
    most, done = _most_executing(api, ids, timeout=60)
    assert done, "not every job completed"
    assert most <= 2
    assert {api.get("s", i, ALICE).phase for i in ids} == {Phase.COMPLETED}


def _most_executing(api, ids, timeout):
    """The most jobs of ``ids`` seen EXECUTING at once, and whether all finished."""
    most, deadline = 0, time.monotonic() + timeout
    while time.monotonic() < deadline:
        phases = list(api.store.phases_of(ids).values())
        most = max(most, phases.count(Phase.EXECUTING))
        if all(p is Phase.COMPLETED for p in phases):
            return most, True
        time.sleep(0.01)
    return most, False


def test_two_front_ends_sharing_the_database_keep_the_cap_and_complete_all(make_app):
    first, second = make_app(CAPPED, slots=3), make_app(CAPPED, slots=3)
    apis = [first.extensions["uws"], second.extensions["uws"]]
    ids: list[str] = []
    lock = threading.Lock()

    def submit(api):
        made = [api.create("s", [("DURATION", "0.2")], {}, Control(run=True), ALICE)
                for _ in range(6)]
        with lock:
            ids.extend(made)
    race(*[(lambda a=a: submit(a)) for a in apis])
    most, done = _most_executing(apis[0], ids, timeout=60)
    assert done and most <= 2


def test_celery_workers_keep_an_owner_to_its_cap_and_complete_every_job(tmp_path):
    _need(5432, "PostgreSQL")
    _need(5672, "RabbitMQ")
    cluster = Cluster(tmp_path, RABBITMQ)
    try:
        capped = cluster.config.read_text().replace(
            "max_execution_duration = 600", "max_execution_duration = 600\n"
            "anonymous_max_running = 2")
        cluster.config.write_text(capped)
        front = cluster.front_end()
        cluster.worker()
        cluster.worker()        # four slots in all, for one owner allowed two
        ids = [cluster_create(front, 0.3) for _ in range(10)]
        most, deadline = 0, time.monotonic() + 120
        while time.monotonic() < deadline:
            listing = requests.get(f"{front}/work?PHASE=EXECUTING", timeout=30).text
            most = max(most, listing.count("<uws:jobref"))
            finished = requests.get(f"{front}/work?PHASE=COMPLETED", timeout=30).text
            if finished.count("<uws:jobref") == len(ids):
                break
            time.sleep(0.02)
        assert {cluster_phase(front, i) for i in ids} == {"COMPLETED"}
        assert most <= 2
        assert max(runs_of(cluster).values()) == 1
    finally:
        cluster.stop()


@pytest.fixture
def capped_idle(make_app):
    """The api of an app that runs nothing, alice allowed two running jobs."""
    return make_app(CAPPED, executor="none").extensions["uws"]


def sweeps_of(api) -> Sweeps:
    return Sweeps(config=api.config, store=api.store, files=api.files, executor=api.executor)


def test_quota_held_jobs_of_an_owner_under_its_cap_are_queued_again_by_the_sweep(capped_idle):
    """As after the cap was raised: as many as it now allows."""
    api = capped_idle
    ids = [api.create("s", [], {}, Control(run=True), ALICE) for _ in range(3)]
    assert sorted(api.store.hold_for_quota("s", "alice", 0)) == sorted(ids)  # capped at none
    sweeps_of(api).release_held()
    assert [api.get("s", i, ALICE).phase for i in ids] == [Phase.QUEUED, Phase.QUEUED, Phase.HELD]


def test_a_claim_leaves_quota_held_jobs_to_the_sweep(capped_idle):
    """Claims stay short: no scan for held jobs on every job start."""
    api = capped_idle
    ids = [api.create("s", [], {}, Control(run=True), ALICE) for _ in range(2)]
    api.store.hold_for_quota("s", "alice", 0)
    assert api.store.claim_next("w", ["s"], 60, lambda service, owner: 2) is None
    assert {api.get("s", i, ALICE).phase for i in ids} == {Phase.HELD}


def test_the_scheduler_queues_again_held_jobs_of_owners_under_their_cap(tmp_path, db_url):
    cfg = make_config(tmp_path, db_url, services=CAPPED, executor="none", scheduler=True)
    application = create_app(cfg)
    try:
        api = application.extensions["uws"]
        ids = [api.create("s", [], {}, Control(run=True), ALICE) for _ in range(3)]
        api.store.hold_for_quota("s", "alice", 0)
        wait_for(lambda: [api.get("s", i, ALICE).phase for i in ids]
                 == [Phase.QUEUED, Phase.QUEUED, Phase.HELD])
    finally:
        shutdown(application)


# -- quota releases: exact, in order, and without deadlocks -------------------------------

def _running_and_held(api, running: int, held: int, endings: str = "2") -> list[str]:
    """alice's jobs, oldest first: ``running`` EXECUTING, then ``held`` quota-HELD;
    the ids end in the characters ``endings`` (cycled), which choose the counter rows
    of each job (the rows the transactions lock)."""
    base = timeutil.now() - dt.timedelta(minutes=1)
    ids = []
    for i in range(running + held):
        job_id = new_job_id()[:-1] + endings[i % len(endings)]
        job = Job(id=job_id, service="s", owner="alice", phase=Phase.QUEUED,
                  creation_time=base + dt.timedelta(seconds=i), execution_duration=0,
                  destruction=base + dt.timedelta(days=1))
        api.store.insert_job(job)
        ids.append(job.id)
    for job_id in ids[:running]:
        assert api.store.claim_next("w", ["s"], 60) == job_id
    assert len(api.store.hold_for_quota("s", "alice", running)) == held
    return ids


def _phases(api, ids) -> list[Phase]:
    return [api.get("s", i, ALICE).phase for i in ids]


def test_a_job_ending_releases_one_quota_held_job(capped_idle):
    api = capped_idle
    ids = _running_and_held(api, running=2, held=2)
    assert api.store.mark_completed(ids[0])
    assert _phases(api, ids) == [Phase.COMPLETED, Phase.EXECUTING, Phase.QUEUED, Phase.HELD]


def test_a_suspended_job_keeps_its_running_slot(capped_idle):
    """Else its RESUME would take its owner past the cap."""
    api = capped_idle
    ids = _running_and_held(api, running=2, held=1)
    assert api.store.mark_suspended(ids[0])
    assert _phases(api, ids) == [Phase.SUSPENDED, Phase.EXECUTING, Phase.HELD]


def test_a_job_not_yet_due_is_not_held_for_quota(capped_idle):
    api = capped_idle
    later = format_time(timeutil.now() + dt.timedelta(hours=1))
    waiting = api.create("s", [], {}, Control(run=True, start_after=later), ALICE)
    ids = _running_and_held(api, running=2, held=1)
    assert api.get("s", waiting, ALICE).phase is Phase.QUEUED
    assert _phases(api, ids)[2] is Phase.HELD


def test_a_freed_slot_goes_to_a_held_job_due_now_before_an_older_one_not_yet_due(capped_idle):
    api = capped_idle
    ids = _running_and_held(api, running=2, held=2)
    with api.store.engine.begin() as conn:      # held before it was given a start time
        conn.execute(sa.update(JOBS).where(JOBS.c.id == ids[2]).values(
            start_after=timeutil.now() + dt.timedelta(hours=1)))
    assert api.store.mark_completed(ids[0])
    assert _phases(api, ids)[2:] == [Phase.HELD, Phase.QUEUED]


def test_ends_and_retries_racing_release_held_jobs_without_deadlock(capped_idle, backend):
    """A retry holds its counters (EXECUTING and QUEUED of one slot) when an end in
    another slot frees a slot too: each must release a held job in that first slot,
    and neither may then wait for the other (PostgreSQL would detect a deadlock)."""
    api = capped_idle
    store = api.store
    first, second, *held = _running_and_held(api, running=2, held=2, endings="1222")
    paused = threading.Event()

    def pause(conn, change):
        """In the retry's transaction, its counters locked: let the end run into them."""
        if change.job_id == second and change.new == Phase.QUEUED.value:
            paused.set()
            if backend == "postgresql":
                me = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
                wait_for(lambda: _blocked_by(store, me))
    store.change_hooks.insert(0, pause)

    def end():
        assert paused.wait(10)
        return store.mark_completed(first)
    retried, ended = race(
        lambda: store.retry_later(second, ErrorSummary("transient", "x"), None, lambda n: 0),
        end)
    assert (retried, ended) == (True, True)
    assert _phases(api, held) == [Phase.QUEUED, Phase.QUEUED]


def _blocked_by(store, pid: int) -> bool:
    with store.engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM pg_stat_activity "
                                    "WHERE :pid = ANY(pg_blocking_pids(pid))"),
                            {"pid": pid}).scalar_one() > 0


def test_the_events_of_a_batch_job_held_released_and_retried_carry_its_batch(make_app):
    application = make_app(CAPPED, executor="none")
    client, api = application.test_client(), application.extensions["uws"]
    made = client.post("/s/batches", data=json.dumps([{}, {}]),
                       content_type="application/json", headers=basic("alice"))
    batch = made.headers["Location"].rsplit("/", 1)[1]
    with api.store.engine.connect() as conn:
        ids = list(conn.execute(sa.select(JOBS.c.id).where(JOBS.c.batch_id == batch)
                                .order_by(JOBS.c.id)).scalars())
    post_holds(client, ACTION="HOLD", OWNER="alice")
    for job_id in ids:
        api.run("s", job_id, ALICE)                                 # RUN into HELD
    post_holds(client, ACTION="RELEASE", OWNER="alice")            # HELD -> QUEUED
    running = api.store.claim_next("w", ["s"], 60)
    api.store.hold_for_quota("s", "alice", 1)                       # the other: quota-HELD
    api.store.retry_later(running, ErrorSummary("transient", "x"), None, lambda n: 0)
    with api.store.engine.connect() as conn:                        # the slot released
        logged = conn.execute(sa.select(EVENTS.c.old_phase, EVENTS.c.new_phase,
                                        EVENTS.c.batch_id)
                              .where(EVENTS.c.job_id.in_(ids))).all()
    moves = {(old, new) for old, new, _ in logged}
    assert {("PENDING", "HELD"), ("HELD", "QUEUED"), ("QUEUED", "HELD"),
            ("EXECUTING", "QUEUED")} <= moves
    assert {batch_id for _, _, batch_id in logged} == {batch}


def test_a_page_answering_bad_credentials_still_renders(idle):
    client, _ = idle
    bad = {"Authorization": "Basic " + base64.b64encode(b"root:wrong").decode(),
           "Accept": "text/html"}
    assert client.get("/s/holds", headers=bad).status_code == 401


def test_only_administrators_get_the_holds_link(idle):
    client, _ = idle
    def link(user):
        page = client.get("/s", headers={**basic(user), "Accept": "text/html"}).data
        return b'class="admin-link"' in page
    assert (link("root"), link("alice")) == (True, False)
