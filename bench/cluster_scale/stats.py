"""Small statistics over lists of times."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable


def pct(values: Iterable[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def spread(times: Iterable[float], origin: float) -> str:
    """first / median / last of ``times`` after ``origin``, and the busiest second."""
    rel = sorted(t - origin for t in times)
    if not rel:
        return "none"
    busiest = Counter(math.floor(t) for t in rel).most_common(1)[0]
    return (f"first {rel[0]:.1f} s, median {statistics.median(rel):.1f} s, last {rel[-1]:.1f} s; "
            f"{len({math.floor(t) for t in rel})} distinct seconds, at most {busiest[1]} in one second")
