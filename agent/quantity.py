"""Kubernetes resource quantities, parsed exactly.

Requests are summed and compared before anything is exported; doing that in
floating point would turn "100m" + "200m" into 0.30000000000000004 cores and
make node totals drift, so quantities are :class:`fractions.Fraction` in base
units (cores, bytes) and become floats only at the exporter.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

__all__ = ["QuantityError", "parse_quantity", "format_cores", "format_bytes", "MAX_QUANTITY"]

# The grammar of k8s.io/apimachinery/pkg/api/resource (quantity.go):
#   <quantity> ::= <signedNumber><suffix>
#   <suffix>   ::= <binarySI> | <decimalExponent> | <decimalSI>
_QUANTITY = re.compile(
    r"""
    (?P<sign>[+-])?
    (?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)
    (?:
        (?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)
      | [eE](?P<exponent>[+-]?[0-9]+)
      | (?P<decimal>[numkMGTPE])
    )?
    """,
    re.VERBOSE,
)

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

# apimachinery keeps quantities in int64 scaled values; anything beyond that
# is not a request a real cluster can hold, so it is treated as bad input.
MAX_QUANTITY = Fraction(2**63 - 1)
# Bounds the work done for "1e999999999" before the range check can run.
_MAX_EXPONENT = 40
_MAX_LENGTH = 64


class QuantityError(ValueError):
    """A string that is not a usable Kubernetes quantity."""

    def __init__(self, message: str, reason: str = "invalid_quantity") -> None:
        super().__init__(message)
        # "invalid_quantity" or "out_of_range": a bounded label for counters.
        self.reason = reason


@lru_cache(maxsize=4096)
def parse_quantity(text: str) -> Fraction:
    """Parse a quantity such as ``"250m"``, ``"1.5"``, ``"1e3"`` or ``"2Gi"``.

    Cached because a node's pods repeat the same few strings in every event,
    and parsing is on the per-event path.
    """
    if not isinstance(text, str):
        raise QuantityError(f"quantity must be a string, got {type(text).__name__}")
    if len(text) > _MAX_LENGTH:
        raise QuantityError(f"quantity longer than {_MAX_LENGTH} characters", "out_of_range")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity")
    value = Fraction(match["number"])
    if match["binary"]:
        value *= _BINARY[match["binary"]]
    else:
        if match["exponent"] is not None:
            exponent = int(match["exponent"])
        else:
            exponent = _DECIMAL.get(match["decimal"] or "", 0)
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(f"{text!r} is out of range", "out_of_range")
        value *= Fraction(10) ** exponent
    if match["sign"] == "-":
        value = -value
    if abs(value) > MAX_QUANTITY:
        raise QuantityError(f"{text!r} is out of range", "out_of_range")
    return value


def format_cores(value: Fraction) -> str:
    """Render cores the way kubectl does: whole cores, else millicores."""
    if value.denominator == 1:
        return str(value.numerator)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return f"{float(value):.6g}"


def format_bytes(value: Fraction) -> str:
    """Render bytes with the largest binary suffix that divides them exactly."""
    if value.denominator != 1:
        return f"{float(value):.6g}"
    n = value.numerator
    for suffix, size in (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)
