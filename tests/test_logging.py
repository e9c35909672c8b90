"""Log lines an operator can use: one a request (with its id), one a job phase change,
and start-up lines that never show the database password; as text or JSON."""
from __future__ import annotations

import io
import json
import logging

import pytest

from uws.http import logs
from uws.web import app as app_module
from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, make_config

PROXY = "10.0.0.5"


@pytest.fixture
def make_app(tmp_path):
    apps = []

    def make(**overrides):
        cfg = make_config(tmp_path / str(len(apps)), "", executor="none", scheduler=False,
                          trusted_proxies=[PROXY], **overrides)
        app = create_app(cfg)
        app.test_client_class = ValidatingClient
        apps.append(app)
        return app

    yield make
    for app in apps:
        shutdown(app)


@pytest.fixture
def lines():
    """The lines of the uws loggers, formatted as ``fmt`` (lines(fmt) starts capturing)."""
    stream, attached = io.StringIO(), []

    def capture(fmt: str):
        handler = logs.handler(fmt, stream)
        logging.getLogger("uws").addHandler(handler)
        attached.append(handler)
        return lambda: stream.getvalue().splitlines()

    yield capture
    for handler in attached:
        logging.getLogger("uws").removeHandler(handler)


def test_a_request_line_in_text_names_client_method_path_status_duration_and_id(
        make_app, lines):
    app = make_app()
    read = lines("text")
    r = app.test_client().get("/sleep?PHASE=PENDING&token=secret", headers={
        "X-Forwarded-For": "203.0.113.9", "X-Request-ID": "abc-123"},
        environ_base={"REMOTE_ADDR": PROXY})
    assert r.status_code == 200
    (line,) = [x for x in read() if "uws.access" in x]
    assert '203.0.113.9 "GET /sleep" 200 ' in line
    assert " ms [abc-123]" in line
    assert "secret" not in line and "PHASE" not in line     # no query string at all


def test_a_request_line_in_json_is_one_object_with_fixed_keys(make_app, lines):
    app = make_app()
    read = lines("json")
    r = app.test_client().get("/sleep", environ_base={"REMOTE_ADDR": "198.51.100.7"})
    assert r.status_code == 200
    (record,) = [json.loads(x) for x in read() if '"uws.access"' in x]
    assert record["client"] == "198.51.100.7"
    assert record["method"] == "GET" and record["path"] == "/sleep"
    assert record["status"] == 200 and record["duration_ms"] >= 0
    assert record["request_id"] == r.headers["X-Request-ID"]
    assert {"time", "level", "logger", "message", "job_id"} <= set(record)


def test_a_trusted_proxy_s_request_id_is_echoed(make_app):
    r = make_app().test_client().get("/sleep", headers={"X-Request-ID": "req-42"},
                                     environ_base={"REMOTE_ADDR": PROXY})
    assert r.status_code == 200
    assert r.headers["X-Request-ID"] == "req-42"


def test_a_request_id_is_made_when_none_is_given(make_app):
    r = make_app().test_client().get("/sleep")
    assert r.status_code == 200
    assert len(r.headers["X-Request-ID"]) == 32


def test_an_untrusted_peer_s_request_id_is_replaced(make_app):
    r = make_app().test_client().get("/sleep", headers={"X-Request-ID": "req-42"},
                                     environ_base={"REMOTE_ADDR": "198.51.100.7"})
    assert r.status_code == 200
    assert r.headers["X-Request-ID"] != "req-42"


@pytest.mark.parametrize("hostile", ["x" * 129, "a\x01b", "a b", "a\x7fb"])
def test_a_hostile_request_id_is_replaced(make_app, hostile):
    r = make_app().test_client().get("/sleep", headers={"X-Request-ID": hostile},
                                     environ_base={"REMOTE_ADDR": PROXY})
    assert r.status_code == 200
    assert r.headers["X-Request-ID"] != hostile
    assert len(r.headers["X-Request-ID"]) == 32


def test_a_control_character_in_the_path_stays_on_one_log_line(make_app, lines):
    app = make_app()
    read = lines("text")
    r = app.test_client().get("/sleep%0Afake%20line")
    assert r.status_code == 404
    (line,) = [x for x in read() if "uws.access" in x]
    assert "%0A" in line


def test_a_job_phase_change_is_logged_with_its_fields(make_app, lines):
    app = make_app()
    read = lines("json")
    client = app.test_client()
    r = client.post("/sleep", data={"DURATION": "1"})
    assert r.status_code == 303
    job_id = r.headers["Location"].rstrip("/").rsplit("/", 1)[-1]
    r = client.post(f"/sleep/{job_id}/phase", data={"PHASE": "RUN"})
    assert r.status_code == 303
    records = [json.loads(x) for x in read() if '"uws.jobs"' in x]
    (change,) = [x for x in records if x["to_phase"] == "QUEUED"]
    assert change["job_id"] == job_id and change["service"] == "sleep"
    assert change["from_phase"] == "PENDING" and change["owner"] == ""
    assert change["request_id"]         # logged while serving the request


def test_a_failed_job_s_line_has_its_error_s_first_line(make_app, lines):
    from uws.domain.model import ErrorSummary
    app = make_app()
    read = lines("text")
    client = app.test_client()
    r = client.post("/sleep", data={"DURATION": "1"})
    assert r.status_code == 303
    job_id = r.headers["Location"].rstrip("/").rsplit("/", 1)[-1]
    store = app.extensions["uws"].store
    assert store.mark_failed(job_id, ErrorSummary("fatal", "disk full\nTraceback ..."))
    (line,) = [x for x in read() if "uws.jobs" in x and "-> ERROR" in x]
    assert f"job {job_id} (sleep" in line and line.endswith("PENDING -> ERROR: disk full")


def test_the_start_up_line_names_the_database_without_its_password(tmp_path, caplog):
    cfg = make_config(tmp_path, "postgresql://uws:s3cret@db.example.org/uws")
    with caplog.at_level(logging.INFO, logger="uws.web.app"):
        app_module._log_start(cfg)
    text = caplog.text
    assert "postgresql://uws:***@db.example.org/uws" in text
    assert "s3cret" not in text
    assert "executor local" in text


def test_configure_twice_adds_no_second_handler(monkeypatch):
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)
    logs.configure("text")
    logs.configure("json")
    assert len(root.handlers) == 1
    assert isinstance(root.handlers[0].formatter, logs.JsonFormatter)
