"""A boolean parameter takes ``true`` or ``false`` in any case, kept as ``true`` or
``false``; every other word answers 400 naming the parameter and the accepted words."""
from __future__ import annotations

import pytest

from test_create import create, job_xml, values
from uws.domain.parameters import ParameterError, ParamSpec

#: parsing and storing one value: the store's side is covered by tests/test_create.py
BACKENDS = ("sqlite",)

ACCEPTED = [("true", "true"), ("TRUE", "true"), ("True", "true"), ("tRuE", "true"),
            ("false", "false"), ("FALSE", "false"), ("False", "false")]
REFUSED = ["yes", "no", "on", "off", "1", "0", "T", "F", "y", "", " true", "true ", "truth"]


@pytest.mark.parametrize("sent,kept", ACCEPTED)
def test_an_accepted_word_is_kept_in_lower_case(client, sent, kept):
    job = job_xml(client, create(client, DURATION="0", FAIL=sent))
    assert values(job)["FAIL"] == kept


@pytest.mark.parametrize("sent,kept", ACCEPTED)
def test_an_accepted_word_is_kept_in_lower_case_when_changed(client, sent, kept):
    path = create(client, DURATION="0")
    r = client.post(f"{path}/parameters", data={"FAIL": sent})
    assert r.status_code == 303, r.data
    assert values(job_xml(client, path))["FAIL"] == kept


@pytest.mark.parametrize("word", REFUSED)
def test_any_other_word_answers_400_naming_the_parameter_and_the_words(client, word):
    r = client.post("/sleep", data={"DURATION": "0", "FAIL": word})
    assert r.status_code == 400, r.data
    assert b"FAIL" in r.data
    assert b"true or false" in r.data


@pytest.mark.parametrize("word", ["yes", "1", "on"])
def test_any_other_word_answers_400_when_changed(client, word):
    path = create(client, DURATION="0")
    r = client.post(f"{path}/parameters", data={"FAIL": word})
    assert r.status_code == 400, r.data
    assert b"FAIL" in r.data
    assert values(job_xml(client, path))["FAIL"] == "false"


def test_a_default_in_upper_case_is_kept_in_lower_case():
    spec = ParamSpec("B", type="boolean", default="TRUE")
    assert spec.check(spec.default or "") == "true"


def test_a_default_of_another_word_is_refused_by_the_configuration():
    with pytest.raises(ValueError, match="true or false"):
        ParamSpec("B", type="boolean", default="yes")


def test_the_typed_value_of_a_word_is_the_boolean():
    spec = ParamSpec("B", type="boolean")
    assert (spec.convert("TRUE"), spec.convert("false")) == (True, False)
    with pytest.raises(ParameterError):
        spec.convert("1")
