"""Retry-After in both its forms, the HTTP-date's three against the standard library's own reading of them."""

from __future__ import annotations

import datetime as dt
import email.utils

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.model.retry_after import retry_after_seconds

NOW = dt.datetime(2026, 12, 2, 9, 36, 0, tzinfo=dt.timezone.utc).timestamp()
MOMENTS = st.datetimes(min_value=dt.datetime(1970, 1, 1), max_value=dt.datetime(2999, 12, 31)).map(
    lambda d: d.replace(microsecond=0, tzinfo=dt.timezone.utc))


@pytest.mark.parametrize("value, seconds", [
    ("120", 120.0), ("0", 0.0), (" 7 ", 7.0), ("1.5", 1.5), ("0007", 7.0),
    (None, None), ("", None), ("-3", None), ("soon", None), ("1e3", None), ("inf", None), ("5 s", None),
])
def test_delay_seconds(value, seconds):
    assert retry_after_seconds(value, NOW) == seconds


def test_an_http_date_is_seconds_from_now_and_a_past_one_is_no_wait():
    assert retry_after_seconds("Wed, 02 Dec 2026 09:38:00 GMT", NOW) == 120.0
    assert retry_after_seconds("Wed, 02 Dec 2026 09:36:00 GMT", NOW) == 0.0
    assert retry_after_seconds("Sun, 06 Nov 1994 08:49:37 GMT", NOW) == 0.0


@given(MOMENTS)
def test_imf_fixdate_as_the_standard_library_reads_it(moment):
    text = email.utils.format_datetime(moment, usegmt=True)  # "Wed, 02 Dec 2026 09:38:00 GMT"
    assert email.utils.parsedate_to_datetime(text) == moment
    assert retry_after_seconds(text, 0.0) == moment.timestamp()
    assert retry_after_seconds(text.upper(), 0.0) == retry_after_seconds(text.lower(), 0.0) == moment.timestamp()


@given(MOMENTS)
def test_the_obsolete_forms_every_recipient_must_accept(moment):
    asctime = moment.strftime("%a %b ") + f"{moment.day:2d}" + moment.strftime(" %H:%M:%S %Y")  # "Sun Nov  6 ..."
    assert retry_after_seconds(asctime, 0.0) == moment.timestamp()
    # RFC 850's two-digit year: the latest year with those digits not more than 50 years after now.
    rfc850 = moment.strftime("%A, %d-%b-%y %H:%M:%S GMT")
    now = moment.timestamp() - 40 * 365 * 86400  # the date is 40 years ahead: read in this century
    assert retry_after_seconds(rfc850, now) == moment.timestamp() - now
    now = moment.timestamp() + 86400  # a day behind now, so no wait
    assert retry_after_seconds(rfc850, now) == 0.0


def test_an_rfc850_date_more_than_fifty_years_ahead_is_last_century():
    assert retry_after_seconds("Sunday, 06-Nov-94 08:49:37 GMT", NOW) == 0.0  # 1994, not 2094
    in_2070 = dt.datetime(2070, 1, 1, tzinfo=dt.timezone.utc).timestamp()
    assert retry_after_seconds("Wednesday, 01-Jan-70 00:00:00 GMT", NOW) == in_2070 - NOW  # 44 years ahead: 2070


@pytest.mark.parametrize("value", [
    "Wed, 31 Nov 2026 09:38:00 GMT",  # no such day
    "Sun, 29 Feb 2026 09:38:00 GMT",  # not a leap year
    "Wed, 02 Dec 2026 24:00:00 GMT",
    "Sat, 01 Jan 0000 00:00:00 GMT",  # no year 0 in the proleptic Gregorian calendar of the standard library
    "Wed, 02 Foo 2026 09:38:00 GMT",
    "Wed, 02 Dec 2026 09:38:00 CET",  # HTTP dates are GMT
    "2026-12-02T09:38:00Z",
])
def test_what_is_not_an_http_date_is_no_value(value):
    assert retry_after_seconds(value, NOW) is None
