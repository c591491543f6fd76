"""Quantities for people: cores or millicores, memory in binary units, one rounding rule.

A table column needs a short, recognisable value; the exact integer stays in
JSON and metrics. The rule, for cpu and memory alike: the largest unit the
value reaches (n, u, m, cores; B, Ki, Mi, Gi, Ti, Pi, Ei), then three
significant digits, rounded half up, never dropping digits of the whole part
(``1023Mi``, ``19.3Gi``, ``3.88``, ``12.5m``). A value that rounds up into the
next unit is shown in it (``999.6m`` is ``1``).
"""

from __future__ import annotations

import math

from agent.model.quantity import NANO, to_bytes

__all__ = ["cores", "memory", "percent", "le_label"]

_CPU_UNITS = (("", NANO), ("m", 10**6), ("u", 10**3), ("n", 1))  # nano-cores per unit, largest first
_MEMORY_UNITS = tuple((suffix, 1 << shift) for suffix, shift in
                      (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10), ("B", 0)))
_DIGITS = 3


def _scaled(value: int, unit: int) -> tuple[int, int]:
    """``value / unit`` rounded half up to three significant digits: (scaled integer, decimals)."""
    whole = value // unit
    decimals = max(0, _DIGITS - len(str(whole))) if whole else _DIGITS
    scale = 10**decimals
    return (2 * value * scale + unit) // (2 * unit), decimals


def _render(value: int, units: tuple[tuple[str, int], ...], zero: str) -> str:
    if value == 0:
        return zero
    sign, value = ("-", -value) if value < 0 else ("", value)
    for i, (suffix, unit) in enumerate(units):
        if value < unit and i < len(units) - 1:
            continue
        scaled, decimals = _scaled(value, unit)
        bigger = units[i - 1][1] // unit if i else 0
        if bigger and scaled >= bigger * 10**decimals:  # rounded up into the next unit
            suffix, unit = units[i - 1]
            scaled, decimals = _scaled(value, unit)
        text = str(scaled) if not decimals else f"{scaled // 10**decimals}.{scaled % 10**decimals:0{decimals}d}"
        if decimals:
            text = text.rstrip("0").rstrip(".")
        return f"{sign}{text}{suffix}"
    raise AssertionError("unreachable: the last unit takes every value")


def cores(nanos: int) -> str:
    """CPU in cores (``1.5``) or millicores (``250m``), from nano-cores."""
    return _render(nanos, _CPU_UNITS, "0")


def memory(nanos: int) -> str:
    """Memory in binary units (``512Mi``, ``19.3Gi``), from nano-bytes rounded up to whole bytes."""
    whole = -to_bytes(-nanos) if nanos < 0 else to_bytes(nanos)
    return _render(whole, _MEMORY_UNITS, "0")


def percent(ratio: float | None) -> str:
    """A ratio as a whole percentage, half up like the quantities (``12.5 %`` is ``13%``); ``-`` when unknown."""
    return "-" if ratio is None else f"{math.floor(ratio * 100 + 0.5)}%"


def le_label(bound: float) -> str:
    """Prometheus' spelling of a histogram bucket bound."""
    return "+Inf" if bound == float("inf") else repr(float(bound))
