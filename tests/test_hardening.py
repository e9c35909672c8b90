"""Cross-site posts, per-owner quotas, and a database that fails a request."""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import socket
import subprocess
import threading

import pytest
import sqlalchemy as sa

from conftest import free_port, make_config
from uwshelp import UWS_COMMAND, wait_for

#: one database is enough here (HTTP handling; the store's side is in the protocol tests;
#: tests/README.rst)
BACKENDS = ("sqlite",)


def test_a_cross_site_form_post_is_refused(client):
    r = client.post("/sleep", data={"DURATION": "0"}, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403
    assert b"jobref" not in client.get("/sleep").data


def test_a_cross_site_delete_by_referer_is_refused(client):
    job = client.post("/sleep", data={"DURATION": "0"}).headers["Location"]
    path = job.replace("http://localhost", "")
    r = client.post(path, data={"ACTION": "DELETE"},
                    headers={"Referer": "https://evil.example/page"})
    assert r.status_code == 403
    assert client.get(path).status_code == 200


@pytest.mark.parametrize("header", ["Origin", "Referer"])
@pytest.mark.parametrize("source", ["http://[::1", "http://[zz]", "http://a:b:c]"])
def test_an_origin_that_is_no_url_is_refused_as_cross_site(client, header, source):
    r = client.post("/sleep", data={"DURATION": "0"}, headers={header: source})
    assert r.status_code == 403
    assert b"jobref" not in client.get("/sleep").data


def test_a_same_origin_form_post_is_accepted(client):
    r = client.post("/sleep", data={"DURATION": "0"}, headers={"Origin": "http://localhost"})
    assert r.status_code == 303


def test_clients_without_origin_or_referer_are_unaffected(client):
    assert client.post("/sleep", data={"DURATION": "0"}).status_code == 303


@pytest.fixture
def config(tmp_path, db_url):
    cfg = make_config(tmp_path, db_url, executor="none", scheduler=False)
    cfg.services["sleep"] = dataclasses.replace(cfg.services["sleep"], anonymous_max_jobs=3)
    return cfg


def test_creation_beyond_the_owners_quota_answers_403(client):
    for _ in range(3):
        assert client.post("/sleep", data={"DURATION": "0"}).status_code == 303
    r = client.post("/sleep", data={"DURATION": "0"})
    assert r.status_code == 403 and b"limit" in r.data
    assert client.head("/sleep").headers["X-Job-Count"] == "3"


def test_deleting_a_job_frees_quota(client):
    paths = [client.post("/sleep", data={"DURATION": "0"}).headers["Location"].replace(
        "http://localhost", "") for _ in range(3)]
    client.delete(paths[0])
    assert client.post("/sleep", data={"DURATION": "0"}).status_code == 303


def test_concurrent_creations_never_exceed_the_owners_quota(live_server):
    import requests
    barrier = threading.Barrier(12)

    def create():
        barrier.wait()
        return requests.post(f"{live_server.url}/sleep", data={"DURATION": "0"},
                             allow_redirects=False, timeout=30).status_code

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        codes = list(pool.map(lambda _: create(), range(12)))
    assert sorted(codes) == [303] * 3 + [403] * 9
    assert requests.head(f"{live_server.url}/sleep").headers["X-Job-Count"] == "3"


@pytest.fixture
def served(tmp_path):
    """``uws serve`` itself (its waitress settings are under test), uploads capped at 1000 bytes."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("UWS_")}
    process = subprocess.Popen(
        [UWS_COMMAND, "serve", "--port", str(port),
         "--data-dir", str(tmp_path / "data")], env={**env, "UWS_MAX_UPLOAD_BYTES": "1000"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _answers(port), timeout=20, step=0.1)
        yield port
    finally:
        process.terminate()
        process.wait(10)


#: how long a raw request waits for each part of its answer before the test fails: a
#: bound against hanging, not a speed (a loaded CI machine took over 5 s to answer)
ANSWER_S = 30


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_an_oversized_body_is_refused_before_it_is_sent(served):
    with socket.create_connection(("127.0.0.1", served), timeout=ANSWER_S) as s:
        s.sendall(b"POST /sleep HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/x-www-form-urlencoded\r\n"
                  b"Content-Length: 50000000\r\n\r\n")
        status_line = s.recv(4096).split(b"\r\n", 1)[0]     # no body byte was sent
    assert b" 413 " in status_line


def test_an_http_1_0_request_without_host_gets_urls_of_the_configured_host(served):
    with socket.create_connection(("127.0.0.1", served), timeout=ANSWER_S) as s:
        s.sendall(b"POST /sleep HTTP/1.0\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                  b"Content-Length: 10\r\n\r\nDURATION=0")
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    head = answer.split(b"\r\n\r\n", 1)[0].decode()
    assert " 303 " in head.splitlines()[0]
    assert f"Location: http://127.0.0.1:{served}/sleep/" in head


def _answer(port: int, request: bytes) -> tuple[str, bytes]:
    """The status line and body of one request sent as is."""
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_S) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode(), body


FORM = b"Content-Type: application/x-www-form-urlencoded\r\n"


@pytest.mark.parametrize("request_, status, why", [
    (b"GET /sleep HTTP/1.1\r\nConnection: close\r\n\r\n", 400, b"Host"),
    (b"GET /sleep HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n", 505, b"HTTP/2.0"),
    (b"GET /sleep HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n", 505, b"HTTP/9.9"),
    (b"POST /sleep HTTP/1.1\r\nHost: 127.0.0.1\r\n" + FORM + b"Content-Length: 5\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, b"Transfer-Encoding"),
], ids=["1.1 without Host", "HTTP/2.0", "HTTP/9.9", "Content-Length and chunked"])
def test_requests_rfc_9112_lets_a_server_refuse_are_refused(served, request_, status, why):
    """A body framed two ways is read one way by a proxy in front, another way here:
    what follows it could pass as a request of its own (request smuggling)."""
    status_line, body = _answer(served, request_)
    assert f" {status} " in status_line and why in body


def test_a_client_that_closes_its_sending_side_still_gets_its_answer(served):
    """nc -N, socat and many scripts send the request, then shut their side down."""
    with socket.create_connection(("127.0.0.1", served), timeout=ANSWER_S) as s:
        s.sendall(b"GET /sleep?LAST=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 ")


def test_a_later_minor_version_of_http_1_is_served(served):
    """RFC 9112 §2.3: HTTP/1.2 is read as the highest 1.x served, not refused."""
    status_line, _ = _answer(served, b"GET /sleep HTTP/1.2\r\nHost: 127.0.0.1\r\n"
                                     b"Connection: close\r\n\r\n")
    assert " 200 " in status_line


def test_a_chunked_request_alone_is_served(served):
    status_line, _ = _answer(served, b"POST /sleep HTTP/1.1\r\nHost: 127.0.0.1\r\n" + FORM
                             + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                               b"a\r\nDURATION=0\r\n0\r\n\r\n")
    assert " 303 " in status_line


@pytest.mark.parametrize("backend", ["sqlite"])     # no database involved
@pytest.mark.parametrize("header, remembered", [("HTTP_ACCEPT", "accept"),
                                                 ("HTTP_HOST", "host")])
def test_huge_headers_are_judged_but_never_remembered(client, app, header, remembered):
    # 1024 remembered 200 KiB headers would hold 200 MiB; real ones are short.
    from uws.web import negotiation
    huge = "x" * 200_000
    value = f"text/html, application/{huge}" if remembered == "accept" else f"{huge}.example"
    answer = client.get("/sleep", environ_overrides={header: value})
    assert answer.status_code == (200 if remembered == "accept" else 400)
    if remembered == "accept":
        assert answer.mimetype == "text/html"       # judged all the same
        assert value not in negotiation._ACCEPT_VERDICTS
    else:
        sites = app.extensions.get(negotiation._SITES, {})
        assert not any(value in key for key in sites)


def test_a_request_the_database_fails_answers_503_with_retry_after(client, api, monkeypatch):
    """The database down, restarting or busy past its lock timeout: the request's
    transaction is rolled back and the client may try again, so a 503 that says when,
    not a 500."""
    job = client.post("/sleep", data={"DURATION": "0"}).headers["Location"]

    def lost(*args, **kwargs):
        raise sa.exc.OperationalError("SELECT", {}, Exception("server closed the connection"))
    monkeypatch.setattr(api.store, "get_job", lost)
    r = client.get(job)
    assert (r.status_code, r.headers.get("Retry-After")) == (503, "2")
    assert "retry" in r.get_data(as_text=True)
