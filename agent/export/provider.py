"""Builds the OpenTelemetry MeterProvider and the exporter the configuration asks for."""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.resources import Resource

from agent import __version__
from agent.config import Config, ConfigError
from agent.pipeline.state import NodeState
from agent.pipeline.stats import RuntimeStats
from agent.model.node_summary import NodeSummary
from agent.export.metrics import StateMetrics
from agent.export.runtime import RuntimeMetrics
from agent.export.reader import GAUGE_DELTA, PublishingMetricReader

__all__ = ["build_exporter", "build_telemetry", "Telemetry", "SERVICE_NAME"]

SERVICE_NAME = "node-requests-agent"


def build_exporter(config: Config) -> MetricExporter | None:
    """The exporter named by --exporter / OTEL_METRICS_EXPORTER.

    OTLP endpoint, headers, certificates, compression (gzip) and timeout come
    from the standard OTEL_EXPORTER_OTLP_* variables, read by the exporter
    classes themselves. Only the chosen protocol's module is imported: gRPC
    costs ~15 MiB more than HTTP.
    """
    if config.exporter == "none":
        return None
    if config.exporter == "table":
        from agent.export.table import TableMetricExporter

        return TableMetricExporter()
    if config.exporter == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter(preferred_temporality=GAUGE_DELTA)
    if config.otlp_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcExporter

        return GrpcExporter(preferred_temporality=GAUGE_DELTA)
    if config.otlp_protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpExporter

        return HttpExporter(preferred_temporality=GAUGE_DELTA)
    raise ConfigError(f"unsupported OTLP protocol {config.otlp_protocol!r} (use grpc or http/protobuf)")


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
    config: Config,
    state: NodeState,
    stats: RuntimeStats,
    exporter: MetricExporter | None,
    interval: float | None = None,
    on_export: Callable[[bool, float], None] | None = None,
    node_summary: Callable[[], NodeSummary] | None = None,
) -> Telemetry:
    resource = Resource.create({
        "service.name": SERVICE_NAME,
        "service.version": __version__,
        # Stable across restarts, unlike the SDK's random default.
        "service.instance.id": config.node_name,
        "k8s.node.name": config.node_name,
    })
    readers = []
    reader = None
    if exporter is not None:
        reader = PublishingMetricReader(
            exporter,
            interval=config.export_interval if interval is None else interval,
            timeout=config.export_timeout,
            on_export=on_export or stats.export_finished,
            heartbeat=lambda: stats.heartbeat("export"),
        )
        readers.append(reader)
    provider = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)
    meter = provider.get_meter("node_requests_agent", __version__)
    if reader is not None:
        # Instruments come from the provider, which needs its readers first.
        product, runtime = StateMetrics(meter), RuntimeMetrics(meter, stats)

        def publish() -> None:
            product.publish(state.pods(), node_summary() if node_summary is not None else None)
            runtime.refresh()

        reader.set_publisher(publish)
    return Telemetry(provider, reader)
