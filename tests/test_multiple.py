"""Parameters declared ``multiple``: given several times, kept in order, each one line."""
from __future__ import annotations

import pytest
from werkzeug.datastructures import MultiDict

from uws.web.app import create_app, shutdown

from conftest import ValidatingClient, make_config
from uwshelp import path_of

SERVICES = {"tagged": {"runner": "uws.demo:sleep", "parameters": [
    {"name": "DURATION", "type": "float", "default": "0"},
    {"name": "FAIL", "type": "boolean", "default": "false"},
    {"name": "MESSAGE", "type": "string", "default": ""},
    {"name": "TAGS", "type": "string", "multiple": True},
    {"name": "N", "type": "integer", "multiple": True}]}}


@pytest.fixture
def client(tmp_path, db_url):
    app = create_app(make_config(tmp_path, db_url, services=SERVICES, executor="none",
                                 scheduler=False))
    app.test_client_class = ValidatingClient
    yield app.test_client()
    shutdown(app)


def create(client, pairs) -> str:
    r = client.post("/tagged", data=MultiDict(pairs))
    assert r.status_code == 303, r.data
    return path_of(r.headers["Location"])


def values(client, path: str, name: str) -> list[str]:
    return client.get(f"{path}/parameters/{name}").get_data(as_text=True).split("\n")


def test_a_multiple_parameter_keeps_every_value_in_order(client):
    path = create(client, [("TAGS", "b"), ("TAGS", "a"), ("N", "3"), ("N", "1")])
    assert values(client, path, "TAGS") == ["b", "a"]
    assert values(client, path, "N") == ["3", "1"]


def test_an_update_adds_values_to_a_multiple_parameter(client):
    path = create(client, [("TAGS", "a")])
    assert client.post(f"{path}/parameters", data={"TAGS": "b"}).status_code == 303
    assert values(client, path, "TAGS") == ["a", "b"]


def test_each_value_of_a_multiple_parameter_is_checked(client):
    r = client.post("/tagged", data=MultiDict([("N", "1"), ("N", "x")]))
    assert r.status_code == 400 and b"N" in r.data


@pytest.mark.parametrize("value", ["a\nb", "a\r\nb", "a\rb"])
def test_a_value_of_several_lines_answers_400(client, value):
    """Its lines would read as values of their own in GET {job}/parameters/NAME."""
    r = client.post("/tagged", data={"TAGS": value})
    assert r.status_code == 400 and b"TAGS" in r.data
    path = create(client, [("TAGS", "a")])
    put = client.put(f"{path}/parameters/TAGS", data=value.encode(), content_type="text/plain")
    assert put.status_code == 400
    assert values(client, path, "TAGS") == ["a"]


def test_a_parameter_not_multiple_given_twice_answers_400(client):
    r = client.post("/tagged", data=MultiDict([("MESSAGE", "a"), ("MESSAGE", "b")]))
    assert r.status_code == 400 and b"MESSAGE" in r.data
