"""A periodic metric reader that publishes the node state before each collection.

Why not observable (asynchronous) gauges: opentelemetry-sdk keeps every
attribute set an observable instrument has ever reported, so after 2,000 pods
have come and gone (a day on a batch node) each export collapses into one
``otel.metric.overflow`` point. Synchronous gauges with DELTA temporality are
reset by the SDK at every collection instead; this reader sets them from the
current state right before collecting, so each export carries exactly the
live pods, and a deleted pod's series stops in the very next export.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from opentelemetry.sdk.metrics import _Gauge
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
)

__all__ = ["PublishingMetricReader", "GAUGE_DELTA"]

log = logging.getLogger(__name__)

# The temporality every exporter of this agent must prefer for sync gauges.
GAUGE_DELTA = {_Gauge: AggregationTemporality.DELTA}
# Attribute sets per gauge per export. The SDK's default of 2,000 would fold a
# node with more live pods into one overflow point; kubelet's --max-pods is
# 110 by default and rarely above 1,000, so this bounds memory, not pods.
POD_SERIES_LIMIT = 10_000


class PublishingMetricReader(MetricReader):
    def __init__(
        self,
        exporter: MetricExporter,
        interval: float,
        timeout: float,
        on_export: Callable[[bool, float], None] = lambda ok, seconds: None,
        heartbeat: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(
            preferred_temporality=exporter._preferred_temporality,
            preferred_aggregation=exporter._preferred_aggregation,
            cardinality_limits={_Gauge: POD_SERIES_LIMIT},
        )
        self._exporter = exporter
        self._publish: Callable[[], None] = lambda: None
        self._interval = interval
        self._timeout = timeout
        self._on_export = on_export
        self._heartbeat = heartbeat
        self._export_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if interval != float("inf"):
            self._thread = threading.Thread(target=self._ticker, name="otel-export", daemon=True)
            self._thread.start()

    def set_publisher(self, publish: Callable[[], None]) -> None:
        """``publish`` sets every gauge from current state; called before each collection."""
        self._publish = publish

    def _ticker(self) -> None:
        self._heartbeat()
        while not self._stop.wait(self._interval):
            self._safe_collect()
            self._heartbeat()

    def _safe_collect(self) -> None:
        try:
            self.collect(timeout_millis=self._timeout * 1000)
        except Exception:  # an export failure must never end the loop
            log.exception("metric collection failed")

    def collect(self, timeout_millis: float = 10_000) -> None:
        self._publish()
        super().collect(timeout_millis=timeout_millis)

    def _receive_metrics(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs) -> None:
        started = time.monotonic()
        with self._export_lock:
            try:
                result = self._exporter.export(metrics_data, timeout_millis=timeout_millis)
            except Exception:
                log.exception("metric export raised")
                result = MetricExportResult.FAILURE
        ok = result is MetricExportResult.SUCCESS
        if not ok:
            log.warning("metric export failed; the next export sends the then-current state")
        self._on_export(ok, time.monotonic() - started)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        self._safe_collect()
        return self._exporter.force_flush(timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, final_export: bool = True, **kwargs) -> None:
        """Stop the ticker, export the final state once (unless told not to) and close the exporter."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_millis / 1000)
            if final_export:
                self._safe_collect()
        self._exporter.shutdown(timeout_millis=timeout_millis)
