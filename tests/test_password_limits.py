"""Password guessing cannot exhaust the server: hashes are bounded, failures are
limited per address and per user, right passwords are remembered briefly, and an
unknown user costs what a known one does."""
from __future__ import annotations

import base64
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from werkzeug.security import generate_password_hash

import uws.web.passwords
from uws.auth import AuthConfig
from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, make_config

FAST_HASH = "pbkdf2:sha256:1000"     # tests only; real configs keep werkzeug's default


def basic(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


class CountingHash:
    """Stands in for werkzeug's check_password_hash: counts the hashes run, the most
    running at once, and the method of each stored hash; each takes a little while
    (or waits for ``release``) so that concurrent ones overlap."""

    def __init__(self, real):
        self.real = real
        self.running = self.peak = 0
        self.methods: list[str] = []
        self.release = threading.Event()
        self.release.set()
        self._lock = threading.Lock()

    def __call__(self, stored: str, password: str) -> bool:
        with self._lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.methods.append(stored.split("$", 1)[0])
        try:
            self.release.wait(30)
            time.sleep(0.02)
            return self.real(stored, password)
        finally:
            with self._lock:
                self.running -= 1


@pytest.fixture
def hashes(monkeypatch):
    counting = CountingHash(uws.web.passwords.check_password_hash)
    monkeypatch.setattr(uws.web.passwords, "check_password_hash", counting)
    return counting


@pytest.fixture
def make_app(tmp_path):
    """create_app with Basic users alice and bob and the given [auth] limits."""
    apps = []

    def make(**limits):
        cfg = make_config(tmp_path / str(len(apps)), "", executor="none", scheduler=False)
        cfg.auth = AuthConfig(modes=("basic",), users={
            "alice": generate_password_hash("wonderland", method=FAST_HASH),
            "bob": generate_password_hash("builder", method=FAST_HASH)}, **limits)
        app = create_app(cfg)
        app.test_client_class = ValidatingClient
        apps.append(app)
        return app

    yield make
    for app in apps:
        shutdown(app)


def get_many(app, headers_list, address="192.0.2.1") -> list:
    """GET /sleep once per headers, all at once, each from its own client."""
    def one(headers):
        return app.test_client().get("/sleep", headers=headers,
                                     environ_base={"REMOTE_ADDR": address})
    with ThreadPoolExecutor(len(headers_list)) as pool:
        return list(pool.map(one, headers_list))


def test_concurrent_wrong_passwords_run_a_bounded_number_of_hashes(make_app, hashes):
    app = make_app(max_concurrent_checks=2, max_failures_per_user=0,
                   max_failures_per_address=0, check_wait=60)
    answers = get_many(app, [basic("alice", f"guess{i}") for i in range(24)])
    assert [r.status_code for r in answers] == [401] * 24
    assert len(hashes.methods) == 24
    assert hashes.peak == 2


def test_a_request_that_waits_too_long_for_a_check_answers_503(make_app, hashes):
    app = make_app(max_concurrent_checks=1, check_wait=0.2)
    hashes.release.clear()      # the first check holds the only slot
    with ThreadPoolExecutor(1) as pool:
        holder = pool.submit(app.test_client().get, "/sleep", headers=basic("alice", "x"))
        while not hashes.running:
            time.sleep(0.01)
        r = app.test_client().get("/sleep", headers=basic("bob", "y"))
        hashes.release.set()
        assert holder.result().status_code == 401
    assert r.status_code == 503
    assert int(r.headers["Retry-After"]) >= 1
    assert len(hashes.methods) == 1


def test_failures_beyond_the_user_limit_answer_429_without_hashing(make_app, hashes):
    app = make_app(max_concurrent_checks=2, max_failures_per_user=5,
                   max_failures_per_address=0, check_wait=60)
    answers = get_many(app, [basic("alice", f"guess{i}") for i in range(30)])
    statuses = [r.status_code for r in answers]
    assert set(statuses) == {401, 429}
    # checks already holding a slot when the limit is reached may still finish
    assert 5 <= statuses.count(401) == len(hashes.methods) <= 5 + 2
    assert all(int(r.headers["Retry-After"]) >= 1 for r in answers if r.status_code == 429)
    assert hashes.peak <= 2


def test_failures_beyond_the_address_limit_answer_429_for_every_user(make_app, hashes):
    app = make_app(max_failures_per_address=3, max_failures_per_user=0)
    client = app.test_client()
    for i in range(3):
        assert client.get("/sleep", headers=basic("alice", f"g{i}"),
                          environ_base={"REMOTE_ADDR": "192.0.2.9"}).status_code == 401
    r = client.get("/sleep", headers=basic("bob", "builder"),
                   environ_base={"REMOTE_ADDR": "192.0.2.9"})
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
    # another address is not affected
    assert client.get("/sleep", headers=basic("bob", "builder"),
                      environ_base={"REMOTE_ADDR": "192.0.2.10"}).status_code == 200
    assert len(hashes.methods) == 4


def test_the_user_limit_holds_across_addresses(make_app, hashes):
    app = make_app(max_failures_per_user=2, max_failures_per_address=0)
    client = app.test_client()
    for i in range(2):
        client.get("/sleep", headers=basic("alice", "g"), environ_base={"REMOTE_ADDR": f"192.0.2.{i}"})
    r = client.get("/sleep", headers=basic("alice", "g"), environ_base={"REMOTE_ADDR": "192.0.2.99"})
    assert r.status_code == 429


def test_a_right_password_works_again_once_the_failure_window_has_passed(make_app, hashes):
    app = make_app(max_failures_per_user=2, failure_window=1)
    client = app.test_client()
    for _ in range(2):
        assert client.get("/sleep", headers=basic("alice", "guess")).status_code == 401
    assert client.get("/sleep", headers=basic("alice", "wonderland")).status_code == 429
    deadline = time.monotonic() + 20
    while (status := client.get("/sleep", headers=basic("alice", "wonderland")).status_code) \
            == 429 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status == 200


def test_a_right_password_is_hashed_once_while_remembered(make_app, hashes):
    app = make_app()
    client = app.test_client()
    for _ in range(3):
        assert client.get("/sleep", headers=basic("alice", "wonderland")).status_code == 200
    assert len(hashes.methods) == 1


def test_a_remembered_login_does_not_admit_another_password(make_app, hashes):
    app = make_app()
    client = app.test_client()
    assert client.get("/sleep", headers=basic("alice", "wonderland")).status_code == 200
    assert client.get("/sleep", headers=basic("alice", "wonderland!")).status_code == 401
    assert client.get("/sleep", headers=basic("bob", "wonderland")).status_code == 401


def test_remembered_logins_are_kept_as_digests_not_passwords(make_app, hashes):
    app = make_app()
    app.test_client().get("/sleep", headers=basic("alice", "wonderland"))
    remembered = app.extensions["uws_passwords"]._known._until
    assert len(remembered) == 1
    assert not any(b"wonderland" in key or b"alice" in key for key in remembered)


def test_an_unknown_user_costs_one_hash_of_the_known_users_method(make_app, hashes):
    app = make_app()
    client = app.test_client()
    assert client.get("/sleep", headers=basic("alice", "guess")).status_code == 401
    assert client.get("/sleep", headers=basic("mallory", "guess")).status_code == 401
    assert hashes.methods == [FAST_HASH, FAST_HASH]


def test_limits_are_read_from_the_auth_table(tmp_path):
    from uws.config import settings as config_mod
    cfg = config_mod.from_dict({"auth": {"max_concurrent_checks": 3, "check_wait": 0.5,
                                         "max_failures_per_user": 0}}, env={})
    assert (cfg.auth.max_concurrent_checks, cfg.auth.check_wait,
            cfg.auth.max_failures_per_user) == (3, 0.5, 0)
    with pytest.raises(config_mod.ConfigError, match="max_concurrent_checks"):
        config_mod.from_dict({"auth": {"max_concurrent_checks": 0}}, env={})
