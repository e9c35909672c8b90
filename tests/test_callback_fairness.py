"""Callback delivery is fair: one owner's slow receiver does not hold up anyone else's
callbacks.  An owner, and a receiver, hold at most a share of a process's delivery
threads; owners take turns; a receiver that keeps failing rests as a whole.

The selection rule and the breaker are tested on the store directly (no HTTP, an
injected clock); the bound a user sees, with the app, a tarpit receiver and a real job.
"""
from __future__ import annotations

import dataclasses
import types

import pytest
import sqlalchemy as sa

from test_callbacks import Receiver, callback_config
from uws.auth import AuthConfig
from uws.config import settings as config_mod
from uws.domain.model import Job, new_job_id
from uws.domain.phases import Phase
from uws.domain.timeutil import add_seconds, now
from uws.execution import delivery
from uws.store import Store
from uws.store.callbacks import add_delivery
from uws.store.connections import writing
from uws.store.tables import callback as C
from uws.usecases import callbackturns
from uws.usecases.callbackturns import Breaker, Turns, receiver
from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, make_config
from uwshelp import ByteServer, job_id, wait_for

HEALTHY = "http://good.example:80/hook"


@pytest.fixture
def store(db_url):
    s = Store(db_url)
    yield s
    s.close()


def add(store, owner: str, url: str = HEALTHY, count: int = 1) -> None:
    """``count`` deliveries of ``owner`` to ``url``, due now, in that order."""
    for _ in range(count):
        with writing(store.engine) as conn:
            add_delivery(conn, "job", new_job_id(), "sleep", owner, url)


def claim_all(turns: Turns) -> list:
    rows = []
    while (row := turns.claim("me", 60)) is not None:
        rows.append(row)
    return rows


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- shares ------------------------------------------------------------------------------

def test_an_owner_holds_at_most_half_the_threads(store):
    for i in range(10):
        add(store, "bob", f"http://host{i}.example/hook")
    turns = Turns(store, threads=4)
    assert [r.owner for r in claim_all(turns)] == ["bob", "bob"]


def test_an_owner_at_its_share_gets_a_thread_again_when_an_attempt_ends(store):
    for i in range(3):
        add(store, "bob", f"http://host{i}.example/hook")
    turns = Turns(store, threads=4)
    first, _ = claim_all(turns)
    turns.done(first, answered=True)
    assert turns.claim("me", 60).owner == "bob"


def test_a_receiver_holds_at_most_half_the_threads_whoever_its_owners(store):
    for owner in ("ann", "bob", "cy", "dee"):
        add(store, owner, "http://tarpit.example/hook")
    add(store, "eve", HEALTHY)
    turns = Turns(store, threads=4)
    hosts = [receiver(r.url) for r in claim_all(turns)]
    assert sorted(hosts) == ["good.example:80", "tarpit.example:80", "tarpit.example:80"]


def test_a_receiver_is_its_host_and_port():
    assert receiver("http://Hooks.Example.org/a") == "hooks.example.org:80"
    assert receiver("https://hooks.example.org/b?c") == "hooks.example.org:443"
    assert receiver("http://127.0.0.1:8001/x") != receiver("http://127.0.0.1:8002/x")


def test_the_share_is_half_the_threads_and_at_least_one():
    assert [callbackturns.share_of(n) for n in (1, 2, 3, 4, 9)] == [1, 1, 1, 2, 4]


# -- turns -----------------------------------------------------------------------------

def test_owners_take_turns(store):
    for owner in ("cy", "ann", "bob"):
        for i in range(3):
            add(store, owner, f"http://{owner}{i}.example/hook")
    turns = Turns(store, threads=4, share=100)
    assert [r.owner for r in claim_all(turns)] == ["ann", "bob", "cy"] * 3


def test_another_owners_later_row_goes_before_an_owners_earlier_ones(store):
    for i in range(50):
        add(store, "bob", f"http://bob{i}.example/hook")
    add(store, "carol")
    turns = Turns(store, threads=4, share=100)
    assert [turns.claim("me", 60).owner for _ in range(3)] == ["bob", "carol", "bob"]


def test_an_owner_with_many_rows_due_first_leaves_room_for_others_among_the_candidates(store):
    add(store, "bob", "http://tarpit.example/hook", count=callbackturns.CANDIDATES + 10)
    add(store, "carol")
    rows = store.due_callbacks((), callbackturns.PER_OWNER, callbackturns.CANDIDATES,
                               callbackturns.HEAD)
    assert "carol" in {r.owner for r in rows}
    assert sum(r.owner == "bob" for r in rows) == callbackturns.PER_OWNER


def test_an_owner_at_its_share_is_left_out_of_the_due_rows_however_many_it_has(store):
    add(store, "bob", "http://tarpit.example/hook", count=50)
    add(store, "carol")
    assert [r.owner for r in store.due_callbacks(["bob"], 16, 256, head=10)] == ["carol"]


# -- the breaker ---------------------------------------------------------------------------

def test_breaker_opens_after_failures_in_a_row_and_closes_after_the_cooldown():
    clock = Clock()
    breaker = Breaker(failures=3, cooldown=10, clock=clock)
    breaker.failed("h:80")
    breaker.failed("h:80")
    assert not breaker.is_open("h:80")
    breaker.failed("h:80")
    assert breaker.is_open("h:80") and breaker.remaining("h:80") == 10
    clock.now += 9.9
    assert breaker.is_open("h:80")
    clock.now += 0.1
    assert not breaker.is_open("h:80")


def test_breaker_opens_again_at_the_first_failure_after_its_cooldown():
    clock = Clock()
    breaker = Breaker(failures=3, cooldown=10, clock=clock)
    for _ in range(3):
        breaker.failed("h:80")
    clock.now += 10
    breaker.failed("h:80")
    assert breaker.is_open("h:80")


def test_a_success_resets_the_failures_in_a_row():
    breaker = Breaker(failures=3, cooldown=10, clock=Clock())
    breaker.failed("h:80")
    breaker.failed("h:80")
    breaker.succeeded("h:80")
    breaker.failed("h:80")
    breaker.failed("h:80")
    assert not breaker.is_open("h:80")


@pytest.fixture
def outbox(tmp_path, db_url):
    """(store, a Deliverer whose threads are not started, its breaker's clock, a
    receiver answering 503 then 200, a function ending a job that names it)."""
    cfg = callback_config(tmp_path, db_url, scheduler=False, executor="none")
    store = Store(cfg.db_url)
    hook = Receiver([503, 200])
    clock = Clock()
    deliverer = delivery.Deliverer(types.SimpleNamespace(store=store, config=cfg),
                                   breaker=Breaker(failures=1, cooldown=30, clock=clock))

    def end_job(service: str = "sleep") -> str:
        job = Job(id=new_job_id(), service=service, owner="", phase=Phase.PENDING,
                  creation_time=now(), execution_duration=0, destruction=None,
                  callback_url=hook.url)
        store.insert_job(job)
        assert store.mark_aborted(job.id)
        return job.id
    yield store, deliverer, clock, hook, end_job
    hook.close()
    store.close()


def attempt(deliverer) -> tuple:
    """What one delivery thread does once: claim a row, attempt it; (row, answered)."""
    row = deliverer.turns.claim("me", 60)
    assert row is not None, "a row is due"
    answered = deliverer._attempt(row, "me")
    deliverer.turns.done(row, answered)
    return row, answered


def stored(store, row_id: int):
    with store.engine.connect() as conn:
        return conn.execute(sa.select(C).where(C.c.id == row_id)).one()


def test_a_resting_receivers_row_is_put_back_unattempted_until_the_rest_ends(outbox):
    store, deliverer, clock, hook, end_job = outbox
    end_job()
    end_job()
    first, answered = attempt(deliverer)
    assert answered is False        # 503: the breaker (1 failure) opens for 30 s
    second, answered = attempt(deliverer)
    assert (second.id != first.id, answered) == (True, None)
    row = stored(store, second.id)
    assert (row.state, row.attempts, row.lease_owner) == ("pending", 0, None)
    # due when the rest ends: 30 s from the attempt, less what a loaded machine took since
    assert 20 < (row.next_attempt - now()).total_seconds() <= 30
    assert len(hook.requests) == 1


def test_a_receiver_is_attempted_again_when_its_rest_ends(outbox):
    store, deliverer, clock, hook, end_job = outbox
    end_job()
    end_job()
    first, _ = attempt(deliverer)
    second, _ = attempt(deliverer)
    clock.now += 30
    with writing(store.engine) as conn:     # as if those 30 s had passed
        conn.execute(C.update().where(C.c.id == second.id).values(next_attempt=now()))
        # the first row's own retry is not this test's: on a loaded machine it came due
        # (a few seconds after its 503) before the third attempt, and went first
        conn.execute(C.update().where(C.c.id == first.id)
                     .values(next_attempt=add_seconds(now(), 3600)))
    row, answered = attempt(deliverer)
    assert (row.id, answered, len(hook.requests)) == (second.id, True, 2)
    assert stored(store, second.id).state == "delivered"
    assert deliverer.turns.resting(hook.url) == 0


def test_a_resting_receivers_row_fails_when_its_retry_time_would_run_out_meanwhile(outbox):
    store, deliverer, clock, hook, end_job = outbox
    end_job("brief")        # retried for 3 s, less than the 30 s rest
    end_job("brief")
    attempt(deliverer)
    second, _ = attempt(deliverer)
    row = stored(store, second.id)
    assert (row.state, row.attempts) == ("failed", 0)
    assert "receiver kept failing" in row.last_error
    assert len(hook.requests) == 1


@pytest.mark.parametrize("status, rests", [(503, True), (404, False), (200, False)])
def test_a_receiver_rests_after_a_5xx_but_not_after_other_answers(tmp_path, db_url, status,
                                                                  rests):
    cfg = callback_config(tmp_path, db_url, scheduler=False, executor="none")
    store = Store(cfg.db_url)
    hook = Receiver([status])
    try:
        breaker = Breaker(failures=1, cooldown=30, clock=Clock())
        deliverer = delivery.Deliverer(types.SimpleNamespace(store=store, config=cfg),
                                       breaker=breaker)
        job = Job(id=new_job_id(), service="sleep", owner="", phase=Phase.PENDING,
                  creation_time=now(), execution_duration=0, destruction=None,
                  callback_url=hook.url)
        store.insert_job(job)
        assert store.mark_aborted(job.id)
        row = deliverer.turns.claim("me", 60)
        deliverer.turns.done(row, deliverer.deliver(row, "me"))
        assert breaker.is_open(receiver(hook.url)) is rests
    finally:
        hook.close()
        store.close()


# -- configuration ---------------------------------------------------------------------------

def test_callback_threads_is_a_server_setting():
    cfg = config_mod.from_dict({"server": {"callback_threads": 8}}, env={})
    assert cfg.callback_threads == 8
    assert config_mod.from_dict({}, env={}).callback_threads == 4


@pytest.mark.parametrize("value", [0, -1, 257, "4", 2.5])
def test_a_bad_callback_threads_stops_the_start(value):
    with pytest.raises(config_mod.ConfigError, match=r"server\.callback_threads"):
        config_mod.from_dict({"server": {"callback_threads": value}}, env={})


# -- what an owner sees ---------------------------------------------------------------------

@pytest.fixture
def two_owners_app(tmp_path, db_url, monkeypatch):
    monkeypatch.setattr(delivery, "POLL", 0.05)
    cfg = make_config(tmp_path, db_url)
    cfg.services = {"sleep": dataclasses.replace(
        cfg.services["sleep"], callback_hosts=("127.0.0.1",), callback_timeout=5.0)}
    cfg.auth = AuthConfig(modes=("header",), trusted_proxies=frozenset({"127.0.0.1"}))
    app = create_app(cfg)
    app.test_client_class = ValidatingClient
    yield app
    shutdown(app)


@pytest.fixture
def tarpit():
    """Reads a request, then answers one byte a second: each attempt holds a delivery
    thread for twice callback_timeout (10 s here)."""
    server = ByteServer("head", interval=1.0)
    yield server
    server.close()


def test_an_owners_tarpit_receiver_delays_another_owners_callback_by_at_most_a_second(
        two_owners_app, tarpit):
    store = two_owners_app.extensions["uws"].store
    healthy = Receiver()
    try:
        for _ in range(100):
            job = Job(id=new_job_id(), service="sleep", owner="bob", phase=Phase.PENDING,
                      creation_time=now(), execution_duration=0, destruction=None,
                      callback_url=f"{tarpit.base}/hook")
            store.insert_job(job)
            assert store.mark_aborted(job.id)
        wait_for(lambda: len(tarpit.requests) >= 2)     # bob's attempts hang
        client = two_owners_app.test_client()
        r = client.post("/sleep", data={"CALLBACK": healthy.url, "PHASE": "RUN",
                                        "DURATION": "0"}, headers={"X-Remote-User": "alice"})
        assert r.status_code == 303, r.data
        alices = job_id(r.headers["Location"])
        wait_for(lambda: healthy.arrivals, timeout=5)
        delay = (healthy.arrivals[0] - store.get_job(alices, "sleep", "alice").end_time)
        assert delay.total_seconds() <= 1.0, f"delivered {delay} after the job ended"
    finally:
        healthy.close()
