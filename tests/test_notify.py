"""A WAIT wakes on a phase change made by any process: on PostgreSQL through
LISTEN/NOTIFY (uws.store.notify), with no polling while the listening
connection is up, and through the poller while it is down.

The PhaseWatch tests need no database; the others run on PostgreSQL only
(SQLite has no such channel: its WAITs poll, see test_wait.py).
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import psycopg
import pytest
import requests
import sqlalchemy as sa

from uws.domain import timing
from uws.domain.phases import Phase
from uws.store.notify import CHANNEL
from uws.usecases.waiting import PhaseWatch
from uws.web.app import create_app, shutdown

import uwshelp
from conftest import POSTGRES_URL, LiveServer, assert_valid_uws, make_config
from uwshelp import job_id

UWS = "{http://www.ivoa.net/xml/UWS/v1.0}"
HTTP_TIMEOUT = 60
# seconds: a WAIT wakes this soon after another process's commit.  A bound, not the
# figure (about 20 ms here; bench/waiters.py measures wakes): that the wake is pushed,
# not polled, the tests show by the statements sent meanwhile.  0.1 s failed on a
# loaded CI machine (0.38 s) with no statement sent.
WAKE = 1.0


# -- helpers ------------------------------------------------------------------------------

def until(predicate, timeout: float) -> bool:
    """Poll ``predicate`` every 10 ms for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Waiter(uwshelp.Waiter):
    """A blocking GET, and the phase it answered."""

    def phase(self) -> str:
        assert self.error is None and self.response is not None, self.error
        assert self.response.status_code == 200
        return assert_valid_uws(self.response.content).find(UWS + "phase").text


class Statements:
    """Every statement an engine sends, with when it was sent."""

    def __init__(self, engine: sa.Engine):
        self.engine = engine
        self.sent: list[tuple[float, str]] = []

    def _record(self, conn, cursor, statement, *args):
        self.sent.append((time.monotonic(), statement))

    def __enter__(self):
        sa.event.listen(self.engine, "before_cursor_execute", self._record)
        return self

    def __exit__(self, *exc):
        sa.event.remove(self.engine, "before_cursor_execute", self._record)

    def between(self, start: float, end: float) -> list[str]:
        return [s for t, s in self.sent if start <= t <= end]


class Node:
    """One front end (its own store, PhaseWatch and listener) served over HTTP."""

    def __init__(self, config):
        self.app = create_app(config)
        self.api = self.app.extensions["uws"]
        self.server = LiveServer(self.app).__enter__()
        self.url = self.server.url

    @property
    def listener(self):
        return self.api.store.listener

    def create(self) -> tuple[str, str]:
        r = requests.post(f"{self.url}/sleep", data={"DURATION": "30"},
                          allow_redirects=False, timeout=HTTP_TIMEOUT)
        assert r.status_code == 303, r.text
        return r.headers["Location"], job_id(r.headers["Location"])

    def park(self, url: str, seconds: int = 10) -> Waiter:
        """A WAIT on the job, returned once it is parked in the PhaseWatch."""
        parked = self.api.watch.waiting
        waiter = Waiter(f"{url}?WAIT={seconds}")
        waiter.start()
        assert until(lambda: self.api.watch.waiting > parked, 5), "the WAIT never parked"
        return waiter

    def close(self):
        self.server.__exit__(None, None, None)
        shutdown(self.app)


#: what is tested is PostgreSQL's LISTEN/NOTIFY
BACKENDS = ("postgresql",)


@pytest.fixture
def nodes(tmp_path, db_url):
    """Two front ends sharing one PostgreSQL database; no executor, no sweeps, so the
    only statements they send are those of requests, the WAIT poller and changes."""
    config = make_config(tmp_path, db_url, executor="none", scheduler=False)
    made = [Node(config), Node(config)]
    try:
        assert until(lambda: all(n.listener.listening for n in made), 10), \
            "a listener never connected"
        yield made
    finally:
        for node in made:
            node.close()


def abort_elsewhere(node: Node, job: str) -> tuple[float, float]:
    """Abort the job through another node's store; monotonic times before and after."""
    before = time.monotonic()
    assert node.api.store.mark_aborted(job)
    return before, time.monotonic()


def backend_of(pid: int) -> tuple:
    engine = sa.create_engine(POSTGRES_URL)
    try:
        with engine.connect() as conn:
            return tuple(conn.execute(sa.text(
                "SELECT state, query, state_change FROM pg_stat_activity WHERE pid = :pid"),
                {"pid": pid}).one())
    finally:
        engine.dispose()


def terminate(pid: int) -> None:
    engine = sa.create_engine(POSTGRES_URL)
    try:
        with engine.begin() as conn:
            assert conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"),
                                {"pid": pid}).scalar()
    finally:
        engine.dispose()


# -- PhaseWatch, without a database ---------------------------------------------------------

class Phases:
    """A phases_of that counts its calls."""

    def __init__(self, phases: dict):
        self.phases = phases
        self.calls = 0

    def __call__(self, ids):
        self.calls += 1
        return {i: self.phases[i] for i in ids if i in self.phases}


def test_a_pushed_watch_reads_once_when_pushing_starts_then_never_polls():
    phases = Phases({"a": Phase.PENDING})
    watch = PhaseWatch(phases, interval=0.01)
    try:
        watch.set_pushed(True)
        since = watch.mark()
        assert watch.wait("a", Phase.PENDING, 0.5, since) is False
        assert phases.calls == 0, "the poller read phases while changes were pushed"
        watch.set_pushed(False)
        assert watch.wait("a", Phase.PENDING, 0.2, watch.mark()) is False
        assert phases.calls >= 5, "the poller did not take over when pushing stopped"
    finally:
        watch.stop()


def test_restarted_pushing_rereads_the_phases_of_parked_waiters():
    phases = Phases({"a": Phase.PENDING})
    watch = PhaseWatch(phases, interval=0.01)
    try:
        watch.set_pushed(True)
        result = {}
        thread = threading.Thread(target=lambda: result.setdefault(
            "woken", watch.wait("a", Phase.PENDING, 5, watch.mark())))
        thread.start()
        assert until(lambda: watch.waiting == 1, 5)
        watch.set_pushed(False)     # the connection dropped ...
        phases.phases["a"] = Phase.ABORTED      # ... and its news was lost
        watch.set_pushed(True)
        thread.join(timeout=5)
        assert result == {"woken": True}
    finally:
        watch.stop()


def test_a_change_notified_between_reading_and_waiting_ends_the_wait_at_once():
    phases = Phases({"a": Phase.PENDING, "b": Phase.PENDING})
    watch = PhaseWatch(phases, interval=0.01)
    try:
        watch.set_pushed(True)
        since = watch.mark()        # the phase is read ...
        watch.notify("a")           # ... a change is notified before the waiter parks
        started = time.monotonic()
        assert watch.wait("a", Phase.PENDING, 5, since) is True
        assert time.monotonic() - started < 0.1
        assert watch.wait("b", Phase.PENDING, 0.05, since) is False     # another job: waits
    finally:
        watch.stop()


# -- PostgreSQL: waking on other processes' changes ---------------------------------------------

def test_wait_wakes_on_change_by_another_front_end_without_polling(nodes):
    a, b = nodes
    delays = []
    with Statements(a.api.store.engine) as sent:
        for _ in range(5):
            url, job = a.create()
            waiter = a.park(url)
            parked = time.monotonic()
            before, committed = abort_elsewhere(b, job)
            waiter.join(timeout=15)
            assert not waiter.is_alive()
            assert waiter.phase() == "ABORTED"
            assert waiter.returned_at >= before
            delays.append(waiter.returned_at - committed)
            assert sent.between(parked, before) == [], "front end A polled the database"
    print(f"wake after another front end's commit: {[round(d * 1000, 1) for d in delays]} ms")
    assert max(delays) < WAKE, f"WAITs woke {[round(d * 1000) for d in delays]} ms after the commit"


ABORT_SCRIPT = textwrap.dedent("""
    import sys, time
    from uws.store import Store
    store = Store(sys.argv[1])
    before = time.monotonic()        # CLOCK_MONOTONIC: one clock for all processes
    won = store.mark_aborted(sys.argv[2])
    committed = time.monotonic()
    print(won, repr(before), repr(committed))
    store.close()
""")


def test_wait_wakes_soon_on_change_by_another_process(nodes, db_url):
    a = nodes[0]
    url, job = a.create()
    waiter = a.park(url)
    out = subprocess.run([sys.executable, "-c", ABORT_SCRIPT, db_url, job],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    won, before, committed = out.stdout.split()
    waiter.join(timeout=15)
    assert won == "True" and not waiter.is_alive()
    assert waiter.phase() == "ABORTED"
    assert waiter.returned_at >= float(before)
    delay = waiter.returned_at - float(committed)
    print(f"wake after another process's commit: {delay * 1000:.1f} ms")
    assert delay < WAKE, f"the WAIT woke {delay * 1000:.0f} ms after the other process's commit"


def test_an_idle_wait_and_the_listener_send_no_query(nodes):
    a = nodes[0]
    url, _ = a.create()
    pid = a.listener.backend_pid
    listening = backend_of(pid)
    assert listening[:2] == ("idle", f"LISTEN {CHANNEL}")
    with Statements(a.api.store.engine) as sent:
        waiter = a.park(url, seconds=1)
        parked = time.monotonic()
        waiter.join(timeout=10)
        assert waiter.phase() == "PENDING"
        assert waiter.returned_at - parked > 0.8, "the WAIT did not block"
        # Neither the poller (phases_of) nor anything else queried while it was parked.
        assert sent.between(parked, waiter.returned_at - 0.05) == []
    assert backend_of(pid) == listening, "the listening connection sent something"


def test_a_rolled_back_change_sends_no_notification(nodes, db_url):
    a = nodes[0]
    jobs = []
    for _ in range(2):
        url, job = a.create()
        assert requests.post(f"{url}/phase", data={"PHASE": "RUN"}, allow_redirects=False,
                             timeout=HTTP_TIMEOUT).status_code == 303
        jobs.append(job)
    store = a.api.store
    # notifications are the database's: listen on the nodes' own
    with psycopg.connect(db_url.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f"LISTEN {CHANNEL}")

        def heard(seconds: float) -> set[str]:
            return {n.payload for n in conn.notifies(timeout=seconds)} & set(jobs)

        # One of the owner's jobs runs: claiming another over a cap of 1 is rolled back.
        first = store._claim_of("w", "sleep", "", 30, cap=0).job_id
        assert first in jobs and heard(1) == {first}
        second = next(j for j in jobs if j != first)
        assert store._claim_of("w", "sleep", "", 30, cap=1) is None
        assert store.phases_of([second]) == {second: Phase.QUEUED}
        assert heard(0.5) == set(), "a rolled-back claim was notified"
        assert store.mark_aborted(second)       # committed: heard
        assert heard(1) == {second}


def test_wait_wakes_after_the_listener_connection_is_killed(nodes, caplog):
    a, b = nodes
    old = a.listener.backend_pid
    with caplog.at_level("WARNING", logger="uws.store.notify"):
        terminate(old)
        url, job = a.create()
        waiter = a.park(url)
        _, committed = abort_elsewhere(b, job)
        waiter.join(timeout=15)
        assert waiter.phase() == "ABORTED"
        assert waiter.returned_at - committed < 1.0
        # It reconnects, says so once, and changes are pushed again.
        assert until(lambda: a.listener.backend_pid not in (None, old), 10), "no reconnection"
    assert len([r for r in caplog.records if "LISTEN connection" in r.getMessage()]) == 1
    url, job = a.create()
    with Statements(a.api.store.engine) as sent:
        waiter = a.park(url)
        parked = time.monotonic()
        # a window of six poll intervals (timing.WAIT_POLL) in which a poller still
        # at work would have read the phases
        time.sleep(6 * timing.WAIT_POLL)
        before, committed = abort_elsewhere(b, job)
        waiter.join(timeout=15)
        assert waiter.phase() == "ABORTED"
        assert waiter.returned_at - committed < WAKE
        assert sent.between(parked, before) == [], "still polling after the reconnection"
