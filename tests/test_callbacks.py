"""CALLBACK: a job names a URL; when it ends the server POSTs the job's JSON there,
signed, retried with backoff for a bounded time, and shows the outcome in jobInfo.

The receiver is a real HTTP server on 127.0.0.1 started by the tests; the services
list 127.0.0.1 and localhost in ``callback_hosts``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import http.server
import json
import threading
import time
import types

import pytest
from lxml import etree

from uws.domain.model import Job
from uws.domain.phases import Phase
from uws.domain.timeutil import now
from uws.execution import delivery
from uws.render import json as render_json
from uws.render.xml import Links
from uws.store import Store
from uws.usecases import callbacks
from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, make_config
from uwshelp import POLL_S, ByteServer, holds_throughout, job_id, job_xml

SECRET = "s3cret"
CB = {"cb": "urn:ivoa-uws-server:callback"}
QUICK = dict(callback_backoff=0.05, callback_timeout=2.0)


class Receiver:
    """An HTTP server that records each POST (and when it came, by the store's clock,
    in ``arrivals``) and answers ``statuses`` in turn (then the last one again); while
    ``hold`` is clear it answers nothing."""

    def __init__(self, statuses=(200,)):
        self.statuses = list(statuses)
        self.requests: list[tuple[dict, bytes]] = []
        self.paths: list[str] = []
        self.arrivals: list = []
        self.hold = threading.Event()
        self.hold.set()
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                arrived = now()
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.arrivals.append(arrived)
                    receiver.requests.append((dict(self.headers), body))
                    receiver.paths.append(self.path)
                    n = len(receiver.requests)
                receiver.hold.wait(30)
                status = receiver.statuses[min(n, len(receiver.statuses)) - 1]
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "/elsewhere")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, args=(POLL_S,), daemon=True).start()

    def close(self):
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()

    def bodies(self) -> list[dict]:
        with self.lock:
            return [json.loads(body) for _, body in self.requests]


def until(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def callback_config(tmp_path, db_url, **overrides):
    cfg = make_config(tmp_path, db_url, **overrides)
    sleep = cfg.services["sleep"]
    local = dict(callback_hosts=("127.0.0.1", "localhost"), **QUICK)
    cfg.services = {
        "sleep": dataclasses.replace(sleep, callback_secret=SECRET, **local),
        # retried for 3 s: a loaded machine may start the first attempt a second late
        "brief": dataclasses.replace(sleep, name="brief", callback_retry_seconds=3, **local),
        "public": dataclasses.replace(sleep, name="public", callback_hosts=("*",)),
        "listed": dataclasses.replace(sleep, name="listed", callback_hosts=("hooks.example.org",)),
        "closed": dataclasses.replace(sleep, name="closed"),
    }
    return cfg


@pytest.fixture
def app(tmp_path, db_url, monkeypatch):
    monkeypatch.setattr(delivery, "POLL", 0.05)
    application = create_app(callback_config(tmp_path, db_url))
    application.test_client_class = ValidatingClient
    yield application
    shutdown(application)


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def run_job(client, url: str, service: str = "sleep", **params) -> str:
    r = client.post(f"/{service}", data={"CALLBACK": url, "PHASE": "RUN", "DURATION": "0",
                                         **params})
    assert r.status_code == 303, r.data
    return job_id(r.headers["Location"])


def callback_element(client, job: str, service: str = "sleep"):
    return job_xml(client, f"/{service}/{job}").find("uws:jobInfo/cb:callback",
                                                     {**CB, "uws": "http://www.ivoa.net/xml/UWS/v1.0"})


def settled(client, job: str, service: str = "sleep"):
    """The job's callback element once its delivery is delivered or failed."""
    seen = []

    def done() -> bool:
        seen.append(callback_element(client, job, service))
        return seen[-1] is not None and seen[-1].get("state") in ("delivered", "failed")
    assert until(done), "the delivery did not settle"
    return seen[-1]


# -- delivery -----------------------------------------------------------------------

def test_completed_job_is_posted_as_json_with_a_valid_signature(client, receiver):
    job = run_job(client, receiver.url)
    assert until(lambda: receiver.requests)
    headers, body = receiver.requests[0]
    assert headers["Content-Type"] == "application/json"
    doc = json.loads(body)
    assert (doc["jobId"], doc["phase"]) == (job, "COMPLETED")
    assert doc["results"][0]["href"].endswith(f"/sleep/{job}/results/result")
    signed = headers["X-UWS-Timestamp"].encode() + b"." + body
    expected = hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest()
    assert headers["X-UWS-Signature"] == f"sha256={expected}"
    assert abs(int(headers["X-UWS-Timestamp"]) - time.time()) < 60


def test_failed_and_aborted_jobs_are_posted_too(client, receiver):
    failed = run_job(client, receiver.url, FAIL="true")
    aborted = client.post("/sleep", data={"CALLBACK": receiver.url, "DURATION": "60"})
    aborted_id = job_id(aborted.headers["Location"])
    client.post(f"/sleep/{aborted_id}/phase", data={"PHASE": "ABORT"})
    assert until(lambda: len(receiver.requests) == 2)
    phases = {d["jobId"]: d["phase"] for d in receiver.bodies()}
    assert phases == {failed: "ERROR", aborted_id: "ABORTED"}


def test_a_job_without_a_secret_is_posted_unsigned(client, receiver):
    run_job(client, receiver.url, service="brief")
    assert until(lambda: receiver.requests)
    headers, _ = receiver.requests[0]
    assert "X-UWS-Signature" not in headers and "X-UWS-Timestamp" not in headers


def test_receiver_failing_twice_gets_the_third_attempt(client):
    receiver = Receiver([500, 502, 200])
    try:
        job = run_job(client, receiver.url)
        el = settled(client, job)
        assert (el.get("state"), el.get("attempts"), el.get("status")) == ("delivered", "3", "200")
        assert [d["jobId"] for d in receiver.bodies()] == [job] * 3
    finally:
        receiver.close()


def test_receiver_that_always_fails_ends_failed_within_the_retry_time(client):
    receiver = Receiver([503])
    try:
        started = time.monotonic()
        job = run_job(client, receiver.url, service="brief")   # retried for 3 s
        el = settled(client, job, "brief")
        assert el.get("state") == "failed"
        assert el.get("status") == "503"
        assert int(el.get("attempts")) >= 2
        assert "503" in el.text
        assert time.monotonic() - started < 10
        count = len(receiver.requests)
        holds_throughout(lambda: len(receiver.requests) == count, 0.5,
                         "a delivery still being retried is tried every 0.05 s here")
    finally:
        receiver.close()


def test_redirect_is_not_followed(client):
    receiver = Receiver([302])
    try:
        job = run_job(client, receiver.url, service="brief")
        el = settled(client, job, "brief")
        assert (el.get("state"), el.get("status")) == ("failed", "302")
        assert set(receiver.paths) == {"/hook"}
    finally:
        receiver.close()


def test_slow_receiver_blocks_neither_requests_nor_jobs(client, receiver):
    receiver.hold.clear()       # the receiver answers nothing until released
    run_job(client, receiver.url)
    assert until(lambda: receiver.requests)     # a delivery is now hanging
    started = time.monotonic()
    second = run_job(client, receiver.url)
    r = client.get(f"/sleep/{second}?WAIT=10&PHASE=QUEUED")
    r = client.get(f"/sleep/{second}?WAIT=10&PHASE=EXECUTING")
    assert job_xml(client, f"/sleep/{second}").findtext(
        "uws:phase", namespaces={"uws": "http://www.ivoa.net/xml/UWS/v1.0"}) == "COMPLETED"
    assert time.monotonic() - started < 5, r.data
    receiver.hold.set()
    assert until(lambda: len(receiver.requests) == 2)


def quick_service(*hosts: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(callback_hosts=hosts, callback_secret=None,
                                 callback_timeout=0.5)


def test_a_receiver_trickling_its_head_is_given_up_at_twice_the_timeout():
    """Each byte would restart a read timeout; four such receivers would otherwise
    hold every delivery thread of a server for hours."""
    server = ByteServer("head", size=4096)
    try:
        started = time.monotonic()
        with pytest.raises(callbacks.CallbackError, match="did not answer in time"):
            delivery.post(f"{server.base}/hook", b"{}", quick_service("127.0.0.1"))
        assert time.monotonic() - started < 1.5
    finally:
        server.close()


def test_a_receiver_trickling_its_body_is_delivered_to_and_let_go_at_twice_the_timeout():
    """Its status came in time: that is the outcome; the rest is not waited for."""
    server = ByteServer("body", size=4096)
    try:
        started = time.monotonic()
        assert delivery.post(f"{server.base}/hook", b"{}", quick_service("127.0.0.1")) == 200
        assert time.monotonic() - started < 1.5
    finally:
        server.close()


def test_a_url_with_a_path_and_query_not_in_ascii_is_posted_to_percent_encoded():
    server = ByteServer()
    try:
        url = f"{server.base}/hook/caf\u00e9?q=\u00e9&done=50%25"
        assert delivery.post(url, b"{}", quick_service("127.0.0.1")) == 200
        assert server.requests[0].startswith(b"POST /hook/caf%C3%A9?q=%C3%A9&done=50%25 ")
    finally:
        server.close()


def test_an_https_receiver_is_sent_its_hosts_name_and_checked_against_it(tls):
    server = ByteServer(tls=tls("hooks.example"))
    try:
        url = f"https://hooks.example:{server.port}/hook"
        assert delivery.post(url, b"{}", quick_service("hooks.example")) == 200
        assert f"Host: hooks.example:{server.port}".encode() in server.requests[0]
    finally:
        server.close()


def test_an_https_receiver_with_a_certificate_for_another_name_is_not_sent_to(tls):
    server = ByteServer(tls=tls("other.example"))
    try:
        with pytest.raises(callbacks.CallbackError, match="TLS"):
            delivery.post(f"https://hooks.example:{server.port}/hook", b"{}",
                          quick_service("hooks.example"))
        assert server.requests == []
    finally:
        server.close()


# -- what users see --------------------------------------------------------------------

def test_outcome_shows_in_job_info(client, receiver):
    job = run_job(client, receiver.url)
    el = settled(client, job)   # the test client validates the document
    assert el.get("url") == receiver.url
    assert (el.get("state"), el.get("attempts"), el.get("status")) == ("delivered", "1", "200")
    assert el.get("delivered")


def test_outcome_shows_in_the_json_job_document(client, api, receiver):
    job = run_job(client, receiver.url)
    settled(client, job)
    doc = render_json.job(api.get("sleep", job), Links(f"http://x/sleep/{job}"))
    info = doc["jobInfo"]["callback"]
    assert {k: info[k] for k in ("url", "state", "attempts", "status", "error")} == {
        "url": receiver.url, "state": "delivered", "attempts": 1, "status": 200, "error": None}


def test_pending_job_shows_its_callback_waiting(client, receiver):
    r = client.post("/sleep", data={"CALLBACK": receiver.url})
    el = callback_element(client, job_id(r.headers["Location"]))
    assert (el.get("state"), el.get("attempts"), el.get("url")) == ("waiting", "0", receiver.url)


def test_job_page_shows_the_callback(client, receiver):
    job = run_job(client, receiver.url)
    settled(client, job)
    page = client.get(f"/sleep/{job}", headers={"Accept": "text/html"}).get_data(as_text=True)
    assert 'data-role="callback"' in page and "delivered" in page and receiver.url in page


# -- naming a callback -------------------------------------------------------------------

def test_callback_can_be_named_while_pending(client, receiver):
    r = client.post("/sleep", data={"DURATION": "0"})
    path = r.headers["Location"]
    assert client.post(path, data={"CALLBACK": receiver.url}).status_code == 303
    client.post(f"{path}/phase", data={"PHASE": "RUN"})
    assert until(lambda: receiver.requests)
    assert receiver.bodies()[0]["jobId"] == job_id(path)


def test_refused_callback_changes_no_parameter(client):
    path = client.post("/sleep", data={"DURATION": "5"}).headers["Location"]
    r = client.post(path, data={"CALLBACK": "ftp://127.0.0.1/", "DURATION": "7"})
    assert r.status_code == 400
    assert client.get(f"{path}/parameters/DURATION").get_data(as_text=True) == "5"


def test_callback_cannot_change_once_the_job_ran(client, receiver):
    job = run_job(client, receiver.url)
    r = client.post(f"/sleep/{job}", data={"CALLBACK": receiver.url + "2"})
    assert r.status_code == 403


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/hook", "http://10.1.2.3/", "http://192.168.0.1/", "http://169.254.169.254/",
    "http://[::1]/", "http://224.0.0.1/", "http://0.0.0.0/", "http://localhost/",
])
def test_internal_addresses_are_refused_unless_listed(client, url):
    r = client.post("/public", data={"CALLBACK": url})
    assert r.status_code == 400
    assert "callback_hosts" in r.get_data(as_text=True)


@pytest.mark.parametrize("host", [
    "a" * 64 + ".example.org", "xn--zz.example.org", "xn--abc-.example.org", "a..example.org",
    "\u2488.example.org",
])
def test_a_host_name_idna_cannot_encode_is_refused_as_not_valid(client, host):
    """Not "resolves to an internal address": the name is what is wrong."""
    r = client.post("/public", data={"CALLBACK": f"https://{host}/hook"})
    assert r.status_code == 400
    text = r.get_data(as_text=True)
    assert text.startswith(f"CALLBACK: the host name {host!r} is not valid"), text
    assert "internal" not in text


def test_unlisted_host_is_refused(client):
    r = client.post("/listed", data={"CALLBACK": "https://other.example.org/hook"})
    assert r.status_code == 400
    assert "not on this service's callback_hosts" in r.get_data(as_text=True)


def test_service_without_callback_hosts_refuses_callbacks(client, receiver):
    r = client.post("/closed", data={"CALLBACK": receiver.url})
    assert r.status_code == 400
    assert "callback_hosts" in r.get_data(as_text=True)


@pytest.mark.parametrize("url", [
    "ftp://127.0.0.1/hook", "127.0.0.1/hook", "/hook", "http:///hook",
    "http://user:pw@127.0.0.1/hook", "http://127.0.0.1:99999/", "http://127.0.0.1/a b",
    "http://127.0.0.1/" + "a" * 2100,
])
def test_bad_urls_are_refused(client, url):
    r = client.post("/sleep", data={"CALLBACK": url})
    assert r.status_code == 400
    assert r.get_data(as_text=True).startswith("CALLBACK:")


def test_refused_callback_creates_no_job(client):
    client.post("/sleep", data={"CALLBACK": "ftp://127.0.0.1/"})
    assert client.head("/sleep").headers["X-Job-Count"] == "0"


def test_address_that_became_internal_is_not_delivered_to(monkeypatch):
    """DNS may change between naming and delivery: the addresses are checked again."""
    monkeypatch.setattr("uws.usecases.addresses.socket.getaddrinfo",
                        lambda *a, **k: [(2, 1, 6, "", ("10.0.0.7", 443))])
    with pytest.raises(callbacks.CallbackError):
        callbacks.target("https://hooks.example.org/x", ("*.example.org",))
    assert callbacks.target("https://hooks.example.org/x",
                            ("hooks.example.org",)).addresses == ("10.0.0.7",)


# -- settings and rules ----------------------------------------------------------------------

def test_secret_may_come_from_the_environment(tmp_path):
    from uws.config import settings as config_mod
    cfg = config_mod.from_dict({"services": {"sleep": {"runner": "uws.demo:sleep"}}},
                               env={"UWS_CALLBACK_SECRET_SLEEP": "from-env"},
                               data_dir=tmp_path)
    assert cfg.services["sleep"].callback_secret == "from-env"


def test_retry_delays_double_with_jitter():
    assert callbacks.retry_delay(1, 2.0, rng=lambda: 1.0) == 2.0
    assert callbacks.retry_delay(3, 2.0, rng=lambda: 1.0) == 8.0
    assert callbacks.retry_delay(3, 2.0, rng=lambda: 0.0) == 4.0
    assert callbacks.retry_delay(40, 2.0, rng=lambda: 1.0) == callbacks.MAX_DELAY


# -- several processes ------------------------------------------------------------------------

def test_two_stores_on_one_database_deliver_each_row_once(tmp_path, db_url, receiver):
    cfg = callback_config(tmp_path, db_url, scheduler=False, executor="none")
    # An attempt that times out is retried (at least once, by design): on a loaded CI
    # machine the receiver's answer once took longer than QUICK's 2 s, and a second
    # POST came.  This test is about claims, so no attempt may time out here.
    cfg.services["sleep"] = dataclasses.replace(cfg.services["sleep"], callback_timeout=30.0)
    stores = [Store(cfg.db_url), Store(cfg.db_url)]
    deliverers = [delivery.Deliverer(types.SimpleNamespace(store=s, config=cfg), poll=0.02)
                  for s in stores]
    jobs = []
    for _ in range(30):
        job = Job(id=_new_id(), service="sleep", owner="", phase=Phase.PENDING,
                  creation_time=now(), execution_duration=0, destruction=None,
                  callback_url=receiver.url)
        stores[0].insert_job(job)
        jobs.append(job.id)
    try:
        for d in deliverers:
            d.start()
        for i, job in enumerate(jobs):     # each ends while both look for due rows
            assert stores[i % 2].mark_aborted(job)
        assert until(lambda: len(receiver.requests) >= len(jobs))
        holds_throughout(lambda: len(receiver.requests) == len(jobs), 0.3,
                         "both deliverers look for due rows every 0.02 s")
        delivered = sorted(d["jobId"] for d in receiver.bodies())
        assert delivered == sorted(jobs)
    finally:
        for d in deliverers:
            d.stop()
        for s in stores:
            s.close()


def test_deleting_a_job_drops_its_deliveries(tmp_path, db_url, receiver):
    cfg = callback_config(tmp_path, db_url, scheduler=False, executor="none")
    store = Store(cfg.db_url)
    try:
        job = Job(id=_new_id(), service="sleep", owner="", phase=Phase.PENDING,
                  creation_time=now(), execution_duration=0, destruction=None,
                  callback_url=receiver.url)
        store.insert_job(job)
        store.mark_aborted(job.id)
        assert store.callback_of(job.id).state == "pending"
        store.delete_job(job.id)
        assert store.callback_of(job.id) is None
        assert store.claim_callback("me", 60) is None
    finally:
        store.close()


def _new_id() -> str:
    from uws.domain.model import new_job_id
    return new_job_id()


def test_document_with_callback_is_valid_uws(client, receiver):
    from conftest import assert_valid_uws
    job = run_job(client, receiver.url, FAIL="true")
    settled(client, job)
    body = client.get(f"/sleep/{job}").data
    assert assert_valid_uws(body) is not None
    assert etree.fromstring(body).find(".//cb:callback", CB) is not None
