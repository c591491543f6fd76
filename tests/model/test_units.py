"""Readable units: one rounding rule for cpu and memory, in the table and on the page."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from agent.model.quantity import NANO, parse_quantity
from agent.model.units import cores, memory, percent


@pytest.mark.parametrize("text,shown", [
    ("0", "0"), ("250m", "250m"), ("1", "1"), ("1.5", "1.5"), ("2500m", "2.5"),
    ("3.875", "3.88"),      # three significant digits, half up
    ("12.25", "12.3"), ("110.5", "111"), ("1234", "1234"),  # the whole part is never cut
    ("999.6m", "1"),        # rounds up into the next unit
    ("999.4m", "999m"), ("12.5m", "12.5m"), ("100u", "100u"), ("1n", "1n"),
])
def test_cpu_in_cores_or_millicores(text, shown):
    assert cores(parse_quantity(text)) == shown


@pytest.mark.parametrize("text,shown", [
    ("0", "0"), ("512", "512B"), ("100Ki", "100Ki"), ("512Mi", "512Mi"), ("1Gi", "1Gi"), ("1.5Gi", "1.5Gi"),
    ("1023Mi", "1023Mi"),
    ("1023.6Mi", "1Gi"),       # 1024Mi after rounding is shown as 1Gi
    ("3000000000", "2.79Gi"),  # 2.7939... Gi
    ("20683511126", "19.3Gi"),
    ("1Ei", "1Ei"),
])
def test_memory_in_binary_units(text, shown):
    assert memory(parse_quantity(text)) == shown


def test_negative_values_keep_their_sign_for_headroom():
    assert cores(-parse_quantity("380m")) == "-380m" and memory(-parse_quantity("1.5Gi")) == "-1.5Gi"


def test_percent():
    assert (percent(1.11), percent(0.004), percent(0.125), percent(None)) == ("111%", "0%", "13%", "-")


@given(st.integers(min_value=1, max_value=10**6 * NANO))
def test_rounding_stays_within_half_a_unit_of_the_third_digit(nanos):
    text = cores(nanos)
    unit = {"m": 10**6, "u": 10**3, "n": 1}.get(text[-1], NANO)
    number = float(text.rstrip("mun"))
    assert abs(number * unit - nanos) <= 0.005 * nanos + unit  # within 0.5 % (3 significant digits)
