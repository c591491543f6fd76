from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.quantity import MAX_QUANTITY, QuantityError, format_bytes, format_cores, parse_quantity


@pytest.mark.parametrize("text,expected", [
    ("100m", Fraction(1, 10)),
    ("1", Fraction(1)),
    ("1.5", Fraction(3, 2)),
    (".5", Fraction(1, 2)),
    ("5.", Fraction(5)),
    ("+2", Fraction(2)),
    ("-2", Fraction(-2)),
    ("1e3", Fraction(1000)),
    ("1E3", Fraction(1000)),
    ("1e-3", Fraction(1, 1000)),
    ("1E", Fraction(10**18)),  # exa, not an exponent
    ("2Ki", Fraction(2048)),
    ("1Gi", Fraction(2**30)),
    ("1.5Gi", Fraction(3 * 2**29)),
    ("500M", Fraction(500_000_000)),
    ("128974848", Fraction(128974848)),
    ("129e6", Fraction(129_000_000)),
    ("123Mi", Fraction(123 * 2**20)),
    ("1n", Fraction(1, 10**9)),
    ("1u", Fraction(1, 10**6)),
    ("3k", Fraction(3000)),
    ("2T", Fraction(2 * 10**12)),
    ("1Pi", Fraction(2**50)),
])
def test_grammar_from_apimachinery(text, expected):
    assert parse_quantity(text) == expected


def test_arithmetic_is_exact():
    assert parse_quantity("100m") + parse_quantity("200m") == parse_quantity("300m")
    assert sum(parse_quantity("1m") for _ in range(1000)) == 1


@pytest.mark.parametrize("text,reason", [
    ("", "invalid_quantity"), ("1 Gi", "invalid_quantity"), ("1gi", "invalid_quantity"), ("Gi", "invalid_quantity"),
    ("1e", "invalid_quantity"), ("0x10", "invalid_quantity"), ("1.2.3", "invalid_quantity"), ("１", "invalid_quantity"),
    ("1e999999999", "out_of_range"), ("99999999999Ei", "out_of_range"), ("1" * 65, "out_of_range"),
])
def test_rejects_what_kubernetes_rejects(text, reason):
    with pytest.raises(QuantityError) as err:
        parse_quantity(text)
    assert err.value.reason == reason


def test_non_string_is_an_error_not_a_crash():
    with pytest.raises(QuantityError):
        parse_quantity(5)  # type: ignore[arg-type]


@given(st.text(max_size=80))
def test_any_text_parses_or_raises_quantity_error(text):
    try:
        value = parse_quantity(text)
    except QuantityError:
        return
    assert abs(value) <= MAX_QUANTITY


@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi"]))
def test_integers_with_suffixes_roundtrip(n, suffix):
    scale = {"": 1, "m": Fraction(1, 1000), "k": 1000, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}[suffix]
    assert parse_quantity(f"{n}{suffix}") == n * scale


def test_formatting_matches_kubectl_style():
    assert format_cores(Fraction(1, 4)) == "250m"
    assert format_cores(Fraction(2)) == "2"
    assert format_bytes(Fraction(2**30)) == "1Gi"
    assert format_bytes(Fraction(1000)) == "1000"
