"""Owner isolation, probed adversarially: what one caller can see of, or do to, another
owner's jobs, batches, events and figures, through every route and representation
(XML, JSON by ``Accept`` and by ``?FORMAT=json``, HTML pages).  What the whole service's
load shows (a quote counts every owner's queued jobs; event ids are one sequence) is
shared by design, and not tested here as a leak.

Callers: alice and bob (owners, through a trusted proxy's header), carol (a bearer
token), anonymous callers, and root (an administrator).  Every test runs on SQLite and
on PostgreSQL.
"""
from __future__ import annotations

import base64
import datetime as dt
import hashlib
import io
import json
import re
import time

import pytest
from lxml import etree

from uws.auth import AuthConfig, token_digest
from uws.web.app import create_app, shutdown

from conftest import LiveServer, ValidatingClient, make_config
from uwshelp import NS, wait_for

SLEEP = [{"name": "DURATION", "type": "float", "default": "1", "min": 0},
         {"name": "FAIL", "type": "boolean", "default": "false"},
         {"name": "MESSAGE", "type": "string", "default": ""}]
SERVICES = {
    "sleep": {"runner": "uws.demo:sleep", "parameters": SLEEP,
              "priority_min": 0, "priority_max": 5},
    "checksum": {"runner": "uws.demo:checksum", "fetch_hosts": ["127.0.0.1"], "parameters": [
        {"name": "FILE", "type": "file", "required": True},
        {"name": "ALGORITHM", "type": "enum", "choices": ["md5", "sha1", "sha256"],
         "default": "sha256"}]},
    "private": {"runner": "uws.demo:sleep", "parameters": SLEEP, "anonymous": False},
    "small": {"runner": "uws.demo:sleep", "parameters": SLEEP, "max_jobs_per_owner": 2},
}
TOKEN = "carols-token"
ALICE, BOB, ROOT, ANON = ({"X-Remote-User": "alice"}, {"X-Remote-User": "bob"},
                          {"X-Remote-User": "root"}, {})
CAROL = {"Authorization": f"Bearer {TOKEN}"}
OTHERS = {"bob": BOB, "anonymous": ANON, "carol": CAROL}
SECRET = "zz-alice-secret"      # in alice's run ids, messages and reasons
JSON_ACCEPT = {"Accept": "application/json"}
HTML_ACCEPT = {"Accept": "text/html,application/xhtml+xml"}
#: (suffix of the query, extra headers): the representations a GET may ask for
FORMATS = [("", {}), ("", JSON_ACCEPT), ("FORMAT=json", {}), ("", HTML_ACCEPT)]


def _app(tmp_path, db_url, **settings):
    settings = {"executor": "none", "scheduler": False, **settings}
    cfg = make_config(tmp_path, db_url, services=SERVICES, **settings)
    cfg.auth = AuthConfig(modes=("header", "bearer"), admins=frozenset({"root"}),
                          tokens={token_digest(TOKEN): "carol"},
                          trusted_proxies=frozenset({"127.0.0.1"}))
    app = create_app(cfg)
    app.test_client_class = ValidatingClient
    return app


@pytest.fixture
def idle_app(tmp_path, db_url):
    """Jobs are never started: QUEUED stays QUEUED."""
    app = _app(tmp_path, db_url)
    yield app
    shutdown(app)


@pytest.fixture
def client(idle_app):
    return idle_app.test_client()


@pytest.fixture
def running_app(tmp_path, db_url):
    """Jobs run (local executor)."""
    app = _app(tmp_path, db_url, executor="local")
    yield app
    shutdown(app)


@pytest.fixture
def runner(running_app):
    return running_app.test_client()


def with_query(path: str, query: str) -> str:
    if not query:
        return path
    return f"{path}{'&' if '?' in path else '?'}{query}"


def create(client, headers, service="sleep", **params) -> str:
    """A job's path."""
    r = client.post(f"/{service}", data={"DURATION": "0", **params} if service != "checksum"
                    else params, headers=headers)
    assert r.status_code == 303, r.data
    return r.headers["Location"].replace("http://localhost", "")


def ident(path: str) -> str:
    return path.rsplit("/", 1)[1]


def finish(client, path, headers) -> str:
    assert client.post(f"{path}/phase", data={"PHASE": "RUN"}, headers=headers).status_code == 303
    wait_for(lambda: client.get(f"{path}/phase", headers=headers).data
             not in (b"PENDING", b"QUEUED", b"EXECUTING"), timeout=30)
    return client.get(f"{path}/phase", headers=headers).get_data(as_text=True)


def leaks(body: bytes, *secrets: str) -> list[str]:
    text = body.decode("utf-8", "replace")
    return [s for s in (SECRET, "alice", *secrets) if s in text]


def settled_events(client, query: str, headers) -> dict:
    """An events page once nothing is held back behind a transaction in flight."""
    answers = []

    def settled():
        r = client.get(f"/sleep/events{query}", headers=headers)
        answers.append(r)
        return r.status_code != 200 or not r.get_json()["pending"]
    wait_for(settled, timeout=10)
    assert answers[-1].status_code == 200, answers[-1].data
    return answers[-1].get_json()


# -- one job: reads ------------------------------------------------------------------------

JOB_READS = ["", "/phase", "/quote", "/destruction", "/executionduration", "/error", "/owner",
             "/results", "/results/result", "/parameters", "/parameters/MESSAGE",
             "/parameters/message", "/parameters/NOPE", "/results/nope", "?WAIT=1",
             "?WAIT=1&PHASE=COMPLETED"]


def test_every_read_of_another_owners_finished_job_answers_403_in_every_format(runner):
    path = create(runner, ALICE, MESSAGE=SECRET, RUNID=SECRET)
    assert finish(runner, path, ALICE) == "COMPLETED"
    seen = []
    for name, headers in OTHERS.items():
        for child in JOB_READS:
            for query, accept in FORMATS:
                for method in ("GET", "HEAD"):
                    r = runner.open(with_query(path + child, query), method=method,
                                    headers={**headers, **accept})
                    if r.status_code != 403 or leaks(r.data):
                        seen.append((name, method, child, query, accept, r.status_code,
                                     r.data[:80]))
    assert seen == []


def test_every_read_of_another_owners_pending_job_answers_403_in_every_format(client):
    path = create(client, ALICE, MESSAGE=SECRET, RUNID=SECRET)
    seen = []
    for name, headers in OTHERS.items():
        for child in JOB_READS:
            for query, accept in FORMATS:
                r = client.get(with_query(path + child, query), headers={**headers, **accept})
                if r.status_code != 403 or leaks(r.data):
                    seen.append((name, child, query, accept, r.status_code, r.data[:80]))
    assert seen == []


def test_a_wait_on_another_owners_job_answers_403_at_once(client):
    path = create(client, ALICE)
    started = time.monotonic()
    r = client.get(f"{path}?WAIT=5&PHASE=PENDING", headers=BOB)
    assert r.status_code == 403
    assert time.monotonic() - started < 2


def test_result_download_preconditions_and_ranges_answer_403_to_another_owner(runner):
    path = create(runner, ALICE, MESSAGE=SECRET)
    assert finish(runner, path, ALICE) == "COMPLETED"
    mine = runner.get(f"{path}/results/result", headers=ALICE)
    assert mine.status_code == 200 and SECRET.encode() in mine.data
    etag, modified = mine.headers["ETag"], mine.headers["Last-Modified"]
    attempts = [{"Range": "bytes=0-3"}, {"Range": "bytes=-5"}, {"If-None-Match": etag},
                {"If-None-Match": "*"}, {"If-Match": etag}, {"If-Match": '"nope"'},
                {"If-Modified-Since": modified}, {"If-Unmodified-Since": "Sat, 01 Jan 2000 00:00:00 GMT"},
                {"If-Range": etag, "Range": "bytes=0-0"}, {"Range": "bytes=999999-"}]
    for headers in OTHERS.values():
        for extra in attempts:
            for method in ("GET", "HEAD"):
                r = runner.open(f"{path}/results/result", method=method,
                                headers={**headers, **extra})
                assert r.status_code == 403, (extra, method, r.status_code)
                assert "ETag" not in r.headers and "Content-Range" not in r.headers
                assert not leaks(r.data)


def test_another_owners_uploaded_file_cannot_be_downloaded(client):
    r = client.post("/checksum", data={"FILE": (io.BytesIO(SECRET.encode()), "f.txt")},
                    headers=ALICE, content_type="multipart/form-data")
    assert r.status_code == 303
    path = r.headers["Location"].replace("http://localhost", "")
    assert client.get(f"{path}/parameters/FILE", headers=ALICE).data == SECRET.encode()
    for headers in OTHERS.values():
        for extra in ({}, {"Range": "bytes=0-3"}, JSON_ACCEPT, HTML_ACCEPT):
            r = client.get(f"{path}/parameters/FILE", headers={**headers, **extra})
            assert r.status_code == 403 and not leaks(r.data)


# -- one job: changes ----------------------------------------------------------------------

def _snapshot(client, path) -> bytes:
    return client.get(path, headers=ALICE).data


def _change_attempts(path: str):
    """(method, URL, keyword arguments of client.open) for every change a client can ask."""
    form = lambda **kw: {"data": kw}     # noqa: E731
    return [
        ("POST", path, form(PHASE="RUN")), ("POST", path, form(PHASE="ABORT")),
        ("POST", path, form(ACTION="DELETE")), ("POST", path, form(METHOD="DELETE")),
        ("POST", f"{path}?ACTION=DELETE", {}), ("POST", f"{path}?METHOD=DELETE", {}),
        ("POST", path, form(ACTION="REPEAT")), ("POST", path, form(ACTION="REPEAT", PHASE="RUN")),
        ("POST", path, form(PRIORITY="5")), ("POST", path, form(STARTAFTER="2030-01-01")),
        ("POST", path, form(RUNID="bob-run")), ("POST", path, form(MESSAGE="bob-was-here")),
        ("POST", path, form(CALLBACK="https://hooks.example.org/x")),
        ("POST", path, {}),
        ("DELETE", path, {}),
        ("POST", f"{path}/phase", form(PHASE="RUN")), ("POST", f"{path}/phase", form(PHASE="ABORT")),
        ("POST", f"{path}/executionduration", form(EXECUTIONDURATION="5")),
        ("POST", f"{path}/destruction", form(DESTRUCTION="2031-01-01T00:00:00Z")),
        ("POST", f"{path}/parameters", form(MESSAGE="bob-was-here")),
        ("PUT", f"{path}/parameters/MESSAGE", {"data": b"bob-was-here",
                                               "content_type": "text/plain"}),
        ("PUT", f"{path}/parameters/MESSAGE", {"data": b"bob-was-here"}),
        ("PUT", f"{path}/parameters/MESSAGE", {"data": {"MESSAGE": "bob-was-here"}}),
    ]


def test_every_change_to_another_owners_job_answers_403_and_changes_nothing(client):
    path = create(client, ALICE, MESSAGE=SECRET, RUNID=SECRET)
    before = _snapshot(client, path)
    seen = []
    for name, headers in OTHERS.items():
        for method, url, kwargs in _change_attempts(path):
            for accept in ({}, JSON_ACCEPT, HTML_ACCEPT):
                r = client.open(url, method=method, headers={**headers, **accept}, **kwargs)
                if r.status_code != 403 or leaks(r.data):
                    seen.append((name, method, url, kwargs, accept, r.status_code, r.data[:80]))
    assert seen == []
    assert _snapshot(client, path) == before
    for headers in (BOB, ANON, CAROL):      # nothing was created for them either (REPEAT)
        assert client.head("/sleep", headers=headers).headers["X-Job-Count"] == "0"


def test_changes_to_another_owners_queued_job_answer_403_and_change_nothing(client):
    path = create(client, ALICE, MESSAGE=SECRET, PHASE="RUN")
    before = _snapshot(client, path)
    assert b"QUEUED" in before
    for headers in OTHERS.values():
        for method, url, kwargs in _change_attempts(path):
            r = client.open(url, method=method, headers=headers, **kwargs)
            assert r.status_code == 403, (method, url, kwargs, r.status_code)
    assert _snapshot(client, path) == before


def test_an_upload_to_another_owners_job_is_refused_and_replaces_nothing(client):
    r = client.post("/checksum", data={"FILE": (io.BytesIO(b"alice's bytes"), "f")},
                    headers=ALICE, content_type="multipart/form-data")
    path = r.headers["Location"].replace("http://localhost", "")
    for headers in OTHERS.values():
        r = client.put(f"{path}/parameters/FILE", data=b"bob's bytes", headers=headers,
                       content_type="application/octet-stream")
        assert r.status_code == 403
        r = client.post(f"{path}/parameters", data={"FILE": (io.BytesIO(b"bob's bytes"), "f")},
                        headers=headers, content_type="multipart/form-data")
        assert r.status_code == 403
        r = client.post(path, data={"FILE": (io.BytesIO(b"bob's bytes"), "f")},
                        headers=headers, content_type="multipart/form-data")
        assert r.status_code == 403
    assert client.get(f"{path}/parameters/FILE", headers=ALICE).data == b"alice's bytes"


def test_an_untrusted_address_cannot_claim_another_identity_by_the_proxy_header(idle_app):
    client = idle_app.test_client()
    path = create(client, ALICE)
    outsider = idle_app.test_client()
    outsider.environ_base["REMOTE_ADDR"] = "192.0.2.7"
    r = outsider.get(path, headers=ALICE)
    assert r.status_code == 403         # read as anonymous, not as alice
    assert outsider.head("/sleep", headers=ALICE).headers["X-Job-Count"] == "0"


# -- another service's URL ---------------------------------------------------------------------

def test_a_job_id_under_another_services_url_answers_404_to_everyone(client):
    path = create(client, ALICE, MESSAGE=SECRET)
    job = ident(path)
    for headers in (ALICE, BOB, ANON, ROOT):
        for other in ("checksum", "private", "small", "nosuch"):
            for child in ("", "/phase", "/parameters/MESSAGE", "/owner"):
                r = client.get(f"/{other}/{job}{child}", headers=headers)
                assert r.status_code == (401 if other == "private" and not headers else 404), \
                    (headers, other, child, r.status_code)
            for method, kwargs in (("DELETE", {}), ("POST", {"data": {"PHASE": "ABORT"}})):
                r = client.open(f"/{other}/{job}", method=method, headers=headers, **kwargs)
                assert r.status_code in (401, 404), (headers, other, method, r.status_code)
    assert client.get(f"{path}/phase", headers=ALICE).data == b"PENDING"


def test_a_batch_id_under_another_services_url_answers_404(client):
    batch = _batch(client, ALICE)
    for headers in (ALICE, ROOT):
        assert client.get(batch.replace("/sleep/", "/small/"), headers=headers).status_code == 404
        assert client.delete(batch.replace("/sleep/", "/small/"),
                             headers=headers).status_code == 404
    assert client.get(batch, headers=ALICE).status_code == 200


# -- job lists and counts --------------------------------------------------------------------

LIST_QUERIES = ["", "PHASE=PENDING", "PHASE=QUEUED", "PHASE=PENDING&PHASE=QUEUED",
                "PHASE=ARCHIVED", "PHASE=HELD", "AFTER=2000-01-01", "AFTER=2000-01-01&PHASE=QUEUED",
                "LAST=100", "LAST=1", "extend=50", "extend=1", "start=0&extend=50", "start=1",
                "phase=queued", "last=100"]


def _alice_and_bob(client):
    alice = [ident(create(client, ALICE, RUNID=SECRET)),
             ident(create(client, ALICE, RUNID=SECRET, PHASE="RUN"))]
    bob = [ident(create(client, BOB, RUNID="bobs"))]
    return alice, bob


def test_job_lists_show_only_the_callers_jobs_in_every_format_and_filter(client):
    alice, bob = _alice_and_bob(client)
    seen = []
    for name, headers in OTHERS.items():
        for query in LIST_QUERIES:
            for fmt, accept in FORMATS:
                r = client.get(with_query(f"/sleep?{query}" if query else "/sleep", fmt),
                               headers={**headers, **accept})
                if r.status_code != 200 or leaks(r.data, *alice):
                    seen.append((name, query, fmt, accept, r.status_code))
    assert seen == []
    mine = client.get("/sleep", headers=BOB).get_data(as_text=True)
    assert bob[0] in mine and mine.count("<uws:jobref") == 1


def test_head_counts_only_the_callers_jobs_under_every_filter(client):
    _alice_and_bob(client)
    expected_bob = {"": 1, "PHASE=PENDING": 1, "PHASE=QUEUED": 0, "PHASE=PENDING&PHASE=QUEUED": 1,
                    "PHASE=ARCHIVED": 0, "PHASE=HELD": 0, "AFTER=2000-01-01": 1,
                    "AFTER=2000-01-01&PHASE=QUEUED": 0, "phase=queued": 0}
    for query, n in expected_bob.items():
        for accept in ({}, JSON_ACCEPT):
            url = f"/sleep?{query}" if query else "/sleep"
            assert client.head(url, headers={**BOB, **accept}).headers["X-Job-Count"] == str(n), \
                query
            assert client.head(url, headers={**ANON, **accept}).headers["X-Job-Count"] == "0", \
                query
    assert client.head("/sleep", headers=ROOT).headers["X-Job-Count"] == "3"


def test_the_html_list_total_counts_only_the_callers_jobs(client):
    _alice_and_bob(client)
    page = client.get("/sleep", headers={**BOB, **HTML_ACCEPT}).get_data(as_text=True)
    assert 'data-role="total">1<' in page
    assert SECRET not in page and "alice" not in page


def test_a_cursor_made_from_another_owners_job_pages_only_the_callers_jobs(client):
    alice, bob = _alice_and_bob(client)
    time.sleep(0.01)
    later = ident(create(client, BOB, RUNID="bobs-later"))
    ref = etree.fromstring(client.get("/sleep", headers=ALICE).data).find("uws:jobref", NS)
    created = ref.findtext("uws:creationTime", namespaces=NS)
    when = dt.datetime.strptime(created, "%Y-%m-%dT%H:%M:%S.%fZ")
    cursor = base64.urlsafe_b64encode(
        f"{(when + dt.timedelta(days=1)).isoformat()}|{ref.get('id')}".encode()).decode().rstrip("=")
    r = client.get(f"/sleep?extend=10&cursor={cursor}", headers=BOB)
    assert client.head(f"/sleep?cursor={cursor}", headers=BOB).headers["X-Job-Count"] == "2"
    assert r.status_code == 200
    assert not leaks(r.data, *alice)
    assert {later, *bob} == {el.get("id") for el in etree.fromstring(r.data).iterfind(
        "uws:jobref", NS)}


def test_following_next_links_never_reaches_another_owners_jobs(client):
    alice, _ = _alice_and_bob(client)
    for _ in range(3):
        create(client, BOB)
    url, pages = "/sleep?extend=1", 0
    while url:
        r = client.get(url, headers=BOB)
        assert not leaks(r.data, *alice)
        link = r.headers.get("Link")
        url = link[1:link.index(">")].replace("http://localhost", "") if link else None
        pages += 1
    assert pages == 5       # four jobs, a page each, and an empty last one


def test_anonymous_callers_see_no_authenticated_owners_jobs_but_share_their_own(client):
    alice, _ = _alice_and_bob(client)
    anon = ident(create(client, ANON))
    listed = client.get("/sleep", headers=ANON).get_data(as_text=True)
    assert anon in listed and not leaks(listed.encode(), *alice)
    assert client.get(f"/sleep/{anon}", headers={"X-Remote-User": ""}).status_code == 200
    assert client.get(f"/sleep/{anon}", headers=BOB).status_code == 403


def test_an_administrator_lists_and_counts_every_owners_jobs(client):
    alice, bob = _alice_and_bob(client)
    listed = client.get("/sleep", headers=ROOT).get_data(as_text=True)
    assert all(j in listed for j in alice + bob)
    assert client.head("/sleep?PHASE=QUEUED", headers=ROOT).headers["X-Job-Count"] == "1"


def test_a_service_without_anonymous_use_answers_401_to_anonymous_callers(client):
    path = create(client, ALICE, service="private")
    for url in ("/private", path, f"{path}/phase", "/private/batches", "/private/events",
                "/private/stats"):
        assert client.get(url).status_code == 401, url
    assert client.get(path, headers=BOB).status_code == 403


def test_one_owners_jobs_do_not_count_against_another_owners_quota(client):
    create(client, ALICE, service="small")
    create(client, ALICE, service="small")
    r = client.post("/small", data={"DURATION": "0"}, headers=ALICE)
    assert r.status_code == 403
    for _ in range(2):
        assert client.post("/small", data={"DURATION": "0"}, headers=BOB).status_code == 303
    refused = client.post("/small", data={"DURATION": "0"}, headers=BOB)
    assert refused.status_code == 403 and not leaks(refused.data)


# -- batches ----------------------------------------------------------------------------------

def _batch(client, headers, service="sleep", run_id=SECRET, rows=None) -> str:
    r = client.post(f"/{service}/batches?RUNID={run_id}",
                    data=json.dumps(rows or [{"DURATION": 0, "MESSAGE": SECRET},
                                             {"DURATION": 0}]),
                    content_type="application/json", headers=headers)
    assert r.status_code == 303, r.data
    return r.headers["Location"].replace("http://localhost", "")


def test_batch_lists_show_only_the_callers_batches(client):
    alice = _batch(client, ALICE)
    bob = _batch(client, BOB, run_id="bobs")
    for name, headers in OTHERS.items():
        for fmt, accept in FORMATS:
            r = client.get(with_query("/sleep/batches", fmt), headers={**headers, **accept})
            assert r.status_code == 200
            assert not leaks(r.data, ident(alice)), (name, fmt, accept)
    doc = etree.fromstring(client.get("/sleep/batches", headers=BOB).data)
    assert doc.get("total") == "1" and ident(bob) in etree.tostring(doc).decode()
    assert client.get("/sleep/batches?FORMAT=json", headers=BOB).get_json()["total"] == 1
    everyone = client.get("/sleep/batches", headers=ROOT).get_data(as_text=True)
    assert ident(alice) in everyone and ident(bob) in everyone


def test_another_owners_batch_answers_403_in_every_format_without_its_data(client):
    batch = _batch(client, ALICE)
    for headers in OTHERS.values():
        for query in ("", "start=1", "limit=1"):
            for fmt, accept in FORMATS:
                for method in ("GET", "HEAD"):
                    r = client.open(with_query(with_query(batch, query), fmt), method=method,
                                    headers={**headers, **accept})
                    assert r.status_code == 403, (headers, query, fmt, accept, method)
                    assert not leaks(r.data)


def test_every_change_to_another_owners_batch_answers_403_and_changes_nothing(client):
    batch = _batch(client, ALICE)
    before = client.get(batch, headers=ALICE).data
    attempts = [("POST", {"PHASE": "RUN"}), ("POST", {"PHASE": "ABORT"}),
                ("POST", {"ACTION": "REPEAT"}), ("POST", {"ACTION": "DELETE"}),
                ("POST", {"METHOD": "DELETE"}), ("DELETE", None), ("POST", {})]
    for headers in OTHERS.values():
        for method, data in attempts:
            for accept in ({}, JSON_ACCEPT, HTML_ACCEPT):
                r = client.open(batch, method=method, data=data, headers={**headers, **accept})
                assert r.status_code == 403, (headers, method, data, r.status_code)
                assert not leaks(r.data)
        r = client.post(batch, data=json.dumps([{"DURATION": 0}]),
                        content_type="application/json", headers=headers)
        assert r.status_code == 403
        assert client.head("/sleep", headers=headers).headers["X-Job-Count"] == "0"
    assert client.get(batch, headers=ALICE).data == before


def test_the_jobs_of_another_owners_batch_answer_403(client):
    batch = _batch(client, ALICE)
    doc = etree.fromstring(client.get(batch, headers=ALICE).data)
    jobs = [el.get("id") for el in doc.iter("{urn:ivoa-uws-server:batch}job")]
    assert len(jobs) == 2
    for job in jobs:
        assert client.get(f"/sleep/{job}", headers=BOB).status_code == 403
        assert client.get(f"/sleep/{job}", headers=ALICE).status_code == 200


def test_an_administrator_reads_and_deletes_another_owners_batch(client):
    batch = _batch(client, ALICE)
    assert client.get(batch, headers=ROOT).status_code == 200
    assert client.delete(batch, headers=ROOT).status_code == 303
    assert client.get(batch, headers=ALICE).status_code == 404


# -- events ------------------------------------------------------------------------------------

def test_event_pages_hold_only_the_callers_events(client):
    alice, bob = _alice_and_bob(client)
    alice_batch = _batch(client, ALICE)
    client.delete(f"/sleep/{alice[0]}", headers=ALICE)
    everyone = settled_events(client, "?after=0&limit=1000", ROOT)["events"]
    alice_ids = [e["id"] for e in everyone if e["ownerId"] == "alice"]
    assert len(alice_ids) >= 5
    for name, headers in OTHERS.items():
        for query in ("", "?after=0", "?since=2000-01-01", "?latest", "?latest&limit=1000",
                      f"?after={alice_ids[0]}", "?lastEventId=0", "?after=0&limit=1",
                      "?FORMAT=json&after=0", "?owner=" if name == "anonymous" else "?after=0"):
            doc = settled_events(client, query, headers)
            assert not leaks(json.dumps(doc).encode(), *alice, ident(alice_batch)), (name, query)
        doc = settled_events(client, "?after=0", {**headers, "Last-Event-ID": "0"})
        assert not leaks(json.dumps(doc).encode(), *alice)
    mine = settled_events(client, "?after=0", BOB)["events"]
    assert {e["jobId"] for e in mine} == set(bob)


def test_naming_another_owner_in_the_events_query_answers_403(client):
    _alice_and_bob(client)
    for headers in OTHERS.values():
        for query in ("?owner=alice", "?OWNER=alice", "?owner=alice&latest",
                      "?owner=root"):
            r = client.get(f"/sleep/events{query}", headers=headers)
            assert r.status_code == 403, (headers, query)
            assert not leaks(r.data)
        r = client.get("/sleep/events?owner=alice",
                       headers={**headers, "Accept": "text/event-stream"})
        assert r.status_code == 403


def test_an_administrator_follows_one_owner_with_the_owner_query(client):
    alice, bob = _alice_and_bob(client)
    doc = settled_events(client, "?owner=alice&after=0", ROOT)
    assert {e["jobId"] for e in doc["events"]} == set(alice)


def test_an_event_stream_carries_only_the_callers_events(tmp_path, db_url):
    app = _app(tmp_path, db_url, event_stream_seconds=1)
    try:
        client = app.test_client()
        alice, bob = _alice_and_bob(client)
        settled_events(client, "?after=0", ROOT)
        for name, headers in OTHERS.items():
            r = client.get("/sleep/events", headers={**headers, "Accept": "text/event-stream",
                                                      "Last-Event-ID": "0"})
            assert r.status_code == 200
            assert not leaks(r.data, *alice), name
        r = client.get("/sleep/events?after=0",
                       headers={**BOB, "Accept": "text/event-stream"})
        assert bob[0] in r.get_data(as_text=True)
    finally:
        shutdown(app)


# -- statistics and metrics -------------------------------------------------------------------

def _stats_views(client, headers, path):
    for fmt, accept in FORMATS:
        for window in ("", "window=day"):
            url = with_query(with_query(path, window), fmt)
            r = client.get(url, headers={**headers, **accept})
            yield url, accept, r


def test_statistics_show_only_the_callers_figures_in_every_format(runner):
    for _ in range(2):
        finish(runner, create(runner, ALICE, MESSAGE=SECRET), ALICE)
    create(runner, ALICE)
    create(runner, BOB)
    for name, headers in OTHERS.items():
        for path in ("/sleep/stats", "/stats"):
            for url, accept, r in _stats_views(runner, headers, path):
                assert r.status_code == 200, (name, url, accept)
                assert not leaks(r.data), (name, url, accept)
                assert b"<svg" not in r.data        # the chart is everyone's history
    bob = runner.get("/sleep/stats?FORMAT=json", headers=BOB).get_json()
    assert bob["all"]["jobs"] == {"PENDING": 1}
    assert bob["all"]["runTime"]["samples"] == 0 and bob["all"]["waitTime"]["samples"] == 0
    assert "owners" not in bob or bob["owners"] in (None, {}, [])
    xml_doc = etree.fromstring(runner.get("/stats", headers=BOB).data)
    assert not xml_doc.findall("{urn:ivoa-uws-server:stats:v1}owner")
    anon = runner.get("/stats?FORMAT=json", headers=ANON).get_json()
    assert anon["all"]["jobs"] == {}


def test_an_administrators_statistics_show_every_owner(runner):
    finish(runner, create(runner, ALICE), ALICE)
    create(runner, BOB)
    doc = runner.get("/sleep/stats?FORMAT=json", headers=ROOT).get_json()
    assert {"alice", "bob"} <= {o["ownerId"] for o in doc["owners"]}


def test_metrics_are_refused_to_owners_and_anonymous_callers(client):
    _alice_and_bob(client)
    for headers, status in ((BOB, 403), (CAROL, 403), (ANON, 401)):
        for accept in ({}, JSON_ACCEPT, HTML_ACCEPT):
            r = client.get("/metrics", headers={**headers, **accept})
            assert r.status_code == status, (headers, accept, r.status_code)
            assert b"uws_jobs" not in r.data
    assert b"uws_jobs" in client.get("/metrics", headers=ROOT).data


# -- holds ---------------------------------------------------------------------------------------

def test_holds_are_refused_to_owners_in_every_format(client):
    client.post("/sleep/holds", data={"ACTION": "HOLD", "OWNER": "alice", "REASON": SECRET},
                headers=ROOT)
    for headers, status in ((BOB, 403), (CAROL, 403), (ANON, 403), (ALICE, 403)):
        for fmt, accept in FORMATS:
            r = client.get(with_query("/sleep/holds", fmt), headers={**headers, **accept})
            # a page names whoever is signed in: alice sees her own name there (twice)
            body = re.sub(rb"[Ss]igned in as <strong>alice</strong>", b"", r.data)
            assert r.status_code == status and not leaks(body), (headers, fmt, accept)
        r = client.post("/sleep/holds", data={"ACTION": "RELEASE", "OWNER": "alice"},
                        headers=headers)
        assert r.status_code == status
    assert SECRET in client.get("/sleep/holds", headers=ROOT).get_data(as_text=True)


def test_a_hold_on_one_owner_neither_holds_nor_shows_to_another(client):
    assert client.post("/sleep/holds", data={"ACTION": "HOLD", "OWNER": "alice",
                                             "REASON": SECRET}, headers=ROOT).status_code == 303
    mine = create(client, ALICE, PHASE="RUN")
    assert client.get(f"{mine}/phase", headers=ALICE).data == b"HELD"
    assert SECRET in client.get(mine, headers=ALICE).get_data(as_text=True)
    other = create(client, BOB, PHASE="RUN")
    assert client.get(f"{other}/phase", headers=BOB).data == b"QUEUED"
    for fmt, accept in FORMATS:
        r = client.get(with_query(other, fmt), headers={**BOB, **accept})
        assert not leaks(r.data), (fmt, accept)
    page = client.get("/sleep", headers={**BOB, **HTML_ACCEPT}).get_data(as_text=True)
    assert "/holds" not in page


# -- files named by URL ------------------------------------------------------------------------

def test_a_url_parameter_naming_another_owners_result_does_not_fetch_it(tmp_path, db_url):
    app = _app(tmp_path, db_url, executor="local")
    try:
        with LiveServer(app) as server:
            client = app.test_client()
            path = create(client, ALICE, MESSAGE=SECRET)
            assert finish(client, path, ALICE) == "COMPLETED"
            content = client.get(f"{path}/results/result", headers=ALICE).data
            digest = hashlib.sha256(content).hexdigest()
            url = f"{server.url}{path}/results/result"
            theirs = create(client, BOB, service="checksum", FILE=url)
            phase = finish(client, theirs, BOB)
            got = client.get(theirs, headers=BOB).get_data(as_text=True)
            assert digest not in got
            if phase == "COMPLETED":
                assert digest not in client.get(f"{theirs}/results/checksum",
                                                headers=BOB).get_data(as_text=True)
            assert not leaks(client.get(f"{theirs}/error", headers=BOB).data)
    finally:
        shutdown(app)


def test_a_param_reference_names_only_a_part_of_the_same_request(client):
    r = client.post("/checksum", data={"FILE": (io.BytesIO(b"x"), "f")}, headers=ALICE,
                    content_type="multipart/form-data")
    assert r.status_code == 303
    for value in ("param:FILE", "param:../FILE", "param:/etc/passwd"):
        r = client.post("/checksum", data={"FILE": value}, headers=BOB)
        assert r.status_code == 400, value


# -- identities, existence and side channels ---------------------------------------------------

def test_owner_names_are_matched_exactly(client):
    path = create(client, ALICE)
    for name in ("Alice", "ALICE", "alice ", " alice", "alic", "alice\t"):
        headers = {"X-Remote-User": name}
        assert client.get(path, headers=headers).status_code == 403, repr(name)
        assert client.head("/sleep", headers=headers).headers["X-Job-Count"] == "0", repr(name)


def test_options_answers_the_same_for_another_owners_job_and_for_no_job(client):
    path = create(client, ALICE)
    missing = "/sleep/" + "0" * 32
    for child in ("", "/phase", "/results/result", "/parameters/MESSAGE"):
        a = client.options(path + child, headers=BOB)
        b = client.options(missing + child, headers=BOB)
        assert (a.status_code, a.headers.get("Allow"), a.data) == \
            (b.status_code, b.headers.get("Allow"), b.data)


def test_a_403_names_no_owner_and_no_job_data(client):
    path = create(client, ALICE, MESSAGE=SECRET, RUNID=SECRET)
    batch = _batch(client, ALICE)
    for url in (path, f"{path}/owner", batch):
        for accept in ({}, JSON_ACCEPT, HTML_ACCEPT):
            r = client.get(url, headers={**BOB, **accept})
            assert r.status_code == 403 and not leaks(r.data)

