"""The Python client (uws.client) against two servers: ours, served over real HTTP on
SQLite and PostgreSQL, and tests/minimal_uws.py, an independent standard-library server
with other habits (no WAIT, relative redirects, other prefixes, Link paging), so the
client follows UWS rather than our server's quirks."""
from __future__ import annotations

import hashlib
import socket
import subprocess
import sys
import time

import pytest
import requests
from werkzeug.security import generate_password_hash

from minimal_uws import BROKEN, MinimalUWS, Scripted, holding_wait, job_document, job_list
from uws.auth import AuthConfig, token_digest
from uws.client import AuthError, Client, ConnectionFailed, Forbidden, HTTPError, NotFound, ProtocolError
from uws.client import Timeout as WaitTimeout
from uws.client import api as client_api
from uws.client.documents import parse_job
from uws.web.app import create_app, shutdown

from conftest import LiveServer, make_config

#: one database is enough here (the client; the protocol tests cover both databases;
#: tests/README.rst)
BACKENDS = ("sqlite",)

FINAL_TIMEOUT = 30


# -- our server ---------------------------------------------------------------------------

@pytest.fixture
def ours(live_server) -> Client:
    return Client(f"{live_server.url}/sleep")


def test_create_gives_a_pending_job_with_its_parameters(ours):
    job = ours.create({"DURATION": 5, "MESSAGE": "hello"}, run_id="r-1")
    assert (job.phase, job.run_id, job.parameter("message")) == ("PENDING", "r-1", "hello")
    assert job.url == f"{ours.url}/{job.id}"


def test_create_and_run_then_wait_ends_completed_with_a_result(ours, tmp_path):
    job = ours.wait(ours.create({"DURATION": 0.2, "MESSAGE": "hi"}, run=True), timeout=FINAL_TIMEOUT)
    assert job.phase == "COMPLETED"
    path = ours.download(ours.result(job, "result"), tmp_path / "out.txt")
    assert path.read_text() == "slept 0.2 s\nhi\n"


def test_wait_blocks_on_the_server_instead_of_polling(ours, live_server):
    job = ours.run(ours.create({"DURATION": 1.5}))
    seen = []
    ours.wait(job, timeout=FINAL_TIMEOUT, on_update=seen.append)
    # one GET before the job starts running and a blocked one per phase change, not dozens
    assert len(seen) <= 4
    assert seen[-1].phase == "COMPLETED"


def test_wait_reports_progress_from_job_info(ours):
    seen = []
    ours.wait(ours.create({"DURATION": 2}, run=True), timeout=FINAL_TIMEOUT, block=1,
              on_update=seen.append)
    assert any(j.progress is not None and 0 < j.progress < 100 for j in seen if j.phase == "EXECUTING")


def test_failed_job_carries_its_error_summary(ours):
    job = ours.wait(ours.create({"DURATION": 0, "FAIL": True, "MESSAGE": "boom"}, run=True),
                    timeout=FINAL_TIMEOUT)
    assert job.phase == "ERROR"
    assert "boom" in job.error_summary.message


def test_error_detail_is_the_servers_error_resource(ours):
    job = ours.wait(ours.create({"DURATION": 0, "FAIL": True, "MESSAGE": "boom"}, run=True),
                    timeout=FINAL_TIMEOUT)
    assert ours.error(job) == job.error_summary
    assert "boom" in ours.error_detail(job)


def test_abort_ends_a_running_job_aborted(ours):
    assert ours.abort(ours.create({"DURATION": 60}, run=True)).phase == "ABORTED"


def test_abort_of_a_completed_job_raises_forbidden(ours):
    job = ours.wait(ours.create({"DURATION": 0}, run=True), timeout=FINAL_TIMEOUT)
    with pytest.raises(Forbidden) as caught:
        ours.abort(job)
    assert caught.value.status == 403


def test_deleted_job_raises_not_found(ours):
    job = ours.create({"DURATION": 5})
    ours.delete(job)
    with pytest.raises(NotFound):
        ours.get(job.id)


def test_bad_parameter_raises_http_error_with_the_servers_message(ours):
    with pytest.raises(HTTPError) as caught:
        ours.create({"DURATION": "soon"})
    assert caught.value.status == 400
    assert "DURATION" in caught.value.message


def test_list_filters_by_phase_and_last(ours):
    pending = ours.create({"DURATION": 5})
    done = ours.wait(ours.create({"DURATION": 0}, run=True), timeout=FINAL_TIMEOUT)
    assert [r.id for r in ours.jobs(phases=["PENDING"])] == [pending.id]
    assert [r.id for r in ours.jobs(last=1)] == [done.id]


def test_list_follows_the_next_links_of_pages(ours):
    made = {ours.create({"DURATION": 5}).id for _ in range(5)}
    assert {r.id for r in ours.jobs(page_size=2)} == made


def test_set_parameters_changes_a_pending_job(ours):
    job = ours.set_parameters(ours.create({"DURATION": 5}), {"MESSAGE": "changed"})
    assert job.parameter("MESSAGE") == "changed"


def test_upload_reaches_the_job(live_server, tmp_path):
    data = tmp_path / "data.bin"
    data.write_bytes(b"some bytes to digest" * 1000)
    jobs = Client(f"{live_server.url}/checksum")
    job = jobs.wait(jobs.create(files={"FILE": data}, run=True), timeout=FINAL_TIMEOUT)
    out = jobs.download(jobs.result(job, "checksum"), tmp_path / "sum.txt")
    assert out.read_text().split()[0] == hashlib.sha256(data.read_bytes()).hexdigest()


def test_download_resumes_a_partial_file_from_our_server(ours, tmp_path):
    job = ours.wait(ours.create({"DURATION": 0, "MESSAGE": "x" * 4000}, run=True), timeout=FINAL_TIMEOUT)
    target = tmp_path / "result.txt"
    whole = requests.get(ours.result(job, "result").href, timeout=30).content
    target.write_bytes(whole[:1000])
    ours.download(ours.result(job, "result"), target, resume=True)
    assert target.read_bytes() == whole


@pytest.fixture
def ours_with_auth(tmp_path, db_url):
    """Our server with Basic (alice) and a bearer token (carol)."""
    cfg = make_config(tmp_path, db_url)
    cfg.auth = AuthConfig(modes=("basic", "bearer"),
                          users={"alice": generate_password_hash("wonderland", method="pbkdf2:sha256:1000")},
                          tokens={token_digest("t0ken"): "carol"})
    application = create_app(cfg)
    with LiveServer(application) as server:
        yield f"{server.url}/sleep"
    shutdown(application)


def test_our_server_takes_basic_and_bearer_credentials(ours_with_auth):
    alice = Client(ours_with_auth, user="alice", password="wonderland")
    carol = Client(ours_with_auth, token="t0ken")
    assert alice.create({"DURATION": 5}).owner_id == "alice"
    assert carol.create({"DURATION": 5}).owner_id == "carol"


def test_another_owners_job_on_our_server_raises_forbidden(ours_with_auth):
    job = Client(ours_with_auth, token="t0ken").create({"DURATION": 5})
    with pytest.raises(Forbidden):
        Client(ours_with_auth, user="alice", password="wonderland").get(job.id)


def test_a_wrong_token_on_our_server_raises_auth_error(ours_with_auth):
    with pytest.raises(AuthError):
        list(Client(ours_with_auth, token="nope").jobs())


# -- the independent minimal server -----------------------------------------------------------

@pytest.fixture
def minimal():
    with MinimalUWS() as server:
        yield server


@pytest.fixture
def other(minimal) -> Client:
    return Client(minimal.url)


def _gets_of(server: MinimalUWS, job_id: str) -> list[dict]:
    return [r for r in server.requests if r["method"] == "GET" and r["path"] == f"/jobs/{job_id}"]


def test_relative_location_becomes_the_absolute_job_url(other, minimal):
    job = other.create({"DURATION": 1})
    assert job.url == f"{minimal.url}/{job.id}"
    assert job.phase == "PENDING"


def test_documents_with_other_prefixes_are_read(other):
    job = other.create({"DURATION": 5, "COLOUR": "red"}, run_id="mine", run=True)
    assert (job.phase, job.run_id, job.parameter("colour")) == ("EXECUTING", "mine", "red")
    assert [r.run_id for r in other.jobs()] == ["mine"]


def test_list_pages_are_followed_through_link_headers(other, minimal):
    made = {other.create({"DURATION": 1}).id for _ in range(5)}
    assert {r.id for r in other.jobs()} == made
    pages = [r["query"].get("page") for r in minimal.requests
             if r["path"] == "/jobs" and r["method"] == "GET"]
    assert pages == [None, ["1"], ["2"]]


def test_list_phase_filter_is_sent_to_the_server(other):
    running = other.create({"DURATION": 60}, run=True)
    other.create({"DURATION": 60})
    assert [r.id for r in other.jobs(phases=["executing"])] == [running.id]


def test_wait_falls_back_to_polling_with_growing_delays(other, minimal):
    job = other.wait(other.create({"DURATION": 3}, run=True), timeout=FINAL_TIMEOUT)
    assert job.phase == "COMPLETED"
    times = [r["time"] for r in _gets_of(minimal, job.id)]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert len(times) < 15
    # backing off, not hammering the server: the delays grow (0.2 s, then x1.5), and a
    # difference of gaps stays true when a loaded machine adds latency to each
    assert gaps[-2] - gaps[0] > 0.4


def test_wait_on_a_uws_1_0_server_does_not_send_wait():
    with MinimalUWS(version=None) as server:
        client = Client(server.url)
        job = client.wait(client.create({"DURATION": 0.5}, run=True), timeout=FINAL_TIMEOUT)
        assert job.phase == "COMPLETED" and job.version is None
        assert not any("WAIT" in r["query"] for r in server.requests)


def test_wait_raises_timeout_with_the_last_job_seen(other):
    job = other.create({"DURATION": 60}, run=True)
    with pytest.raises(WaitTimeout) as caught:
        other.wait(job, timeout=0.5)
    assert caught.value.job.phase == "EXECUTING"


def test_wait_reports_the_percent_of_another_servers_job_info(other):
    seen = []
    other.wait(other.create({"DURATION": 1}, run=True), timeout=FINAL_TIMEOUT, on_update=seen.append)
    assert any(j.progress is not None for j in seen if j.phase == "EXECUTING")


def test_error_summary_of_another_server(other):
    job = other.wait(other.create({"DURATION": 0, "FAIL": "true"}, run=True), timeout=FINAL_TIMEOUT)
    assert (job.phase, job.error_summary.message) == ("ERROR", "failed as asked (FAIL=true)")


def test_abort_then_abort_again_is_forbidden(other):
    job = other.abort(other.create({"DURATION": 60}, run=True))
    assert job.phase == "ABORTED"
    with pytest.raises(Forbidden) as caught:
        other.run(job)
    assert "ABORTED" in caught.value.message


def test_delete_on_another_server(other):
    job = other.create({"DURATION": 1})
    other.delete(job)
    with pytest.raises(NotFound) as caught:
        other.get(job)
    assert "no such job" in caught.value.message


def test_upload_is_sent_as_a_multipart_part(other, tmp_path):
    data = bytes(range(256)) * 10
    job = other.wait(other.create({"DURATION": 0}, files={"TABLE": data}, run=True), timeout=FINAL_TIMEOUT)
    out = other.download(other.result(job, "echo"), tmp_path / "echo")
    assert out.read_bytes() == data


def test_download_follows_the_results_redirect(other, tmp_path):
    job = other.wait(other.create({"DURATION": 0}, run=True), timeout=FINAL_TIMEOUT)
    out = other.download(other.result(job, "note"), tmp_path / "note.txt")
    assert out.read_text() == f"job {job.id} done\n"


def test_download_resumes_with_a_range_request(other, minimal, tmp_path):
    job = other.wait(other.create({"DURATION": 0}, run=True), timeout=FINAL_TIMEOUT)
    whole = minimal.content(minimal.jobs[job.id], "echo")
    target = tmp_path / "echo"
    target.write_bytes(whole[:12345])
    other.download(other.result(job, "echo"), target, resume=True)
    assert target.read_bytes() == whole
    ranges = [r["headers"].get("Range") for r in minimal.requests if r["path"].startswith("/files/")]
    assert ranges == ["bytes=12345-"]


def test_a_broken_download_raises_and_the_next_one_resumes(tmp_path):
    with MinimalUWS(cut_after=70_000) as server:
        client = Client(server.url)
        job = client.wait(client.create({"DURATION": 0}, run=True), timeout=FINAL_TIMEOUT)
        target = tmp_path / "echo"
        with pytest.raises(ConnectionFailed):
            client.download(client.result(job, "echo"), target)
        kept = target.stat().st_size        # what arrived in whole chunks
        assert 0 < kept <= 70_000
        client.download(client.result(job, "echo"), target, resume=True)
        assert target.read_bytes() == server.content(server.jobs[job.id], "echo")
        assert server.requests[-1]["headers"]["Range"] == f"bytes={kept}-"


def test_credentials_go_to_the_servers_origin_only():
    with MinimalUWS() as there, MinimalUWS() as elsewhere:
        client = Client(there.url, user="alice", password="secret")
        list(client.jobs())
        client.http.get(elsewhere.url)       # say, a result another host stores
        assert there.requests[-1]["headers"].get("Authorization")
        assert not elsewhere.requests[-1]["headers"].get("Authorization")


def test_a_download_without_resume_replaces_a_file_of_the_same_name(other, minimal, tmp_path):
    job = other.wait(other.create({"DURATION": 0}, run=True), timeout=FINAL_TIMEOUT)
    whole = minimal.content(minimal.jobs[job.id], "echo")
    target = tmp_path / "echo"
    target.write_bytes(b"another job's result of the same name")
    other.download(other.result(job, "echo"), target)
    assert target.read_bytes() == whole


def test_download_from_a_server_without_ranges_fetches_the_whole_file_again(tmp_path):
    with MinimalUWS(ranges=False) as server:
        client = Client(server.url)
        job = client.wait(client.create({"DURATION": 0}, run=True), timeout=FINAL_TIMEOUT)
        whole = server.content(server.jobs[job.id], "echo")
        target = tmp_path / "echo"
        target.write_bytes(whole[:500])
        client.download(client.result(job, "echo"), target)
        assert target.read_bytes() == whole


def test_resuming_a_whole_file_leaves_it_as_it_is(other, minimal, tmp_path):
    job = other.wait(other.create({"DURATION": 0}, run=True), timeout=FINAL_TIMEOUT)
    target = tmp_path / "echo"
    target.write_bytes(minimal.content(minimal.jobs[job.id], "echo"))
    before = target.stat().st_mtime_ns
    other.download(other.result(job, "echo"), target, resume=True)
    assert target.stat().st_mtime_ns == before


def test_download_all_names_files_by_result_id(other, tmp_path):
    job = other.wait(other.create({"DURATION": 0}, run=True), timeout=FINAL_TIMEOUT)
    saved = other.download_all(job, tmp_path / "out")
    assert sorted(p.name for p in saved) == ["echo", "note"]


def test_a_document_that_is_not_uws_raises_protocol_error(other, minimal):
    job = other.wait(other.create({"DURATION": 0}, run=True), timeout=FINAL_TIMEOUT)
    with pytest.raises(ProtocolError):
        other.get(f"{minimal.root}/files/{job.id}/note")


def test_entities_in_a_document_are_not_expanded():
    body = (b'<?xml version="1.0"?><!DOCTYPE j [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
            b'<uws:job xmlns:uws="http://www.ivoa.net/xml/UWS/v1.0"><uws:jobId>a</uws:jobId>'
            b"<uws:phase>PENDING</uws:phase><uws:runId>&x;</uws:runId></uws:job>")
    job = parse_job(body, "http://example.org/jobs/a")
    assert "root:" not in (job.run_id or "")


def test_the_client_loads_none_of_the_servers_frameworks():
    program = ("import sys, uws.client, uws.client.cli\n"
               "print(sorted({m.split('.')[0] for m in sys.modules} & "
               "{'flask', 'sqlalchemy', 'waitress', 'apscheduler'}))")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


def test_unreachable_server_raises_connection_failed():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionFailed):
        Client(f"http://127.0.0.1:{port}/jobs", timeout=5).create({"DURATION": 1})


# -- authentication (the minimal server) ------------------------------------------------------

@pytest.fixture
def guarded():
    with MinimalUWS(users={"alice": "secret"}, tokens={"tok-123": "carol"}) as server:
        yield server


def test_basic_auth_makes_the_user_the_owner(guarded):
    job = Client(guarded.url, user="alice", password="secret").create({"DURATION": 1})
    assert job.owner_id == "alice"


def test_bearer_token_makes_its_user_the_owner(guarded):
    job = Client(guarded.url, token="tok-123").create({"DURATION": 1})
    assert job.owner_id == "carol"


def test_wrong_password_raises_auth_error(guarded):
    with pytest.raises(AuthError) as caught:
        list(Client(guarded.url, user="alice", password="wrong").jobs())
    assert caught.value.status == 401


def test_no_credentials_raise_auth_error(guarded):
    with pytest.raises(AuthError):
        Client(guarded.url).create({"DURATION": 1})


def test_a_ready_session_is_used_as_it_is(guarded):
    session = requests.Session()
    session.auth = ("alice", "secret")
    assert Client(guarded.url, session=session).create({"DURATION": 1}).owner_id == "alice"


# -- credentials go to the server's origin only, as the connection reads URLs -------------------

def _serving(document: str):
    """An answer for Scripted: ``document`` to every request."""
    return lambda request: (200, {}, document)


def test_credentials_never_go_to_a_host_a_backslash_hides(tmp_path):
    with Scripted(lambda r: (200, {}, "elsewhere")) as elsewhere:
        port = elsewhere.root.rsplit(":", 1)[1]
        with Scripted(lambda r: None) as there:
            # urllib.parse reads this href as a path on the server's own host; urllib3,
            # which connects, as the other server's
            href = f"http://127.0.0.1:{port}\\@{there.root[len('http://'):]}/file"
            there.answer = _serving(job_document("J", "COMPLETED", {"r": href}))
            client = Client(there.url, token="secret-token")
            client.download(client.result("J", "r"), tmp_path / "r")
        assert elsewhere.requests and "Authorization" not in elsewhere.requests[0]["headers"]


def test_credentials_never_go_to_a_next_page_on_another_host():
    with Scripted(lambda r: (200, {}, job_list())) as elsewhere:
        port = elsewhere.root.rsplit(":", 1)[1]
        with Scripted(lambda r: None) as there:
            link = f"<http://127.0.0.1:{port}\\@{there.root[len('http://'):]}/jobs?page=2>"
            there.answer = lambda r: (200, {"Link": f'{link}; rel="next"'}, job_list(("a", "PENDING")))
            assert [j.id for j in Client(there.url, user="alice", password="pw").jobs()] == ["a"]
            assert there.requests[0]["headers"].get("Authorization")
        assert elsewhere.requests and "Authorization" not in elsewhere.requests[0]["headers"]


@pytest.mark.parametrize("given", ["auth", "header"])
def test_a_sessions_credentials_go_to_the_servers_origin_only(given, tmp_path):
    session = requests.Session()
    if given == "auth":
        session.auth = ("alice", "secret")
    else:
        session.headers["Authorization"] = "Bearer secret"
    with Scripted(lambda r: (200, {}, "elsewhere")) as elsewhere, Scripted(lambda r: None) as there:
        there.answer = _serving(job_document("J", "COMPLETED", {"r": f"{elsewhere.root}/file"}))
        client = Client(there.url, session=session)
        client.download(client.result("J", "r"), tmp_path / "r")
        assert there.requests[0]["headers"].get("Authorization")
        assert "Authorization" not in elsewhere.requests[0]["headers"]


def test_credentials_in_the_url_are_used_but_kept_out_of_every_url(guarded):
    client = Client(guarded.url.replace("http://", "http://alice:s%40cret@"))
    guarded.users["alice"] = "s@cret"
    job = client.create({"DURATION": 1})
    assert job.owner_id == "alice"
    assert "cret" not in client.url + job.url + client.job_url("x")


def test_credentials_in_a_url_the_server_gives_are_dropped():
    with Scripted(lambda r: None) as server:
        server.answer = _serving(job_document("J", "COMPLETED", {"r": "http://bob:hunter2@example.org/r"}))
        assert Client(server.url).result("J", "r").href == "http://example.org/r"


# -- answers: time and size limits, and every failure a UWSError ---------------------------------

def _trickle(body: bytes, every: float, size: int = 1):
    """An answer for Scripted: ``body`` a few bytes at a time."""
    def answer(request):
        request.send_response(200)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        try:
            for at in range(0, len(body), size):
                request.wfile.write(body[at:at + size])
                request.wfile.flush()
                time.sleep(every)
        except OSError:
            pass
    return answer


def test_the_http_timeout_bounds_a_whole_answer_not_each_read():
    body = job_document("J").encode()
    with Scripted(_trickle(body, every=0.1)) as server:   # ~30 s in all, never idle 1 s
        started = time.monotonic()
        with pytest.raises(ConnectionFailed, match="within 1 s"):
            Client(server.url, timeout=1).get("J")
        assert time.monotonic() - started < 3


def test_a_download_that_trickles_is_a_stall(tmp_path):
    trickle = _trickle(b"x" * 500, every=0.1, size=5)      # 50 bytes a second, for 10 s

    def answer(request):
        if request.path == "/file":
            return trickle(request)
        return 200, {}, job_document("J", "COMPLETED", {"r": "/file"})

    with Scripted(answer) as server:
        client = Client(server.url, timeout=1)
        started = time.monotonic()
        with pytest.raises(ConnectionFailed, match="stalled"):
            client.download(client.result("J", "r"), tmp_path / "r")
        assert time.monotonic() - started < 5


def test_a_document_too_long_to_be_uws_raises_protocol_error():
    padded = job_document("J").replace("<u:results>", "<u:results>" + "<x/>" * 9_000_000)
    with Scripted(_serving(padded)) as server:      # 36 MB
        with pytest.raises(ProtocolError, match="longer than"):
            Client(server.url).get("J")


@pytest.mark.parametrize(("broken", "raised"), [
    ("truncated", ConnectionFailed), ("bad-gzip", ProtocolError), ("redirect-loop", ProtocolError)])
def test_a_broken_answer_raises_a_uws_error(broken, raised):
    with Scripted(BROKEN[broken]) as server:
        with pytest.raises(raised):
            Client(server.url).get("J")


@pytest.mark.parametrize("href", ["file:///etc/passwd", "ftp://127.0.0.1/x", "//[::1/x"])
def test_a_result_href_that_is_not_http_is_refused(href, tmp_path):
    with Scripted(_serving(job_document("J", "COMPLETED", {"r": href}))) as server:
        client = Client(server.url)
        with pytest.raises(ProtocolError):
            client.download(client.result("J", "r"), tmp_path / "r")
        assert len(server.requests) == 1      # the job document, nothing else


@pytest.mark.parametrize("url", ["127.0.0.1:8971/jobs", "http://[::1/x", "http://127.0.0.1:99999/x",
                                 "file:///tmp/jobs", "http:///jobs"])
def test_a_list_url_that_is_not_http_is_a_value_error(url):
    with pytest.raises(ValueError):
        Client(url)


@pytest.mark.parametrize("timeout", [0, -1])
def test_a_timeout_not_above_zero_is_a_value_error(timeout):
    with pytest.raises(ValueError):
        Client("http://127.0.0.1/jobs", timeout=timeout)


def test_an_error_in_an_unknown_charset_is_read_as_utf8():
    answer = (503, {"Content-Type": "text/plain; charset=bogus-charset"}, "Service down \u00e9".encode())
    with Scripted(lambda r: answer) as server:
        with pytest.raises(HTTPError) as caught:
            Client(server.url).get("J")
    assert (caught.value.status, caught.value.message) == (503, "Service down \u00e9")


def test_an_html_error_message_leaves_out_style_and_script():
    page = ("<html><head><title>Oops</title><style>body{x:y}</style></head>"
            "<body><p>Broken.</p><script>var a=1;</script></body></html>")
    with Scripted(lambda r: (500, {"Content-Type": "text/html"}, page)) as server:
        with pytest.raises(HTTPError) as caught:
            Client(server.url).get("J")
    assert caught.value.message == "Oops Broken."


# -- POST and DELETE answered with 307/308 --------------------------------------------------------

def _repeat_elsewhere(request):
    if request.command == "GET":
        return 200, {}, job_document("J")
    return 308, {"Location": request.path + "?canonical=1"}, ""


@pytest.mark.parametrize("change", ["create", "run", "delete"])
def test_a_post_or_delete_answered_308_raises_naming_the_location(change):
    with Scripted(_repeat_elsewhere) as server:
        client = Client(server.url)
        action = {"create": lambda: client.create({"A": 1}), "run": lambda: client.run("J"),
                  "delete": lambda: client.delete("J")}[change]
        with pytest.raises(ProtocolError, match=r"308.*\?canonical=1"):
            action()
        assert [r["method"] for r in server.requests] in (["POST"], ["DELETE"])


# -- the job list's URL as given -------------------------------------------------------------

def _slash_only(request):
    """A list served at /jobs/ only (/jobs answers 301 there), as some frameworks do."""
    if request.path == "/jobs":
        return 301, {"Location": "/jobs/"}, ""
    if request.path == "/jobs/":
        if request.command == "POST":
            return 303, {"Location": "J"}, ""
        return 200, {}, job_list(("J", "PENDING"))
    return 200, {}, job_document("J")


def test_a_list_url_with_a_trailing_slash_is_kept():
    with Scripted(_slash_only) as server:
        client = Client(server.url + "/")
        assert client.create({"A": 1}).url == f"{server.url}/J"
        assert [r.id for r in client.jobs()] == ["J"]
        assert [r["path"] for r in server.requests] == ["/jobs/", "/jobs/J", "/jobs/"]


def test_a_query_in_the_list_url_goes_with_every_job_url(minimal):
    client = Client(minimal.url + "?key=k")
    job_id = client.create({"DURATION": 60}).id
    before = len(minimal.requests)
    client.run(job_id)
    assert client.phase(job_id) == "EXECUTING"
    sent = minimal.requests[before:]
    assert [r["path"] for r in sent] == [f"/jobs/{job_id}/phase", f"/jobs/{job_id}", f"/jobs/{job_id}/phase"]
    assert all(r["query"] == {"key": ["k"]} for r in sent)


def test_a_jobref_without_href_gets_the_quoted_id_in_the_list_url():
    with Scripted(_serving(job_list(("a b/c", "PENDING"), href=False))) as server:
        assert [r.url for r in Client(server.url + "?key=k").jobs()] == [f"{server.url}/a%20b%2Fc?key=k"]


# -- creating ---------------------------------------------------------------------------------

def test_a_create_answered_with_the_job_and_no_location_gives_that_job():
    with Scripted(_serving(job_document("K1"))) as server:
        job = Client(server.url).create({"A": 1})
    assert (job.id, job.url) == ("K1", f"{server.url}/K1")
    assert len(server.requests) == 1


def test_create_with_run_starts_a_job_the_server_left_pending():
    with MinimalUWS(run_on_create=False) as server:
        job = Client(server.url).create({"DURATION": 60}, run=True)
        assert job.phase == "EXECUTING"
        assert server.requests[-2]["path"] == f"/jobs/{job.id}/phase"


# -- results, waiting, pages, documents ---------------------------------------------------------

def test_download_all_gives_each_result_a_file_of_its_own(tmp_path):
    ids = ["", ".", "..", "a/b", "a_b", "A_B"]

    def answer(request):
        if request.path.startswith("/files/"):
            return 200, {}, f"result {request.path[7:]}"
        return 200, {}, job_document("J", "COMPLETED", {i: f"/files/{n}" for n, i in enumerate(ids)})

    with Scripted(answer) as server:
        saved = Client(server.url).download_all("J", tmp_path)
    assert [p.name for p in saved] == ["result", "result-2", "result-3", "a_b", "a_b-2", "A_B-3"]
    assert [p.read_text() for p in saved] == [f"result {n}" for n in range(len(ids))]


def test_wait_gives_up_at_its_timeout_on_a_server_that_holds_wait_too_long():
    with Scripted(holding_wait) as server:
        started = time.monotonic()
        with pytest.raises(WaitTimeout) as caught:
            Client(server.url).wait("J", timeout=2)
        assert time.monotonic() - started < 4
    assert caught.value.job.phase == "EXECUTING"


def test_an_optional_time_that_cannot_be_read_is_missing():
    body = job_document("J", created="2024-01-01T00:00:00.000 UTC").encode()
    job = parse_job(body, "http://example.org/jobs/J")
    assert (job.id, job.creation_time) == ("J", None)


def _endless_pages(request):
    page = int(request.path.partition("page=")[2] or 0)
    return 200, {"Link": f'</jobs?page={page + 1}>; rel="next"'}, job_list((f"p{page}", "COMPLETED"))


def test_list_with_last_stops_after_that_many_jobs_of_endless_pages():
    with Scripted(_endless_pages) as server:
        assert [r.id for r in Client(server.url).jobs(last=2)] == ["p0", "p1"]
        assert len(server.requests) == 2


def test_endless_pages_raise_protocol_error(monkeypatch):
    monkeypatch.setattr(client_api, "MAX_PAGES", 5)
    with Scripted(_endless_pages) as server:
        with pytest.raises(ProtocolError, match="pages"):
            list(Client(server.url).jobs())
        assert len(server.requests) == 5


def test_job_and_jobref_name_the_id_id_and_keep_job_id_as_a_deprecated_alias():
    job = parse_job(job_document("J").encode(), "http://h/jobs/J")
    ref = client_api.JobRef(id="J", url="http://h/jobs/J", phase="PENDING")
    for found in (job, ref):
        with pytest.warns(DeprecationWarning, match="use id"):
            assert found.job_id == found.id == "J"
