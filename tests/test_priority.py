"""PRIORITY: a job-control parameter within the bounds a service declares (any
value for an administrator, also while QUEUED); executors take QUEUED jobs by
priority, then age, locally and on Celery workers."""
from __future__ import annotations

import base64

import pytest
from lxml import etree
from werkzeug.security import generate_password_hash

from uws.auth import AuthConfig
from uws.config.settings import ConfigError
from uws.domain.queueing import ADMIN_PRIORITY_LIMIT
from uws.web.app import create_app, shutdown

from conftest import LiveServer, ValidatingClient, make_config
from test_browser import _context
from test_browser import browser as browser  # the Chromium fixture, shared
from uwshelp import NS, path_of, wait_for

Q = {"q": "urn:ivoa-uws-server:queue", **NS}
USERS = {"alice": "wonderland", "root": "toor"}
SLEEP = {"runner": "uws.demo:sleep", "priority_min": -5, "priority_max": 5,
         "priority_default": 1,
         "parameters": [{"name": "DURATION", "type": "float", "default": 0},
                        {"name": "FAIL", "type": "boolean", "default": False},
                        {"name": "MESSAGE", "type": "string", "default": ""}]}


def basic(user: str) -> dict:
    raw = f"{user}:{USERS[user]}".encode()
    return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


def with_users(cfg):
    cfg.auth = AuthConfig(modes=("basic",), admins=frozenset({"root"}), users={
        u: generate_password_hash(p, method="pbkdf2:sha256:1000") for u, p in USERS.items()})
    return cfg


@pytest.fixture
def config(tmp_path, db_url):
    return with_users(make_config(tmp_path, db_url, services={"sleep": SLEEP},
                                  executor="none"))


def create(client, user="alice", **params) -> str:
    r = client.post("/sleep", data=params, headers=basic(user))
    assert r.status_code == 303, r.data
    return path_of(r.headers["Location"])


def priority(client, path: str, user="alice") -> int:
    r = client.get(path, headers=basic(user))
    assert r.status_code == 200
    return int(etree.fromstring(r.data).find("uws:jobInfo/q:queue", Q).get("priority"))


def post(client, path: str, user="alice", **data):
    return client.post(path, data=data, headers=basic(user))


# -- the parameter -----------------------------------------------------------------

def test_a_job_takes_its_service_default_priority(client):
    assert priority(client, create(client)) == 1


def test_a_priority_given_at_creation_is_shown_in_job_info(client):
    assert priority(client, create(client, PRIORITY="-3")) == -3


@pytest.mark.parametrize("value", ["6", "-6", "1000"])
def test_a_priority_outside_the_service_bounds_is_refused(client, value):
    r = client.post("/sleep", data={"PRIORITY": value}, headers=basic("alice"))
    assert r.status_code == 400
    assert b"between -5 and 5" in r.data


@pytest.mark.parametrize("value", ["high", "2.5", ""])
def test_a_priority_that_is_not_an_integer_is_refused(client, value):
    assert client.post("/sleep", data={"PRIORITY": value},
                       headers=basic("alice")).status_code == 400


def test_an_owner_changes_the_priority_while_pending(client):
    path = create(client)
    assert post(client, path, PRIORITY="4").status_code == 303
    assert priority(client, path) == 4


def test_an_owner_cannot_change_the_priority_of_a_queued_job(client):
    path = create(client, PHASE="RUN")
    r = post(client, path, PRIORITY="4")
    assert r.status_code == 403
    assert priority(client, path) == 1


def test_an_administrator_sets_any_priority_also_on_a_queued_job(client):
    path = create(client, PHASE="RUN")
    assert post(client, path, user="root", PRIORITY="500").status_code == 303
    assert priority(client, path) == 500


def test_an_administrator_priority_is_still_bounded(client):
    path = create(client)
    r = post(client, path, user="root", PRIORITY=str(ADMIN_PRIORITY_LIMIT + 1))
    assert r.status_code == 400
    assert priority(client, path) == 1


def test_a_finished_job_priority_cannot_change_even_for_an_administrator(client):
    path = create(client, PHASE="RUN")
    assert post(client, path, PHASE="ABORT").status_code == 303
    assert post(client, path, user="root", PRIORITY="2").status_code == 403


def test_a_refused_priority_changes_nothing_else_in_the_request(client):
    path = create(client)
    assert post(client, path, PRIORITY="9", PHASE="RUN", DURATION="3").status_code == 400
    doc = etree.fromstring(client.get(path, headers=basic("alice")).data)
    assert doc.findtext("uws:phase", namespaces=NS) == "PENDING"
    assert doc.findtext("uws:parameters/uws:parameter[@id='DURATION']", namespaces=NS) == "0"


def test_another_owner_cannot_change_the_priority(client, config):
    config.auth.users["bob"] = generate_password_hash("b", method="pbkdf2:sha256:1000")
    path = create(client)
    r = client.post(path, data={"PRIORITY": "2"}, headers={
        "Authorization": "Basic " + base64.b64encode(b"bob:b").decode()})
    assert r.status_code == 403
    assert priority(client, path) == 1


# -- the service's declaration ---------------------------------------------------------

def test_a_default_priority_outside_the_bounds_is_a_configuration_error(tmp_path, db_url):
    with pytest.raises(ConfigError, match="priority_default"):
        make_config(tmp_path, db_url, services={"sleep": {**SLEEP, "priority_default": 9}})


def test_a_priority_bound_past_its_limit_is_a_configuration_error(tmp_path, db_url):
    with pytest.raises(ConfigError, match="priority_max"):
        make_config(tmp_path, db_url, services={"sleep": {**SLEEP, "priority_max": 10**6}})


# -- HTML --------------------------------------------------------------------------

def test_the_html_job_list_shows_each_job_priority(client):
    create(client, PRIORITY="-2")
    page = client.get("/sleep", headers={"Accept": "text/html", **basic("alice")})
    assert b'<td data-role="priority" data-label="Priority">-2</td>' in page.data


def test_the_html_job_list_has_no_priority_column_where_priorities_cannot_differ(
        tmp_path, db_url):
    unranked = {k: v for k, v in SLEEP.items() if not k.startswith("priority")}
    plain = with_users(make_config(tmp_path, db_url, executor="none",
                                   services={"sleep": unranked}))
    app = create_app(plain)
    try:
        web = ValidatingClient(app)
        assert web.post("/sleep", data={"DURATION": "0"},
                        headers=basic("alice")).status_code == 303
        page = web.get("/sleep", headers={"Accept": "text/html", **basic("alice")}).data
        assert b'data-role="priority"' not in page
        assert b">Priority</th>" not in page
    finally:
        shutdown(app)


def test_the_html_job_page_shows_the_priority_and_an_administrator_may_change_it(client):
    path = create(client, PHASE="RUN", PRIORITY="3")
    owner = client.get(path, headers={"Accept": "text/html", **basic("alice")}).data
    admin = client.get(path, headers={"Accept": "text/html", **basic("root")}).data
    assert b'data-role="priority">3' in owner
    assert b'name="PRIORITY"' not in owner      # QUEUED: no longer the owner's to change
    assert b'name="PRIORITY"' in admin


# -- the order of execution ---------------------------------------------------------------

@pytest.fixture
def one_slot(tmp_path, db_url):
    """A client of a server running one job at a time."""
    app = create_app(with_users(make_config(tmp_path, db_url, services={"sleep": SLEEP},
                                            slots=1)))
    app.test_client_class = ValidatingClient
    yield app.test_client()
    shutdown(app)


def start_time(client, path: str) -> str:
    doc = etree.fromstring(client.get(path, headers=basic("alice")).data)
    return doc.findtext("uws:startTime", namespaces=NS)


def test_the_local_executor_takes_higher_priorities_first_then_the_oldest(one_slot):
    client = one_slot
    blocker = create(client, DURATION="1", PHASE="RUN")
    wait_for(lambda: start_time(client, blocker) is not None)
    low = create(client, PRIORITY="-5", PHASE="RUN")
    older = create(client, PRIORITY="5", PHASE="RUN")
    newer = create(client, PRIORITY="5", PHASE="RUN")
    wait_for(lambda: all(start_time(client, p) for p in (low, older, newer)), timeout=30)
    assert start_time(client, older) <= start_time(client, newer) <= start_time(client, low)
    order = sorted((low, older, newer), key=lambda p: start_time(client, p))
    assert order == [older, newer, low]


@pytest.fixture
def cluster(tmp_path):
    from queuehelp import queue_cluster
    cluster = queue_cluster(tmp_path, slots=1)
    yield cluster
    cluster.stop()


def test_celery_workers_take_higher_priorities_first_then_the_oldest(cluster):
    from queuehelp import ran, run
    front = cluster.front_end()
    cluster.worker()
    blocker = run(front, SECS="2")
    wait_for(lambda: ran(cluster) == [blocker], timeout=60, step=0.1)
    low = run(front, PRIORITY="-5")
    older = run(front, PRIORITY="5")
    newer = run(front, PRIORITY="5")
    wait_for(lambda: len(ran(cluster)) == 4, timeout=60, step=0.2)
    assert ran(cluster) == [blocker, older, newer, low]


# -- the administrator's form, in Chromium ---------------------------------------------------

def test_an_administrator_changes_a_queued_job_priority_from_the_job_page(browser, app, client):
    path = create(client, PHASE="RUN", PRIORITY="2")
    with LiveServer(app) as server:
        outside: list[str] = []
        # Sent with every request: another owner's job answers 403, never a challenge.
        context = _context(browser, server, outside, extra_http_headers=basic("root"))
        try:
            page = context.new_page()
            page.goto(server.url + path)
            page.wait_for_selector('article.job[data-phase="QUEUED"]')
            page.fill("#set-priority", "42")
            page.click("[data-role=priority-form] button")
            page.wait_for_selector('dd[data-role="priority"]:has-text("42")')
        finally:
            context.close()
        assert outside == []
    assert priority(client, path) == 42
