"""HTTP behaviour of the resources beside the UWS ones (stats, metrics, holds, batches,
events, VOSI) and of the JSON forms: 405 with Allow for a method a resource does not
take, 403 before any complaint about the form, Vary on negotiated answers, a bounded
``latest`` query, and never a 500 whatever the query string."""
from __future__ import annotations

import json

import pytest

from uws.store import events as store_events
from uws.store.changes import Change
from uws.store.events import record

from test_holds import basic, make_app  # noqa: F401  (make_app: a fixture)
from uwshelp import wait_for

#: one database is enough here (HTTP handling; the store's side is in the protocol tests;
#: tests/README.rst)
BACKENDS = ("sqlite",)

ODD_QUERIES = (
    "limit=99999999999999999999999", "limit=-1", "limit=0", "limit=1&limit=2",
    "start=-5", "start=99999999999999999999", "start=1e3",
    "after=-1", "after=99999999999999999999", "after=%FF", "since=%FF%FE",
    "since=0001-01-01T00:00:00Z", "since=9999-12-31T23:59:59Z", "since=2026-13-45",
    "window=%FF", "window=day&window=hour", "owner=%FF", "owner=", "owner=bob&owner=root",
    "latest", "latest&latest=1&limit=%FF", "%FF=1", "PHASE=%FF", "LAST=-1",
    "AFTER=%C0%AF", "extend=99999999999999999999", "cursor=%FF", "x=" + "a" * 5000,
)
ACCEPTS = ("application/json", "text/html", "application/xml", "text/event-stream;q=0")


@pytest.fixture
def served(make_app):  # noqa: F811
    """(client, id of one of alice's jobs, id of one of alice's batches)."""
    application = make_app(executor="none")
    client = application.test_client()
    r = client.post("/s", data={"DURATION": "0"}, headers=basic("alice"))
    job = r.headers["Location"].rsplit("/", 1)[1]
    r = client.post("/s/batches", data=json.dumps([{"DURATION": "0"}]),
                    content_type="application/json", headers=basic("alice"))
    batch = r.headers["Location"].rsplit("/", 1)[1]
    return client, job, batch


def allowed(response) -> set[str]:
    return set(response.headers["Allow"].replace(" ", "").split(","))


# -- 405 rather than the 404 of a job or service of that name --------------------------------

@pytest.mark.parametrize("path", ["/stats", "/s/stats", "/metrics"])
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_read_only_resources_answer_405_with_allow_get(served, path, method):
    client, _, _ = served
    r = client.open(path, method=method, headers=basic("root"))
    assert r.status_code == 405
    assert allowed(r) == {"GET", "HEAD"}


@pytest.mark.parametrize("path", ["/s/holds", "/s/batches"])
@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
def test_collections_answer_405_with_allow_get_and_post(served, path, method):
    client, _, _ = served
    r = client.open(path, method=method, headers=basic("root"))
    assert r.status_code == 405
    assert allowed(r) == {"GET", "HEAD", "POST"}


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_a_batch_answers_405_to_what_it_does_not_take(served, method):
    client, _, batch = served
    r = client.open(f"/s/batches/{batch}", method=method, headers=basic("alice"))
    assert r.status_code == 405
    assert {"GET", "POST", "DELETE"} <= allowed(r)


def test_delete_of_the_batch_list_deletes_no_batch(served):
    client, _, batch = served
    assert client.delete("/s/batches", headers=basic("alice")).status_code == 405
    assert client.get(f"/s/batches/{batch}", headers=basic("alice")).status_code == 200


# -- authorisation before validation ---------------------------------------------------------

@pytest.mark.parametrize("form", [{}, {"ACTION": "nonsense"}, {"ACTION": "HOLD", "BOGUS": "1"},
                                  {"ACTION": "HOLD", "REASON": "x" * 100000}])
def test_a_non_administrators_hold_request_is_forbidden_whatever_its_form(served, form):
    client, _, _ = served
    assert client.post("/s/holds", data=form, headers=basic("alice")).status_code == 403


def test_an_administrators_malformed_hold_request_is_a_bad_request(served):
    client, _, _ = served
    r = client.post("/s/holds", data={"ACTION": "nonsense"}, headers=basic("root"))
    assert r.status_code == 400


# -- Vary -------------------------------------------------------------------------------------

@pytest.mark.parametrize("query", ["", "?latest"])
def test_polled_events_vary_by_accept(served, query):
    client, _, _ = served
    r = client.get(f"/s/events{query}", headers={**basic("alice"), "Accept": "application/json"})
    assert r.status_code == 200
    assert "Accept" in r.headers.get("Vary", "")


def test_streamed_events_vary_by_accept(served):
    client, _, _ = served
    r = client.get("/s/events", headers={**basic("alice"), "Accept": "text/event-stream"},
                   buffered=False)
    try:
        assert r.status_code == 200
        assert r.mimetype == "text/event-stream"
        assert "Accept" in r.headers.get("Vary", "")
    finally:
        r.close()


# -- a bounded latest -------------------------------------------------------------------------

def test_latest_looks_only_through_the_newest_events(served, monkeypatch):
    client, job, _ = served
    store = client.application.extensions["uws"].store
    with store.engine.begin() as conn:
        for n in range(3):
            record(conn, Change(f"recent{n}", "s", "alice", None, "PENDING"))
    monkeypatch.setattr(store_events, "LATEST_SCAN", 3)
    assert [e["jobId"] for e in _latest(client)] == ["recent0", "recent1", "recent2"]


def test_latest_still_lists_every_recent_job(served):
    client, job, _ = served
    assert job in [e["jobId"] for e in _latest(client)]


def _latest(client) -> list:
    """The events of ``?latest`` once none is held back (PostgreSQL holds events back
    while a transaction older than them runs, anywhere on the database server)."""
    answers = []

    def settled():
        r = client.get("/s/events?latest", headers={**basic("alice"),
                                                      "Accept": "application/json"})
        answers.append(r.get_json())
        return not answers[-1]["pending"]

    wait_for(settled)
    return answers[-1]["events"]


# -- odd query strings: a 4xx or a 200, never a 500 -------------------------------------------

ROUTES = ("/stats", "/s/stats", "/metrics", "/s/holds", "/s/batches", "/s/batches/{batch}",
          "/s/events", "/s/availability", "/s/capabilities", "/s", "/s/{job}",
          "/s/{job}/phase", "/s/{job}/parameters", "/s/{job}/results", "/s/{job}/error",
          "/s/{job}/quote", "/s/{job}/executionduration", "/s/{job}/destruction",
          "/s/{job}/owner", "/s/batches/nosuch", "/")


@pytest.mark.parametrize("route", ROUTES)
def test_odd_query_strings_never_answer_500(served, route):
    client, job, batch = served
    path = route.format(job=job, batch=batch)
    for user in ("alice", "root"):
        for accept in ACCEPTS:
            for query in ODD_QUERIES:
                r = client.get(f"{path}?{query}", headers={**basic(user), "Accept": accept})
                assert r.status_code == 200 or 400 <= r.status_code < 500, \
                    (user, accept, query, r.status_code, r.data[:200])
