"""The Python client (uws.client) against two servers: ours, served over real HTTP on
SQLite and PostgreSQL, and tests/minimal_uws.py, an independent standard-library server
with other habits (no WAIT, relative redirects, other prefixes, Link paging), so the
client follows UWS rather than our server's quirks."""
from __future__ import annotations

import hashlib
import socket
import subprocess
import sys

import pytest
import requests
from werkzeug.security import generate_password_hash

from minimal_uws import MinimalUWS
from uws.auth import AuthConfig, token_digest
from uws.client import AuthError, Client, ConnectionFailed, Forbidden, HTTPError, NotFound, ProtocolError
from uws.client import Timeout as WaitTimeout
from uws.client.documents import parse_job
from uws.web.app import create_app, shutdown

from conftest import LiveServer, make_config

FINAL_TIMEOUT = 30


# -- our server ---------------------------------------------------------------------------

@pytest.fixture
def ours(live_server) -> Client:
    return Client(f"{live_server.url}/sleep")


def test_create_gives_a_pending_job_with_its_parameters(ours):
    job = ours.create({"DURATION": 5, "MESSAGE": "hello"}, run_id="r-1")
    assert (job.phase, job.run_id, job.parameter("message")) == ("PENDING", "r-1", "hello")
    assert job.url == f"{ours.url}/{job.job_id}"


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
        ours.get(job.job_id)


def test_bad_parameter_raises_http_error_with_the_servers_message(ours):
    with pytest.raises(HTTPError) as caught:
        ours.create({"DURATION": "soon"})
    assert caught.value.status == 400
    assert "DURATION" in caught.value.message


def test_list_filters_by_phase_and_last(ours):
    pending = ours.create({"DURATION": 5})
    done = ours.wait(ours.create({"DURATION": 0}, run=True), timeout=FINAL_TIMEOUT)
    assert [r.id for r in ours.jobs(phases=["PENDING"])] == [pending.job_id]
    assert [r.id for r in ours.jobs(last=1)] == [done.job_id]


def test_list_follows_the_next_links_of_pages(ours):
    made = {ours.create({"DURATION": 5}).job_id for _ in range(5)}
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
        Client(ours_with_auth, user="alice", password="wonderland").get(job.job_id)


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
    assert job.url == f"{minimal.url}/{job.job_id}"
    assert job.phase == "PENDING"


def test_documents_with_other_prefixes_are_read(other):
    job = other.create({"DURATION": 5, "COLOUR": "red"}, run_id="mine", run=True)
    assert (job.phase, job.run_id, job.parameter("colour")) == ("EXECUTING", "mine", "red")
    assert [r.run_id for r in other.jobs()] == ["mine"]


def test_list_pages_are_followed_through_link_headers(other, minimal):
    made = {other.create({"DURATION": 1}).job_id for _ in range(5)}
    assert {r.id for r in other.jobs()} == made
    pages = [r["query"].get("page") for r in minimal.requests
             if r["path"] == "/jobs" and r["method"] == "GET"]
    assert pages == [None, ["1"], ["2"]]


def test_list_phase_filter_is_sent_to_the_server(other):
    running = other.create({"DURATION": 60}, run=True)
    other.create({"DURATION": 60})
    assert [r.id for r in other.jobs(phases=["executing"])] == [running.job_id]


def test_wait_falls_back_to_polling_with_growing_delays(other, minimal):
    job = other.wait(other.create({"DURATION": 3}, run=True), timeout=FINAL_TIMEOUT)
    assert job.phase == "COMPLETED"
    times = [r["time"] for r in _gets_of(minimal, job.job_id)]
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
    assert out.read_text() == f"job {job.job_id} done\n"


def test_download_resumes_with_a_range_request(other, minimal, tmp_path):
    job = other.wait(other.create({"DURATION": 0}, run=True), timeout=FINAL_TIMEOUT)
    whole = minimal.content(minimal.jobs[job.job_id], "echo")
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
        assert target.read_bytes() == server.content(server.jobs[job.job_id], "echo")
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
    whole = minimal.content(minimal.jobs[job.job_id], "echo")
    target = tmp_path / "echo"
    target.write_bytes(b"another job's result of the same name")
    other.download(other.result(job, "echo"), target)
    assert target.read_bytes() == whole


def test_download_from_a_server_without_ranges_fetches_the_whole_file_again(tmp_path):
    with MinimalUWS(ranges=False) as server:
        client = Client(server.url)
        job = client.wait(client.create({"DURATION": 0}, run=True), timeout=FINAL_TIMEOUT)
        whole = server.content(server.jobs[job.job_id], "echo")
        target = tmp_path / "echo"
        target.write_bytes(whole[:500])
        client.download(client.result(job, "echo"), target)
        assert target.read_bytes() == whole


def test_resuming_a_whole_file_leaves_it_as_it_is(other, minimal, tmp_path):
    job = other.wait(other.create({"DURATION": 0}, run=True), timeout=FINAL_TIMEOUT)
    target = tmp_path / "echo"
    target.write_bytes(minimal.content(minimal.jobs[job.job_id], "echo"))
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
        other.get(f"{minimal.root}/files/{job.job_id}/note")


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
