"""Builds the OpenTelemetry MeterProvider and the exporter the configuration asks for."""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.resources import Resource

from agent.pipeline.state import NodeState
from agent.pipeline.stats import EXPORT_LOOP, RuntimeStats
from agent.export.metrics import StateMetrics
from agent.export.runtime import RuntimeMetrics
from agent.export.reader import GAUGE_DELTA, PublishingMetricReader

__all__ = ["build_exporter", "build_telemetry", "Telemetry", "SERVICE_NAME"]

SERVICE_NAME = "node-requests-agent"


def build_exporter(kind: str, otlp_protocol: str = "http/protobuf") -> MetricExporter | None:
    """The exporter named by --exporter / OTEL_METRICS_EXPORTER.

    OTLP endpoint, headers, certificates, compression (gzip) and timeout come
    from the standard OTEL_EXPORTER_OTLP_* variables, read by the exporter
    classes themselves. Only the chosen protocol's module is imported: gRPC
    costs ~15 MiB more than HTTP.
    """
    if kind == "none":
        return None
    if kind == "table":
        from agent.export.table import TableMetricExporter

        return TableMetricExporter()
    if kind == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter(preferred_temporality=GAUGE_DELTA)
    # The configuration has already refused anything but grpc and http/protobuf.
    if otlp_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcExporter

        return GrpcExporter(preferred_temporality=GAUGE_DELTA)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpExporter

    return HttpExporter(preferred_temporality=GAUGE_DELTA)


class Telemetry:
    def __init__(self, provider: MeterProvider, reader: PublishingMetricReader | None) -> None:
        self.provider = provider
        self.reader = reader

    def flush(self) -> None:
        if self.reader is not None:
            self.reader.force_flush()

    def shutdown(self, final_export: bool = True) -> None:
        """Final export of the current state (unless told not to), then close the exporter."""
        if self.reader is not None:
            self.reader.shutdown(final_export=final_export)
        self.provider.shutdown()


def build_telemetry(
    state: NodeState,
    stats: RuntimeStats,
    exporter: MetricExporter | None,
    interval: float,
    timeout: float,
    service_version: str,
    on_export: Callable[[bool, float], None] | None = None,
) -> Telemetry:
    """Per-pod and node gauges read ``state.snapshot()`` right before each collection."""
    resource = Resource.create({
        "service.name": SERVICE_NAME,
        "service.version": service_version,
        # Stable across restarts, unlike the SDK's random default.
        "service.instance.id": state.node_name,
        "k8s.node.name": state.node_name,
    })
    readers = []
    reader = None
    if exporter is not None:
        reader = PublishingMetricReader(
            exporter,
            interval=interval,
            timeout=timeout,
            on_export=on_export or stats.export_finished,
            heartbeat=lambda: stats.heartbeat(EXPORT_LOOP),
        )
        readers.append(reader)
    provider = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)
    meter = provider.get_meter("node_requests_agent", service_version)
    if reader is not None:
        # Instruments come from the provider, which needs its readers first.
        product, runtime = StateMetrics(meter), RuntimeMetrics(meter, stats, state)

        def publish() -> None:
            snapshot = state.snapshot()
            product.publish(snapshot.pods, snapshot.summary())
            runtime.refresh()

        reader.set_publisher(publish)
    return Telemetry(provider, reader)
