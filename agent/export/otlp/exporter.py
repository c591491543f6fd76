"""The SDK's public exporter interface, sending each export once within its timeout.

The SDK collects the agent's own instruments and encodes them
(``encode_metrics``, public); the node state is added (``encode``); then a
transport (``transport``) sends the request. Retryable answers (429, 502,
503, 504, UNAVAILABLE, connection failures) are retried with backoff until the
deadline, waiting on the close signal so shutdown cuts a wait short.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData

from agent.export.otlp.encode import RequestBuilder
from agent.export.otlp.transport import Attempt, Transport
from agent.pipeline.interfaces import EXPORT_LOOP, ExportMetrics
from agent.telemetry.log_limit import RateLimitedLog

__all__ = ["OtlpExporter", "StateExporter"]

log = logging.getLogger(__name__)


class OtlpExporter(MetricExporter):
    """Sends each export's request once (retrying what is retryable) within the export timeout."""

    def __init__(
        self,
        transport: Transport,
        builder: RequestBuilder,
        stats: ExportMetrics,
        timeout: float,
        final_timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[threading.Event, float], object] = threading.Event.wait,
    ) -> None:
        super().__init__()
        self._transport = transport
        self._builder = builder
        self._stats = stats
        self._timeout = timeout
        self._final_timeout = min(timeout, final_timeout)
        self._clock = clock
        self._wait = wait
        # Set by begin_close to end a retry's wait at once; a fresh one serves the final export.
        self._wake = threading.Event()
        self._failing = False
        # A Collector that keeps failing is one line a minute per reason, with a count, whatever its messages say.
        self._warn = RateLimitedLog(log, clock=clock)
        self.muted = False  # a shutdown that must not send a final export
        self.closing = False  # the final export: a shorter deadline, so SIGTERM ends promptly
        self._generation = 0

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        if self.muted:
            return MetricExportResult.SUCCESS
        started = self._clock()
        deadline = started + (self._final_timeout if self.closing else self._timeout)
        try:
            request, points = self._builder.build(metrics_data)
            verdict = self._send(request, points, deadline)
        except Exception as exc:  # an export failure must never end the export loop
            log.exception("OTLP export failed unexpectedly")
            verdict = Attempt(False, "unexpected", message=type(exc).__name__)
        self._stats.heartbeat(EXPORT_LOOP)
        self._stats.export_finished(verdict.ok, self._clock() - started, verdict.reason, verdict.rejected_points)
        self._log(verdict)
        return MetricExportResult.SUCCESS if verdict.ok else MetricExportResult.FAILURE

    def _send(self, request: ExportMetricsServiceRequest, points: int, deadline: float) -> Attempt:
        delay, generation, wake = 0.5, self._generation, self._wake
        reconnected = False
        while True:
            # The deadline is on the injected clock alone: a transport is given the seconds left, never a time.
            left = deadline - self._clock()
            if left <= 0:
                return Attempt(False, "timeout")
            verdict = self._transport.send(request, points, left)
            if verdict.ok or not verdict.retryable or generation != self._generation:
                return verdict
            if verdict.reason == "transport" and not reconnected:
                # The kept-alive connection died (a Collector replica went away): one new connection at once,
                # which the Service gives to a live replica, so the export lands within its interval.
                reconnected = True
                continue
            wait = max(delay, verdict.retry_after or 0.0)
            if self._clock() + wait >= deadline:
                return verdict
            self._wait(wake, wait)
            if generation != self._generation:
                return verdict
            delay = min(delay * 2, 8.0)

    def _log(self, verdict: Attempt) -> None:
        """The first failure at once, then one line a minute per reason with a count; recovery once."""
        if verdict.ok and not verdict.rejected_points:
            if self._failing:
                log.info("OTLP export succeeding again")
                self._warn.reset()
            self._failing = False
            return
        self._failing = True
        if verdict.ok:
            self._warn.warning("rejected", "the Collector rejected %d point(s): %s", verdict.rejected_points,
                               verdict.message)
        else:
            text = f"{verdict.reason}: {verdict.message}" if verdict.message else verdict.reason
            self._warn.warning(verdict.reason, "OTLP export failed (%s); the next export sends the then-current state",
                               text)

    def begin_close(self, final_export: bool, timeout: float | None = None) -> None:
        """Cut the export in flight; the final one (if wanted) gets the short deadline, at most ``timeout``."""
        if timeout is not None:
            self._final_timeout = max(0.0, min(self._final_timeout, timeout - 0.2))  # 0.2 s to encode and return
        self.muted = not final_export
        self.closing = True
        self._generation += 1  # the export in flight must not retry after this
        woken, self._wake = self._wake, threading.Event()
        woken.set()
        self._transport.interrupt()

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        self._transport.close()


class StateExporter(MetricExporter):
    """The same request, handed to a local sink (the demo's table, the console) instead of the network."""

    def __init__(self, builder: RequestBuilder, sink: Callable[[ExportMetricsServiceRequest], None],
                 stats: ExportMetrics, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._builder = builder
        self._sink = sink
        self._stats = stats
        self._clock = clock
        self.muted = False

    def begin_close(self, final_export: bool, timeout: float | None = None) -> None:
        self.muted = not final_export

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        if self.muted:
            return MetricExportResult.SUCCESS
        started = self._clock()
        try:
            self._sink(self._builder.build(metrics_data)[0])
            ok, reason = True, "success"
        except (OSError, ValueError) as exc:  # a closed stdout: fail this export, never loop on tracebacks
            ok, reason = False, "output_closed"
            log.debug("local export failed: %s", exc)
        self._stats.heartbeat(EXPORT_LOOP)
        self._stats.export_finished(ok, self._clock() - started, reason)
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        pass
