"""The Retry-After header (RFC 9110, 10.2.3): how many seconds a server asked its client to wait.

One reading for the API server's answers (source/kube.py) and the Collector's (export/otlp/transport.py). The
value is delay-seconds or an HTTP-date; a date is measured from ``now``, the caller's wall time, so the reading
stays a pure function. The model imports only the standard library's computational modules (``email.utils``
brings ``socket``), so the three date forms every HTTP recipient must accept are read with ``re`` and ``calendar``.
"""

from __future__ import annotations

import calendar
import re

__all__ = ["retry_after_seconds"]

_SECONDS = re.compile(r"\d+(?:\.\d+)?")
_MONTHS = {name: number for number, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)}
_CLOCK = r"(\d\d):(\d\d):(\d\d)"
# IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT"; obsolete RFC 850 "Sunday, 06-Nov-94 08:49:37 GMT" and asctime
# "Sun Nov  6 08:49:37 1994". Groups: day, month, year, hour, minute, second.
_IMF_FIXDATE = re.compile(rf"[a-z]{{3}}, (\d\d) ([a-z]{{3}}) (\d{{4}}) {_CLOCK} gmt")
_RFC850 = re.compile(rf"[a-z]+, (\d\d)-([a-z]{{3}})-(\d\d) {_CLOCK} gmt")
_ASCTIME = re.compile(rf"[a-z]{{3}} ([a-z]{{3}}) ([ \d]\d) {_CLOCK} (\d{{4}})")
_DAY = 86400
_YEAR = 365.2425 * _DAY
_FIFTY_YEARS = 50 * _YEAR


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """Seconds to wait (0.0 for a date already past), or None when the header is absent or neither form."""
    if value is None:
        return None
    text = value.strip()
    if _SECONDS.fullmatch(text):
        return float(text)
    when = _http_date(text.lower(), now)
    return None if when is None else max(0.0, when - now)


def _http_date(text: str, now: float) -> int | None:
    """The Unix time an HTTP-date names, or None."""
    if found := _IMF_FIXDATE.fullmatch(text):
        day, month, year, hour, minute, second = found.groups()
        return _unix(int(year), month, int(day), int(hour), int(minute), int(second))
    if found := _ASCTIME.fullmatch(text):
        month, day, hour, minute, second, year = found.groups()
        return _unix(int(year), month, int(day), int(hour), int(minute), int(second))
    if found := _RFC850.fullmatch(text):
        day, month, yy, hour, minute, second = found.groups()
        # A two-digit year more than 50 years ahead is the latest past year with those digits (RFC 9110, 5.6.7).
        century = (1970 + int(now // _YEAR)) // 100 * 100  # now's, give or take a day at the turn of a year
        for guess in (century + 100, century, century - 100):
            when = _unix(guess + int(yy), month, int(day), int(hour), int(minute), int(second))
            if when is not None and when <= now + _FIFTY_YEARS:
                return when
    return None


def _unix(year: int, month_name: str, day: int, hour: int, minute: int, second: int) -> int | None:
    month = _MONTHS.get(month_name)
    if (month is None or year < 1 or not 1 <= day <= calendar.monthrange(year, month)[1] or hour > 23 or minute > 59
            or second > 60):
        return None
    return calendar.timegm((year, month, day, hour, minute, second))
