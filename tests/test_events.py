"""Job events (GET /{service}/events): Server-Sent Events with Last-Event-ID resume,
JSON pages for polling (after, since, latest), owner isolation, bounds, pruning,
and delivery across front ends sharing a database."""
from __future__ import annotations

import http.client
import json
import queue
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest
import requests
import sqlalchemy as sa

from uws.auth import AuthConfig
from uws.store.changes import Change
from uws.store.events import record
from uws.store.tables import event as E
from uws.usecases import sweeps as sweeps_mod
from uws.usecases.sweeps import Sweeps
from uws.web.app import create_app, shutdown

from conftest import LiveServer, ValidatingClient, make_config
from uwshelp import wait_for

TIMEOUT = 10.0      # seconds any expected event may take, at most
STREAM = {"Accept": "text/event-stream"}


def user(name: str) -> dict:
    """Headers of a request by ``name`` (through a trusted proxy's header)."""
    return {"X-Remote-User": name} if name else {}


def with_users(cfg):
    cfg.auth = AuthConfig(modes=("header",), admins=frozenset({"root"}),
                          trusted_proxies=frozenset({"127.0.0.1"}))
    return cfg


@pytest.fixture
def served(tmp_path, db_url, request):
    """Make apps on the test's database (keyword settings as make_config's), each
    served over HTTP: yields a factory of (app, base URL)."""
    made = []

    def make(**settings):
        settings = {"executor": "none", "scheduler": False, **settings}
        app = create_app(with_users(make_config(tmp_path, db_url, **settings)))
        app.test_client_class = ValidatingClient
        server = LiveServer(app).__enter__()
        made.append((app, server))
        return app, server.url

    yield make
    for app, server in made:
        app.extensions["uws_events"].stop()     # streams end before the server stops
        server.__exit__(None, None, None)
        shutdown(app)


class Reader:
    """An SSE client over real HTTP: a thread parses the stream into ("event", dict),
    ("comment", text), ("retry", text) and ("end", None) items on a queue."""

    def __init__(self, url: str, headers: dict | None = None):
        parts = urlsplit(url)
        self._conn = http.client.HTTPConnection(parts.netloc, timeout=TIMEOUT)
        self._conn.connect()
        self._sock = self._conn.sock    # the connection forgets it once a response is read
        self._conn.request("GET", f"{parts.path}?{parts.query}",
                           headers={**STREAM, **(headers or {})})
        self.response = self._conn.getresponse()
        self.status = self.response.status
        self.items: queue.Queue = queue.Queue()
        if self.status == 200:
            threading.Thread(target=self._read, daemon=True).start()
            assert self.next_item()[0] == "retry", "the stream did not start with retry:"

    def _read(self):
        fields: dict = {}
        try:
            for line in iter(self.response.readline, b""):
                raw = line.decode().rstrip("\r\n")
                if raw == "":
                    if fields:
                        self.items.put(("event", fields))
                    fields = {}
                elif raw.startswith(":"):
                    self.items.put(("comment", raw[1:].strip()))
                else:
                    name, _, value = raw.partition(":")
                    if name == "retry":
                        self.items.put(("retry", value.strip()))
                    else:
                        fields[name] = value.lstrip(" ")
        except (OSError, ValueError, http.client.HTTPException):   # closed under us
            pass
        self.items.put(("end", None))

    def next_item(self, timeout: float = TIMEOUT):
        try:
            return self.items.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"nothing arrived on the stream within {timeout} s")

    def events(self, n: int) -> list[dict]:
        """The next ``n`` events (their data), skipping heartbeats."""
        out = []
        while len(out) < n:
            kind, item = self.next_item()
            assert kind != "end", f"the stream ended after {out}"
            if kind == "event":
                data = json.loads(item["data"])
                phase_change = data["oldPhase"] != data["newPhase"]
                assert item["event"] == ("phase" if phase_change else "progress")
                assert str(data["id"]) == item["id"]
                out.append(data)
        return out

    def events_until_heartbeat(self) -> list[dict]:
        """Every event before the next heartbeat comment."""
        out = []
        while True:
            kind, item = self.next_item()
            assert kind != "end", f"the stream ended after {out}"
            if kind == "comment":
                return out
            if kind == "event":
                out.append(json.loads(item["data"]))

    def ended(self, timeout: float = TIMEOUT) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.items.get(timeout=0.1)[0] == "end":
                    return True
            except queue.Empty:
                pass
        return False

    def close(self):
        """Hang up, as a client going away does."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass        # the server hung up first
        self._sock.close()
        self._conn.close()


def post_job(url: str, owner: str = "alice", **params) -> str:
    r = requests.post(f"{url}/sleep", data={"DURATION": "0", **params}, headers=user(owner),
                      allow_redirects=False, timeout=TIMEOUT)
    assert r.status_code == 303, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def page(client, query: str = "", owner: str = "alice", status: int = 200) -> dict:
    """A polled page, once no committed event is held back behind a transaction still
    in flight (on PostgreSQL another test's may be: "pending" says so)."""
    answers = []

    def settled() -> bool:
        r = client.get(f"/sleep/events{query}", headers=user(owner))
        answers.append(r)
        return r.status_code != 200 or not r.get_json()["pending"]

    assert wait_for(settled, timeout=TIMEOUT), "events stayed pending"
    assert answers[-1].status_code == status, answers[-1].data
    return answers[-1].get_json() if status == 200 else {}


def client_of(app):
    return app.test_client()


def phases_of(events: list[dict], job_id: str) -> list[tuple]:
    return [(e["oldPhase"], e["newPhase"]) for e in events if e["jobId"] == job_id]


# -- streams -------------------------------------------------------------------------------

def test_a_stream_sees_a_run_job_created_queued_executing_completed_in_order(served):
    app, url = served(executor="local")
    stream = Reader(f"{url}/sleep/events", user("alice"))
    job = post_job(url, PHASE="RUN")
    seen = stream.events(4)
    while seen[-1]["newPhase"] != "COMPLETED":      # after the job's progress reports
        seen += stream.events(1)
    changes = [(old, new) for old, new in phases_of(seen, job) if old != new]
    assert changes == [(None, "PENDING"), ("PENDING", "QUEUED"), ("QUEUED", "EXECUTING"),
                       ("EXECUTING", "COMPLETED")]
    assert [e["id"] for e in seen] == sorted(e["id"] for e in seen)
    stream.close()


def test_an_event_names_the_job_its_owner_service_phases_and_time(served):
    app, url = served()
    stream = Reader(f"{url}/sleep/events", user("alice"))
    job = post_job(url)
    (event,) = stream.events(1)
    assert event["jobId"] == job and event["ownerId"] == "alice"
    assert event["service"] == "sleep" and event["batchId"] is None
    assert event["oldPhase"] is None and event["newPhase"] == "PENDING"
    assert event["time"].endswith("Z") and event["progress"] is None
    assert stream.response.getheader("Content-Type").startswith("text/event-stream")
    stream.close()


def test_last_event_id_resumes_with_exactly_the_missed_events_once(served):
    app, url = served()
    app.extensions["uws_events"].heartbeat = 0.3
    first, missed = post_job(url), [post_job(url), post_job(url)]
    ids = {e["jobId"]: e["id"] for e in page(client_of(app))["events"]}
    stream = Reader(f"{url}/sleep/events", {**user("alice"), "Last-Event-ID": str(ids[first])})
    assert [e["jobId"] for e in stream.events(2)] == missed
    live = post_job(url)
    assert [e["jobId"] for e in stream.events(1)] == [live]
    assert stream.events_until_heartbeat() == []       # nothing twice
    stream.close()


def test_the_last_event_id_query_parameter_resumes_like_the_header(served):
    app, url = served()
    app.extensions["uws_events"].heartbeat = 0.3
    first, second = post_job(url), post_job(url)
    ids = {e["jobId"]: e["id"] for e in page(client_of(app))["events"]}
    stream = Reader(f"{url}/sleep/events?lastEventId={ids[first]}", user("alice"))
    assert [e["jobId"] for e in stream.events(1)] == [second]
    assert stream.events_until_heartbeat() == []
    stream.close()


def test_a_bad_last_event_id_is_refused(served):
    app, url = served()
    r = requests.get(f"{url}/sleep/events", headers={**STREAM, **user("alice"),
                                                      "Last-Event-ID": "x1"}, timeout=TIMEOUT)
    assert r.status_code == 400


def test_an_idle_stream_sends_heartbeat_comments(served):
    app, url = served()
    app.extensions["uws_events"].heartbeat = 0.2
    stream = Reader(f"{url}/sleep/events", user("alice"))
    assert stream.next_item() == ("comment", "heartbeat")
    stream.close()


def test_a_stream_ends_after_event_stream_seconds(served):
    app, url = served(event_stream_seconds=1)
    stream = Reader(f"{url}/sleep/events", user("alice"))
    assert stream.ended(timeout=5)


def test_shutdown_ends_open_streams_promptly(served):
    app, url = served()
    stream = Reader(f"{url}/sleep/events", user("alice"))
    app.extensions["uws_events"].stop()
    assert stream.ended(timeout=3)


def _executing(app, url: str) -> str:
    """A job moved to EXECUTING as a worker would (the app runs none)."""
    job = post_job(url, PHASE="RUN")
    assert app.extensions["uws"].store.claim_next("test:1", ["sleep"], 30) == job
    return job


def test_progress_reports_are_events_at_most_one_per_job_every_few_seconds(served):
    app, url = served()
    app.extensions["uws_events"].heartbeat = 0.3
    stream = Reader(f"{url}/sleep/events", user("alice"))
    job = _executing(app, url)
    store = app.extensions["uws"].store
    store.set_progress(job, 10.0, "a tenth")
    store.set_progress(job, 20.0, "a fifth")      # too soon after the first: not logged
    seen = stream.events(4)
    assert seen[-1]["jobId"] == job and seen[-1]["progress"] == 10.0
    assert (seen[-1]["oldPhase"], seen[-1]["newPhase"]) == ("EXECUTING", "EXECUTING")
    assert stream.events_until_heartbeat() == []
    stream.close()


def test_a_progress_event_does_not_end_a_wait(served):
    app, url = served()
    job = _executing(app, url)
    answer: list = []
    waiter = threading.Thread(target=lambda: answer.append(requests.get(
        f"{url}/sleep/{job}?WAIT=2", headers=user("alice"), timeout=TIMEOUT)))
    started = time.monotonic()
    waiter.start()
    wait_for(lambda: app.extensions["uws"].watch.waiting == 1, timeout=5)
    app.extensions["uws"].store.set_progress(job, 50.0, "half")
    waiter.join(TIMEOUT)
    assert answer[0].status_code == 200
    assert time.monotonic() - started >= 1.9      # the whole WAIT, the phase unchanged


# -- bounds ----------------------------------------------------------------------------------

def test_streams_past_the_owners_bound_answer_503_with_retry_after(served):
    app, url = served(event_streams_per_owner=1)
    first = Reader(f"{url}/sleep/events", user("alice"))
    second = Reader(f"{url}/sleep/events", user("alice"))
    assert second.status == 503
    assert int(second.response.getheader("Retry-After")) >= 1
    other = Reader(f"{url}/sleep/events", user("bob"))
    assert other.status == 200
    first.close()
    other.close()


def test_streams_past_the_servers_bound_answer_503(served):
    app, url = served(event_streams=1)
    first = Reader(f"{url}/sleep/events", user("alice"))
    refused = Reader(f"{url}/sleep/events", user("bob"))
    assert refused.status == 503 and refused.response.getheader("Retry-After")
    first.close()


def test_a_closed_stream_frees_its_place(served):
    app, url = served(event_streams_per_owner=1)
    feed = app.extensions["uws_events"]
    feed.heartbeat = 0.2        # the server notices a gone client at its next write
    Reader(f"{url}/sleep/events", user("alice")).close()
    assert wait_for(lambda: feed.open_streams == 0, timeout=5)
    again = Reader(f"{url}/sleep/events", user("alice"))
    assert again.status == 200
    again.close()


# -- polling ---------------------------------------------------------------------------------

def test_polling_answers_the_events_in_order_as_json(served):
    app, url = served()
    jobs = [post_job(url), post_job(url)]
    doc = page(client_of(app))
    assert [e["jobId"] for e in doc["events"]] == jobs
    assert doc["lastEventId"] == doc["events"][-1]["id"] and doc["next"] is None


def test_after_answers_the_events_after_that_one(served):
    app, url = served()
    post_job(url)
    second = post_job(url)
    events = page(client_of(app))["events"]
    doc = page(client_of(app), f"?after={events[0]['id']}")
    assert [e["jobId"] for e in doc["events"]] == [second]


@pytest.mark.parametrize("name", ["lastEventId", "Last-Event-ID"])
def test_a_poll_resumes_after_the_last_event_id_as_a_stream_does(served, name):
    app, url = served()
    post_job(url)
    second = post_job(url)
    first = str(page(client_of(app))["events"][0]["id"])
    if name == "lastEventId":       # the query, for clients that cannot set headers
        r = client_of(app).get(f"/sleep/events?lastEventId={first}", headers=user("alice"))
    else:
        r = client_of(app).get("/sleep/events", headers={**user("alice"), name: first})
    assert [e["jobId"] for e in r.get_json()["events"]] == [second]


def test_a_poll_follows_its_next_page_whatever_last_event_id_it_sends(served):
    """A poller sending Last-Event-ID with each request must not get one page forever."""
    app, url = served()
    jobs = [post_job(url) for _ in range(3)]
    doc = page(client_of(app), "?limit=1")
    stale = {**user("alice"), "Last-Event-ID": str(doc["lastEventId"])}   # never updated
    seen = [e["jobId"] for e in doc["events"]]
    for _ in range(2):
        doc = client_of(app).get(doc["next"], headers=stale).get_json()
        seen += [e["jobId"] for e in doc["events"]]
    assert seen == jobs


@pytest.mark.parametrize("query", ["?lastEventId=abc", "?lastEventId=-5", "?after=%EF%BC%91"])
def test_a_poll_with_no_event_id_answers_400(served, query):
    app, _ = served()
    r = client_of(app).get(f"/sleep/events{query}", headers=user("alice"))
    assert r.status_code == 400


def test_pages_are_bounded_and_link_to_the_next(served):
    app, url = served()
    jobs = [post_job(url) for _ in range(3)]
    client = client_of(app)
    doc = page(client, "?limit=2")
    assert [e["jobId"] for e in doc["events"]] == jobs[:2]
    r = client.get("/sleep/events?limit=2", headers=user("alice"))
    assert r.headers["Link"] == f'<{doc["next"]}>; rel="next"'
    parts = urlsplit(doc["next"])
    rest = page(client, f"?{parts.query}")
    assert [e["jobId"] for e in rest["events"]] == jobs[2:] and rest["next"] is None


@pytest.mark.parametrize("query", ["?limit=0", "?limit=1001", "?limit=x", "?after=-1",
                                   "?after=99999999999999999999", "?since=yesterday",
                                   "?latest&after=1"])
def test_bad_polling_parameters_answer_400(served, query):
    app, url = served()
    page(client_of(app), query, status=400)


@pytest.mark.parametrize("owner", ["a%00b", "a%1Bb", "%FF"])
def test_an_owner_with_a_control_character_or_not_utf8_answers_400(served, owner):
    """PostgreSQL cannot store or compare NUL: an administrator's ?owner=a%00b was a 500."""
    app, _ = served()
    r = client_of(app).get(f"/sleep/events?owner={owner}", headers=user("root"))
    assert r.status_code == 400
    assert r.get_data(as_text=True).startswith("owner: ")


def test_since_answers_the_events_from_that_time(served):
    app, url = served()
    post_job(url)
    later = post_job(url)
    events = page(client_of(app))["events"]
    doc = page(client_of(app), f"?since={events[1]['time']}")
    assert [e["jobId"] for e in doc["events"]] == [later]


def test_since_accepts_reduced_precision(served):
    app, url = served()
    job = post_job(url)
    assert [e["jobId"] for e in page(client_of(app), "?since=2000")["events"]] == [job]
    assert page(client_of(app), "?since=2999-01")["events"] == []


def test_a_page_since_a_time_past_every_event_goes_on_from_the_last_event(served):
    """lastEventId is an integer on every page: with no event since that time, the id
    a reader goes on from, as ``latest`` gives it."""
    app, url = served()
    post_job(url)
    newest = page(client_of(app), "?latest")["lastEventId"]
    doc = page(client_of(app), "?since=9999-12-31")
    assert doc["events"] == [] and doc["lastEventId"] == newest
    assert isinstance(newest, int) and newest > 0


def test_a_page_with_no_events_at_all_goes_on_from_0(served):
    app, _ = served()
    for query in ("", "?since=9999-12-31"):
        doc = page(client_of(app), query)
        assert doc["events"] == [] and doc["lastEventId"] == 0


def test_a_page_since_a_time_past_every_event_misses_none_that_follow(served):
    app, url = served()
    first = post_job(url)
    last = page(client_of(app), "?since=9999-12-31")["lastEventId"]
    later = post_job(url)
    # lastEventId may lie before the first job's event: on PostgreSQL another test's
    # transaction still in flight holds back what a reader may be given (CI saw it)
    ids = [e["jobId"] for e in page(client_of(app), f"?after={last}")["events"]]
    assert ids[-1:] == [later] and set(ids) <= {first, later}


def test_latest_answers_the_newest_event_of_each_job(served):
    app, url = served()
    ran, waiting = post_job(url), post_job(url)
    r = requests.post(f"{url}/sleep/{ran}/phase", data={"PHASE": "RUN"}, headers=user("alice"),
                      allow_redirects=False, timeout=TIMEOUT)
    assert r.status_code == 303
    doc = page(client_of(app), "?latest")
    assert [(e["jobId"], e["newPhase"]) for e in doc["events"]] == [
        (waiting, "PENDING"), (ran, "QUEUED")]
    assert doc["lastEventId"] == doc["events"][-1]["id"]


def test_a_deletion_is_an_event_with_no_new_phase(served):
    app, url = served()
    job = post_job(url)
    r = requests.delete(f"{url}/sleep/{job}", headers=user("alice"), allow_redirects=False,
                        timeout=TIMEOUT)
    assert r.status_code == 303
    assert phases_of(page(client_of(app))["events"], job) == [(None, "PENDING"),
                                                             ("PENDING", None)]


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_events_are_read_only(served, method):
    app, url = served()
    r = getattr(client_of(app), method)("/sleep/events", headers=user("alice"))
    assert r.status_code == 405 and "GET" in r.headers["Allow"]


def test_an_unknown_service_has_no_events(served):
    app, url = served()
    r = client_of(app).get("/nosuch/events", headers=user("alice"))
    assert r.status_code == 404


# -- isolation -------------------------------------------------------------------------------

def test_an_owner_never_polls_another_owners_events(served):
    app, url = served()
    post_job(url, "alice")
    mine = post_job(url, "bob")
    assert [e["jobId"] for e in page(client_of(app), owner="bob")["events"]] == [mine]
    assert [e["jobId"] for e in page(client_of(app), "?latest", owner="bob")["events"]] == [mine]


def test_an_owner_never_streams_another_owners_events(served):
    app, url = served()
    stream = Reader(f"{url}/sleep/events", user("bob"))
    post_job(url, "alice")
    mine = post_job(url, "bob")
    assert [e["jobId"] for e in stream.events(1)] == [mine]
    stream.close()


def test_an_owner_may_not_ask_for_another_owners_events(served):
    app, url = served()
    page(client_of(app), "?owner=alice", owner="bob", status=403)


def test_an_administrator_follows_every_owner_or_one(served):
    app, url = served()
    alices, bobs = post_job(url, "alice"), post_job(url, "bob")
    assert [e["jobId"] for e in page(client_of(app), owner="root")["events"]] == [alices, bobs]
    only = page(client_of(app), "?owner=bob", owner="root")["events"]
    assert [e["jobId"] for e in only] == [bobs]
    stream = Reader(f"{url}/sleep/events?owner=alice", user("root"))
    post_job(url, "bob")
    later = post_job(url, "alice")
    assert [e["jobId"] for e in stream.events(1)] == [later]
    stream.close()


def test_anonymous_callers_see_anonymous_jobs_only(served):
    app, url = served()
    post_job(url, "alice")
    r = requests.post(f"{url}/sleep", data={"DURATION": "0"}, allow_redirects=False,
                      timeout=TIMEOUT)
    anonymous = r.headers["Location"].rsplit("/", 1)[1]
    doc = page(client_of(app), owner="")
    assert [e["jobId"] for e in doc["events"]] == [anonymous]
    assert doc["events"][0]["ownerId"] is None


def test_a_service_closed_to_anonymous_callers_answers_401(tmp_path, db_url):
    services = {"private": {"runner": "uws.demo:sleep", "anonymous": False}}
    app = create_app(with_users(make_config(tmp_path, db_url, services, executor="none",
                                            scheduler=False)))
    try:
        assert app.test_client().get("/private/events").status_code == 401
        assert app.test_client().get("/private/events", headers=user("alice")).status_code == 200
    finally:
        shutdown(app)


# -- ordering with concurrent transactions ----------------------------------------------------

@pytest.mark.parametrize("backend", ["postgresql"])
def test_an_event_committed_after_a_later_one_is_still_delivered(served):
    """Ids are taken in one order and committed in another: the event with the lower
    id is not skipped by readers that already saw the higher one."""
    app, url = served()
    app.extensions["uws_events"].heartbeat = 0.3
    store = app.extensions["uws"].store
    stream = Reader(f"{url}/sleep/events", user("alice"))
    with store.engine.connect() as held:
        tx = held.begin()
        record(held, Change("heldjob", "sleep", "alice", None, "PENDING"))   # the lower id
        later = post_job(url)
        assert stream.events_until_heartbeat() == []     # held back while the first is open
        assert client_of(app).get("/sleep/events", headers=user("alice")).get_json() == {
            "events": [], "lastEventId": 0, "next": None, "pending": True}
        tx.commit()
    seen = stream.events(2)
    assert [e["jobId"] for e in seen] == ["heldjob", later]
    assert seen[0]["id"] < seen[1]["id"]
    resumed = page(client_of(app), f"?after={seen[0]['id']}")["events"]
    assert [e["jobId"] for e in resumed] == [later]
    stream.close()


def test_a_rolled_back_change_leaves_no_event(served):
    app, url = served()
    store = app.extensions["uws"].store
    with store.engine.connect() as conn:
        tx = conn.begin()
        record(conn, Change("gonejob", "sleep", "alice", None, "PENDING"))
        tx.rollback()
    post_job(url)
    assert "gonejob" not in [e["jobId"] for e in page(client_of(app))["events"]]


# -- across front ends -----------------------------------------------------------------------

def test_an_event_through_one_front_end_reaches_a_stream_on_another(served):
    first, first_url = served()
    second, second_url = served()
    stream = Reader(f"{second_url}/sleep/events", user("alice"))
    started = time.monotonic()
    job = post_job(first_url)
    assert [e["jobId"] for e in stream.events(1)] == [job]
    assert time.monotonic() - started < 3
    stream.close()


# -- pruning ---------------------------------------------------------------------------------

def _age(store, job_id: str, days: float) -> None:
    with store.engine.begin() as conn:
        conn.execute(E.update().where(E.c.job_id == job_id)
                     .values(time=E.c.time - sa.text(f"INTERVAL '{int(days)} days'")
                             if store.engine.dialect.name == "postgresql"
                             else sa.func.datetime(E.c.time, f"-{int(days)} days")))


def _sweeps(app) -> Sweeps:
    api = app.extensions["uws"]
    return Sweeps(config=api.config, store=api.store, files=api.files, executor=api.executor)


def test_events_older_than_the_retention_are_pruned(served):
    app, url = served()
    old, recent = post_job(url), post_job(url)
    _age(app.extensions["uws"].store, old, 8)
    assert _sweeps(app).prune_events() == 1
    assert [e["jobId"] for e in page(client_of(app))["events"]] == [recent]
    assert _sweeps(app).prune_events() == 0


def test_pruning_goes_in_chunks_until_done(served, monkeypatch):
    app, url = served()
    monkeypatch.setattr(sweeps_mod, "PRUNE_CHUNK", 2)
    jobs = [post_job(url) for _ in range(5)]
    for job in jobs:
        _age(app.extensions["uws"].store, job, 8)
    assert _sweeps(app).prune_events() == 5
    assert page(client_of(app))["events"] == []


def test_a_resume_after_a_pruned_event_goes_on_after_it(served):
    app, url = served()
    old, recent = post_job(url), post_job(url)
    gone = page(client_of(app))["events"][0]["id"]
    _age(app.extensions["uws"].store, old, 8)
    _sweeps(app).prune_events()
    assert [e["jobId"] for e in page(client_of(app), f"?after={gone}")["events"]] == [recent]


def test_the_scheduler_prunes_events(served):
    app, url = served(scheduler=True)
    assert app.extensions["uws_scheduler"].get_job("events") is not None

