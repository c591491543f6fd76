"""A metric exporter that prints each export as a compact table.

Used by the demo and for eyeballing a capture: the points printed are what
the OTLP exporter would send, because they come through the same SDK path.
"""

from __future__ import annotations

import sys
from typing import TextIO

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData

from agent.export.reader import GAUGE_DELTA

__all__ = ["TableMetricExporter"]


def _value(point) -> str:
    value = getattr(point, "value", None)
    if value is None:
        return f"count={getattr(point, 'count', '?')}"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.12g}"
    return str(value)


class TableMetricExporter(MetricExporter):
    def __init__(self, out: TextIO | None = None) -> None:
        super().__init__(preferred_temporality=GAUGE_DELTA)
        self._out = out or sys.stdout

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        lines = []
        for rm in metrics_data.resource_metrics:
            resource = ", ".join(f"{k}={v}" for k, v in sorted(rm.resource.attributes.items())
                                 if k.startswith(("service.", "k8s.")))
            lines.append(f"# resource: {resource}")
            for sm in rm.scope_metrics:
                for metric in sorted(sm.metrics, key=lambda m: m.name):
                    if metric.name.endswith("_bucket"):
                        # Histogram buckets: dozens of rows a person does not read here.
                        lines.append(f"{metric.name}{{le=...}} ({len(metric.data.data_points)} buckets not shown)")
                        continue
                    rows = []
                    for point in metric.data.data_points:
                        attrs = ",".join(f'{k}="{v}"' for k, v in sorted(point.attributes.items()))
                        rows.append(f"{metric.name}{{{attrs}}} {_value(point)}")
                    lines.extend(sorted(rows))
        self._out.write("\n".join(lines) + "\n")
        self._out.flush()
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        pass
