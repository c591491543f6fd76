"""Kubernetes resource quantities as exact integers of nano-units.

Kubernetes itself holds a quantity with at most nano precision: ParseQuantity
rounds anything finer up to the next nano (apimachinery quantity.go). So a
quantity here is an ``int`` count of 1e-9 of the base unit (cores, bytes):
sums and maxima are exact integer arithmetic, "100m" + "200m" is exactly
"300m", and floats appear only at the exporter.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["QuantityError", "parse_quantity", "NANO", "MAX_QUANTITY", "to_float", "to_bytes", "div_round_up"]

NANO = 10**9

# The grammar of k8s.io/apimachinery/pkg/api/resource (quantity.go):
#   <quantity> ::= <signedNumber><suffix>
#   <suffix>   ::= <binarySI> | <decimalExponent> | <decimalSI>
_QUANTITY = re.compile(
    r"""
    (?P<sign>[+-])?
    (?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?
    (?:
        (?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)
      | [eE](?P<exponent>[+-]?[0-9]+)
      | (?P<decimal>[numkMGTPE])
    )?
    """,
    re.VERBOSE,
)

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

# apimachinery keeps quantities in int64; anything larger is not a request a
# real cluster can hold, so it is treated as bad input.
MAX_QUANTITY = (2**63 - 1) * NANO
# Bounds the work done for "1e999999999" before the range check can run.
_MAX_EXPONENT = 40
_MAX_LENGTH = 64


class QuantityError(ValueError):
    """A string that is not a usable Kubernetes quantity."""

    def __init__(self, message: str, reason: str = "invalid_quantity") -> None:
        super().__init__(message)
        # "invalid_quantity" or "out_of_range": a bounded label for counters.
        self.reason = reason


def div_round_up(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


@lru_cache(maxsize=4096)
def parse_quantity(text: str) -> int:
    """Parse ``"250m"``, ``"1.5"``, ``"1e3"``, ``"2Gi"``... into nano-units.

    Cached because a node's pods repeat the same few strings in every event,
    and parsing is on the per-event path.
    """
    if not isinstance(text, str):
        raise QuantityError(f"quantity must be a string, got {type(text).__name__}")
    if len(text) > _MAX_LENGTH:
        raise QuantityError(f"quantity longer than {_MAX_LENGTH} characters", "out_of_range")
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match["int"] or match["frac"]):
        raise QuantityError(f"{text!r} is not a Kubernetes quantity")
    frac = match["frac"] or ""
    # The number as an integer mantissa and a power of ten.
    mantissa = int((match["int"] or "0") + frac)
    exponent10 = -len(frac) + 9  # in nano-units
    exponent2 = 0
    if match["binary"]:
        exponent2 = _BINARY[match["binary"]]
    elif match["exponent"] is not None:
        shift = int(match["exponent"])
        if abs(shift) > _MAX_EXPONENT:
            raise QuantityError(f"{text!r} is out of range", "out_of_range")
        exponent10 += shift
    elif match["decimal"]:
        exponent10 += _DECIMAL[match["decimal"]]
    value = mantissa << exponent2
    if exponent10 >= 0:
        value *= 10**exponent10
    else:
        # Finer than a nano: round up, as ParseQuantity does.
        value = div_round_up(value, 10**-exponent10)
    if value > MAX_QUANTITY:
        raise QuantityError(f"{text!r} is out of range", "out_of_range")
    return -value if match["sign"] == "-" else value


def to_float(nanos: int) -> float:
    """Cores (or bytes) as a float, for the exporter only."""
    return nanos / NANO


def to_bytes(nanos: int) -> int:
    """Whole bytes, rounding up as Quantity.Value() does."""
    return div_round_up(nanos, NANO)
