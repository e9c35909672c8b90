"""Times as clients send them (ISO 8601, UWS 1.1 §2.2.1): every form, one meaning."""
from __future__ import annotations

import datetime as dt

import pytest

from uws.domain.timeutil import format_time, parse_time

T = dt.datetime


@pytest.mark.parametrize("text, meant", [
    ("2015", T(2015, 1, 1)),                        # reduced precision: the period's start
    ("2015-10", T(2015, 10, 1)),
    ("2015-10-26", T(2015, 10, 26)),
    ("20151026", T(2015, 10, 26)),                  # basic format
    ("20151026T1030", T(2015, 10, 26, 10, 30)),
    ("20151026T103000Z", T(2015, 10, 26, 10, 30)),
    ("20151026T1030+0100", T(2015, 10, 26, 9, 30)),
    ("2015-10-26T10", T(2015, 10, 26, 10)),         # the hour alone
    ("2015-299", T(2015, 10, 26)),                  # ordinal dates
    ("2015299", T(2015, 10, 26)),
    ("2016-366", T(2016, 12, 31)),
    ("2015-10-26T10:30:00.123456Z", T(2015, 10, 26, 10, 30, 0, 123456)),
    ("2015-10-26T10:30:00", T(2015, 10, 26, 10, 30)),   # no zone: UTC
    ("2015-10-26 10:30:00-02:00", T(2015, 10, 26, 12, 30)),
])
def test_iso_8601_forms_are_read_as_utc(text, meant):
    assert parse_time(text) == meant


@pytest.mark.parametrize("text", ["", "garbage", "201510", "2015-13", "2015-366", "2015-000",
                                  "2015-10-26T25:00", "0000"])
def test_what_is_not_an_iso_8601_time_is_refused(text):
    with pytest.raises(ValueError):
        parse_time(text)


def test_times_are_written_in_utc_with_milliseconds_and_z():
    assert format_time(T(2015, 10, 26, 10, 30, 0, 123456)) == "2015-10-26T10:30:00.123Z"


def test_datetime_parameters_read_every_form_the_same_way():
    from uws.domain.parameters import ParamSpec
    assert ParamSpec("WHEN", "datetime").convert("2015-10") == T(2015, 10, 1)
