"""``uws jobs events`` and the Client's events: pages of this server (SQLite is enough:
tests/test_events.py covers the server on both databases), a followed stream resumed with
Last-Event-ID, and every integer field of a page or stream checked (exit 8, no traceback)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from minimal_uws import Scripted
from uws.client import Client, ProtocolError
from uws.client.cli import jobs

BACKENDS = ("sqlite",)
HTTP, PROTOCOL = 6, 8


def event(seq: int, job: str = "J", old: str | None = "QUEUED", new: str | None = "EXECUTING") -> dict:
    return {"id": seq, "jobId": job, "batchId": None, "service": "s", "ownerId": None,
            "oldPhase": old, "newPhase": new, "time": "2026-12-01T17:40:14.847Z", "progress": None}


def test_events_lists_a_jobs_creation_and_start(live_server):
    url = f"{live_server.url}/sleep"
    job = Client(url).create({"DURATION": 60}, run=True)
    result = CliRunner().invoke(jobs, ["--url", url, "--json", "events"])
    assert result.exit_code == 0, result.output
    mine = [(e["old_phase"], e["new_phase"]) for e in json.loads(result.stdout) if e["job_id"] == job.id]
    assert mine[:2] == [(None, "PENDING"), ("PENDING", "QUEUED")]


def test_events_after_an_id_start_after_it(live_server):
    client = Client(f"{live_server.url}/sleep")
    client.create({"DURATION": 5})
    first = client.events().events[0].id
    later = client.create({"DURATION": 5})
    assert [e.job_id for e in client.all_events(after=first)] == [later.id]


def test_an_event_line_shows_its_time_to_the_second():
    page = {"events": [event(7)], "lastEventId": 7, "next": None, "pending": False}
    with Scripted(lambda r: (200, {"Content-Type": "application/json"}, json.dumps(page))) as server:
        result = CliRunner().invoke(jobs, ["--url", server.url, "events"])
    assert result.stdout == "7 2026-12-01T17:40:14Z J QUEUED -> EXECUTING\n"


def _stream(*events: dict) -> bytes:
    return b"retry: 10\n\n" + b"".join(
        f"id: {e['id']}\nevent: phase\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def streams(*answers):
    """A Scripted answer: each GET the next of ``answers`` (a stream of events, or an
    HTTP status to end with)."""
    left = list(answers)

    def answer(request):
        given = left.pop(0) if left else 401
        if isinstance(given, int):
            return given, {"Content-Type": "text/plain"}, "stop"
        return 200, {"Content-Type": "text/event-stream"}, _stream(*given)
    return answer


def test_follow_reconnects_after_the_last_event_it_gave():
    with Scripted(streams([event(4)], [event(5)])) as server:
        followed = Client(server.url).follow_events(after=3)
        assert [next(followed).id, next(followed).id] == [4, 5]
    sent = [r["headers"].get("Last-Event-ID") for r in server.requests]
    assert sent == ["3", "4"]
    assert all(r["headers"]["Accept"] == "text/event-stream" for r in server.requests)


def test_follow_without_a_start_begins_at_the_newest_event():
    def answer(request):
        if "latest" in request.path:
            page = {"events": [event(9)], "lastEventId": 9, "next": None, "pending": False}
            return 200, {"Content-Type": "application/json"}, json.dumps(page)
        return 200, {"Content-Type": "text/event-stream"}, _stream(event(10))

    with Scripted(answer) as server:
        assert next(Client(server.url).follow_events()).id == 10
    assert server.requests[1]["headers"]["Last-Event-ID"] == "9"


def test_events_follow_prints_each_event_across_reconnections():
    with Scripted(streams([event(4)], [event(5, new="COMPLETED", old="EXECUTING")], 403)) as server:
        result = CliRunner().invoke(jobs, ["--url", server.url, "events", "--follow", "--after", "3"])
    assert result.exit_code == HTTP
    assert result.stdout.splitlines() == ["4 2026-12-01T17:40:14Z J QUEUED -> EXECUTING",
                                          "5 2026-12-01T17:40:14Z J EXECUTING -> COMPLETED"]


PAGES = {
    "lastEventId-text": {"events": [], "lastEventId": "5", "next": None, "pending": False},
    "lastEventId-float": {"events": [], "lastEventId": 5.0, "next": None, "pending": False},
    "lastEventId-true": {"events": [], "lastEventId": True, "next": None, "pending": False},
    "lastEventId-null": {"events": [], "lastEventId": None, "next": None, "pending": False},
    "event-id-text": {"events": [{**event(1), "id": "1"}], "lastEventId": 1, "next": None,
                      "pending": False},
    "progress-text": {"events": [{**event(1), "progress": "50"}], "lastEventId": 1, "next": None,
                      "pending": False},
    "events-not-a-list": {"events": {}, "lastEventId": 1, "next": None, "pending": False},
}


@pytest.mark.parametrize("page", PAGES.values(), ids=PAGES.keys())
def test_a_page_field_of_the_wrong_type_exits_8_naming_it(page):
    with Scripted(lambda r: (200, {"Content-Type": "application/json"}, json.dumps(page))) as server:
        result = CliRunner().invoke(jobs, ["--url", server.url, "events"])
    assert result.exit_code == PROTOCOL, result.output
    assert result.stderr.startswith("uws jobs: not a UWS answer: ") and result.stderr.count("\n") == 1
    assert "is not a" in result.stderr or "is not an" in result.stderr


@pytest.mark.parametrize("stream", [b"id: abc\ndata: {}\n\n", b"retry: soon\n\n",
                                    b"id: 1\ndata: " + json.dumps({**event(1), "id": 1.5}).encode()
                                    + b"\n\n"], ids=["id", "retry", "data-id"])
def test_a_stream_integer_that_is_not_one_exits_8(stream):
    with Scripted(lambda r: (200, {"Content-Type": "text/event-stream"}, stream)) as server:
        result = CliRunner().invoke(jobs, ["--url", server.url, "events", "--follow", "--after", "0"])
    assert result.exit_code == PROTOCOL, result.output
    assert "not an integer" in result.stderr


def test_an_answer_that_is_no_event_stream_is_a_protocol_error():
    with Scripted(lambda r: (200, {"Content-Type": "text/html"}, "<p>hi</p>")) as server:
        with pytest.raises(ProtocolError, match="not an event stream"):
            next(Client(server.url).follow_events(after=0))
