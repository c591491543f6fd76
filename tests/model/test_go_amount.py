"""Request sums in the form Go's resource.Quantity holds them (agent/model/go_amount.py).

What the autoscaler's own code makes of such sums is checked against it by the vectors (found_by_oracle.json) and the
differential test; these are the properties the verdict relies on to use the form only where it matters.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.model.go_amount import INT64_MAX, GoAmount, go_amount, milli_value
from agent.model.quantity import div_round_up

# Every form ParseQuantity gives: int64s at several powers of ten, big decimals; small and past int64 in milli-units.
TEXTS = ("0", "1", "100m", "1e3", "0.5Gi", "1.5", "12345678901234567n", "2Gi", "9P", "10P", "9E", "5e17", "1Ei",
         "4Ei", "92233720368547758", "9223372036854775807", "9223372036854775807m", "9223372036G", "1000000u")


def _sum(texts: list[str]) -> int:
    total = 0  # resource.MustParse("0")
    for text in texts:
        total = total + go_amount(text)
    return total


@given(st.lists(st.sampled_from(TEXTS), max_size=6))
def test_the_sum_is_exact_and_its_milli_value_is_exact_up_to_int64(texts):
    total = _sum(texts)
    assert int(total) == sum(int(go_amount(t)) for t in texts)
    exact = div_round_up(int(total), 10**6)
    got = milli_value(total)
    assert -2**63 <= got <= INT64_MAX
    if exact <= INT64_MAX:
        assert got == exact


@given(st.lists(st.sampled_from(TEXTS), min_size=1, max_size=6))
def test_a_sum_stays_an_int64_only_while_it_fits_at_its_power_of_ten(texts):
    total = _sum(texts)
    assert isinstance(total, GoAmount)
    if not total.dec:
        assert -2**63 <= total.unscaled <= INT64_MAX
        assert not any(go_amount(t).dec for t in texts)


def test_an_int64_whose_milli_units_do_not_fit_gives_zero_or_wraps_by_its_power_of_ten():
    assert milli_value(go_amount("10P")) == 0  # 10 at the power 15: scaled ten at a time, 0 on overflow
    assert milli_value(go_amount("92233720368547758")) == (92233720368547758 * 1000 + 2**63) % 2**64 - 2**63
