import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.model.quantity import MAX_QUANTITY, NANO, QuantityError, parse_quantity, to_bytes

N = NANO


@pytest.mark.parametrize("text,expected", [
    ("100m", 1 * N // 10),
    ("1", 1 * N),
    ("1.5", 3 * N // 2),
    (".5", 1 * N // 2),
    ("5.", 5 * N),
    ("+2", 2 * N),
    ("-2", -2 * N),
    ("1e3", 1000 * N),
    ("1E3", 1000 * N),
    ("1e-3", 1 * N // 1000),
    ("1E", 10**18 * N),  # exa, not an exponent
    ("2Ki", 2048 * N),
    ("1Gi", 2**30 * N),
    ("1.5Gi", 3 * 2**29 * N),
    ("500M", 500_000_000 * N),
    ("128974848", 128974848 * N),
    ("129e6", 129_000_000 * N),
    ("123Mi", 123 * 2**20 * N),
    ("1n", 1 * N // 10**9),
    ("1u", 1 * N // 10**6),
    ("3k", 3000 * N),
    ("2T", 2 * 10**12 * N),
    ("1Pi", 2**50 * N),
])
def test_grammar_from_apimachinery(text, expected):
    assert parse_quantity(text) == expected


def test_arithmetic_is_exact():
    assert parse_quantity("100m") + parse_quantity("200m") == parse_quantity("300m")
    assert sum(parse_quantity("1m") for _ in range(1000)) == 1 * N


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
    scale = {"": N, "m": N // 1000, "k": 1000 * N, "M": 10**6 * N, "G": 10**9 * N, "Ki": 2**10 * N, "Mi": 2**20 * N, "Gi": 2**30 * N}[suffix]
    assert parse_quantity(f"{n}{suffix}") == n * scale


def test_finer_than_nano_rounds_up_as_kubernetes_does():
    assert parse_quantity("1e-10") == 1
    assert parse_quantity("0.1n") == 1
    assert to_bytes(parse_quantity("1.5")) == 2
