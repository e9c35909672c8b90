"""Numbers and times as clients send them: ASCII only, as DALI writes them.

A parameter reaches its job exactly as sent; Python reads "１", "1_0" and " 5 " as
numbers, but the program a command runner starts may not.
"""
from __future__ import annotations

import pytest

from uws.domain import numbers

from uwshelp import create, path_of

NOT_ASCII_NUMBERS = ["\uff11", "\u0661\u0662", "1_0", " 5 ", "5\n", "0x10", "+", ""]


@pytest.mark.parametrize("text, value", [("5", 5), ("-3", -3), ("+7", 7), ("007", 7)])
def test_an_integer_is_a_sign_and_ascii_digits(text, value):
    assert numbers.integer(text) == value


@pytest.mark.parametrize("text", NOT_ASCII_NUMBERS + ["1.0", "1e3"])
def test_anything_else_is_no_integer(text):
    with pytest.raises(ValueError, match="not an integer"):
        numbers.integer(text)


@pytest.mark.parametrize("text, value", [("1.5", 1.5), ("-.5", -0.5), ("2.", 2.0),
                                         ("1e3", 1000.0), ("6E-1", 0.6), ("3", 3.0)])
def test_a_decimal_is_written_as_dali_writes_it(text, value):
    assert numbers.decimal(text) == value


@pytest.mark.parametrize("text", NOT_ASCII_NUMBERS + ["nan", "inf", "-Infinity", ".", "1e"])
def test_anything_else_is_no_decimal(text):
    with pytest.raises(ValueError, match="not a number"):
        numbers.decimal(text)


@pytest.mark.parametrize("value", ["\uff11", "1_0", " 5 "])
def test_an_integer_parameter_in_other_digits_answers_400(client, value):
    r = client.post("/sleep", data={"DURATION": value})
    assert r.status_code == 400 and b"DURATION" in r.data


@pytest.mark.parametrize("name, value", [("PRIORITY", "\uff11"), ("STARTAFTER", "\uff12\uff10\uff13\uff10"),
                                         ("EXECUTIONDURATION", "1_000")])
def test_a_control_value_in_other_digits_answers_400(client, name, value):
    r = client.post("/sleep", data={"DURATION": "1", name: value})
    assert r.status_code == 400 and name.encode() in r.data


@pytest.mark.parametrize("query", ["LAST=\uff11", "WAIT=\uff11"])
def test_a_query_value_in_other_digits_answers_400(client, query):
    path = create(client, DURATION="1")
    target = "/sleep" if query.startswith("LAST") else path
    assert client.get(f"{target}?{query}").status_code == 400


@pytest.mark.parametrize("value", ["99999999999", "9" * 400, "1e999"])
def test_an_execution_duration_past_any_bound_is_clamped_to_the_services(client, value):
    """UWS 1.1 §2.2.3.1: the server may grant less than asked."""
    r = client.post("/sleep", data={"DURATION": "1", "EXECUTIONDURATION": value})
    assert r.status_code == 303
    path = path_of(r.headers["Location"])
    granted = client.get(f"{path}/executionduration").get_data(as_text=True)
    assert 0 < int(granted) < 2**31
