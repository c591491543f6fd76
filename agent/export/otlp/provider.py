"""Builds the OpenTelemetry MeterProvider, its periodic reader and the exporter the configuration asks for.

The SDK's own PeriodicExportingMetricReader drives the exports on schedule
(and once more at shutdown); the exporter, the SDK's public extension point,
adds the agent's own table and the current node state to each collection
(``otlp_encode.RequestBuilder``).
"""

from __future__ import annotations

import math
import sys

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import TELEMETRY_SDK_LANGUAGE, TELEMETRY_SDK_NAME, TELEMETRY_SDK_VERSION, Resource
from opentelemetry.sdk.version import __version__ as sdk_version

from agent.config import OtlpSettings
from agent.export.otlp.encode import RequestBuilder
from agent.export.otlp.exporter import OtlpExporter, StateExporter
from agent.export.otlp.process import observe_process
from agent.export.otlp.transport import GrpcTransport, HttpTransport
from agent.pipeline.interfaces import EXPORT_LOOP
from agent.pipeline.state import NodeState
from agent.telemetry.stats import ExportStats

__all__ = ["build_telemetry", "Telemetry", "SERVICE_NAME"]

SERVICE_NAME = "node-requests-agent"


def _exporter(kind: str, otlp: OtlpSettings | None, builder: RequestBuilder, stats: ExportStats,
              timeout: float) -> OtlpExporter | StateExporter | None:
    """The exporter named by --exporter / OTEL_METRICS_EXPORTER; only the chosen protocol's modules are imported."""
    if kind == "none":
        return None
    if kind in ("table", "console"):
        from agent.export.otlp.local import console_sink, table_sink

        return StateExporter(builder, table_sink(sys.stdout) if kind == "table" else console_sink(sys.stdout), stats)
    assert otlp is not None, "the configuration resolves OTLP settings for the otlp exporter"
    transport = GrpcTransport(otlp) if otlp.protocol == "grpc" else HttpTransport(otlp)
    return OtlpExporter(transport, builder, stats, timeout)


class Telemetry:
    def __init__(self, provider: MeterProvider, reader: PeriodicExportingMetricReader | None,
                 exporter: OtlpExporter | StateExporter | None) -> None:
        self.provider = provider
        self.reader = reader
        self.exporter = exporter

    def flush(self) -> None:
        if self.reader is not None:
            self.reader.force_flush()

    def shutdown(self, final_export: bool = True, timeout: float = 5.0) -> None:
        """Final export of the current state (unless told not to), all within ``timeout`` seconds, then close."""
        if self.exporter is not None:
            self.exporter.begin_close(final_export, timeout)
        # Bounds the wait for the reader's thread too, whatever the export in flight is doing.
        self.provider.shutdown(timeout_millis=max(timeout, 0.001) * 1000)


def build_telemetry(
    state: NodeState,
    stats: ExportStats,
    exporter_kind: str,
    otlp: OtlpSettings | None,
    interval: float,
    timeout: float,
    service_version: str,
    resource_attributes: tuple[tuple[str, str], ...] = (),
) -> Telemetry:
    """``interval`` may be ``math.inf``: no periodic export, only flush() (the demo's --once).

    The resource is the SDK's own attributes, then the operator's (OTEL_RESOURCE_ATTRIBUTES, resolved by config),
    then the agent's, in the order ``Resource.create`` merges them; built here so the SDK reads no environment.
    """
    attributes = {
        TELEMETRY_SDK_LANGUAGE: "python",
        TELEMETRY_SDK_NAME: "opentelemetry",
        TELEMETRY_SDK_VERSION: sdk_version,
        **dict(resource_attributes),
        "service.name": SERVICE_NAME,
        "service.version": service_version,
        # Stable across restarts, unlike the SDK's random default.
        "service.instance.id": state.node_name,
        "k8s.node.name": state.node_name,
    }
    resource = Resource(attributes)
    builder = RequestBuilder(state, stats, {k: str(v) for k, v in resource.attributes.items()}, service_version)
    exporter = _exporter(exporter_kind, otlp, builder, stats, timeout)
    readers = []
    reader = None
    if exporter is not None:
        reader = PeriodicExportingMetricReader(exporter, export_interval_millis=interval * 1000 if interval != math.inf
                                               else math.inf, export_timeout_millis=timeout * 1000)
        readers.append(reader)
        # The loop exists from start-up; its first export follows the first sync (run.agent).
        stats.heartbeat(EXPORT_LOOP)
    provider = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)
    if reader is not None:
        observe_process(provider.get_meter("node_requests_agent.process", service_version))
    return Telemetry(provider, reader, exporter)
