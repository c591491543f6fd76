"""Local sinks for the export request: a compact table (the demo) or OTLP JSON (the console).

What they print is the very request the OTLP exporter would send, built by
the same ``RequestBuilder``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["render_table", "table_sink", "console_sink"]


def _any(value: AnyValue) -> str:
    kind = value.WhichOneof("value")
    return str(getattr(value, kind)) if kind else ""


def _number(dp) -> str:
    value = dp.as_double if dp.WhichOneof("value") == "as_double" else dp.as_int
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.12g}"
    return str(value)


def render_table(request: ExportMetricsServiceRequest) -> str:
    lines = []
    for rm in request.resource_metrics:
        resource = ", ".join(f"{a.key}={_any(a.value)}" for a in sorted(rm.resource.attributes, key=lambda a: a.key)
                             if a.key.startswith(("service.", "k8s.")))
        lines.append(f"# resource: {resource}")
        metrics = sorted((m for sm in rm.scope_metrics for m in sm.metrics), key=lambda m: m.name)
        for metric in metrics:
            kind = metric.WhichOneof("data")
            if kind == "histogram":
                # Its buckets are dozens of numbers a person does not read here.
                for dp in metric.histogram.data_points:
                    lines.append(f"{metric.name} count {dp.count} sum {dp.sum:.6g} ({len(dp.bucket_counts)} buckets "
                                 "not shown)")
                continue
            rows = []
            for dp in getattr(metric, kind).data_points if kind else ():
                attrs = ",".join(f'{a.key}="{_any(a.value)}"' for a in sorted(dp.attributes, key=lambda a: a.key))
                rows.append(f"{metric.name}{{{attrs}}} {_number(dp)}")
            lines.extend(sorted(rows))
    return "\n".join(lines) + "\n"


def table_sink(out: TextIO) -> Callable[[ExportMetricsServiceRequest], None]:
    def write(request: ExportMetricsServiceRequest) -> None:
        out.write(render_table(request))
        out.flush()
    return write


def console_sink(out: TextIO) -> Callable[[ExportMetricsServiceRequest], None]:
    def write(request: ExportMetricsServiceRequest) -> None:
        out.write(MessageToJson(request) + "\n")
        out.flush()
    return write
