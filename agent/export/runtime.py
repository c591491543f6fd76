"""The agent's own metric table (telemetry/table.py) as OTLP metrics, one snapshot per export."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from agent.telemetry.stats import HistogramSnapshot
from agent.telemetry.table import PREFIX, RUNTIME_METRICS, Points, Readings

__all__ = ["Series", "otlp_series"]


class Series(NamedTuple):
    """One OTLP metric of the table: a gauge, a cumulative monotonic sum (``kind`` "counter") or a histogram."""

    name: str  # with PREFIX
    kind: str
    unit: str
    description: str
    points: Points | HistogramSnapshot  # a histogram's one snapshot


def otlp_series(readings: Readings) -> Iterator[Series]:
    """The table as OTLP metrics, each under its own name and unit; a metric with no points yet is left out.

    A histogram stays one OTLP explicit-bucket histogram (encode.py), so every
    Prometheus-style receiver names its ``_bucket``, ``_sum`` and ``_count``
    series itself, after any unit suffix it adds.
    """
    for metric in RUNTIME_METRICS:
        points = metric.read(readings)
        if points:
            yield Series(PREFIX + metric.name, metric.kind, metric.unit, metric.description, points)
