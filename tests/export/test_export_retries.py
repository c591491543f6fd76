"""The exporter's retries: a dead kept-alive connection is replaced at once, everything else backs off."""

from __future__ import annotations

from opentelemetry.sdk.metrics.export import MetricExportResult, MetricsData

from agent.export.otlp.encode import RequestBuilder
from agent.export.otlp.exporter import OtlpExporter
from agent.export.otlp.transport import Attempt
from agent.pipeline.state import NodeState
from agent.pipeline.stats import RuntimeStats

DEAD = Attempt(False, "transport", retryable=True, message="ConnectionResetError")
BUSY = Attempt(False, "http_503", retryable=True)
OK = Attempt(True, "success")


class ScriptedTransport:
    """Answers each attempt from a script (the transports themselves are tested against real servers)."""

    def __init__(self, *attempts: Attempt) -> None:
        self.attempts = list(attempts)
        self.sent = 0

    def send(self, request, points, deadline) -> Attempt:
        self.sent += 1
        return self.attempts.pop(0)

    def interrupt(self) -> None:
        pass

    def close(self) -> None:
        pass


def export(*attempts: Attempt) -> tuple[MetricExportResult, list[float], ScriptedTransport]:
    stats, waits = RuntimeStats(), []
    transport = ScriptedTransport(*attempts)
    builder = RequestBuilder(NodeState("node-a"), stats, {"k8s.node.name": "node-a"}, "0")
    exporter = OtlpExporter(transport, builder, stats, timeout=60, wait=lambda event, seconds: waits.append(seconds))
    return exporter.export(MetricsData(resource_metrics=[])), waits, transport


def test_a_dead_connection_is_replaced_at_once_then_backed_off():
    result, waits, transport = export(DEAD, OK)
    assert (result, waits, transport.sent) == (MetricExportResult.SUCCESS, [], 2)
    result, waits, transport = export(DEAD, DEAD, DEAD, OK)
    assert (result, waits, transport.sent) == (MetricExportResult.SUCCESS, [0.5, 1.0], 4)


def test_a_busy_collector_is_backed_off_from_the_first_retry():
    result, waits, transport = export(BUSY, BUSY, OK)
    assert (result, waits, transport.sent) == (MetricExportResult.SUCCESS, [0.5, 1.0], 3)
