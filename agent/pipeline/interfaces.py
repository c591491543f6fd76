"""The narrow interfaces between the stages: what each one may call on the next.

A source gets an ``Emit`` (put an event on the queue) and a
:class:`SourceMetrics`; the queue a :class:`QueueMetrics` (client-go's
workqueue metrics provider); the handler a :class:`HandlerMetrics`; an
exporter an :class:`ExportMetrics`; readers of the agent's own signals a
:class:`StatsReader`. ``RuntimeStats`` implements them all, and a test can
hand any stage a small recorder instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from agent.pipeline.events import Event

if TYPE_CHECKING:
    from agent.pipeline.stats import StatsSnapshot

__all__ = ["Emit", "SourceMetrics", "QueueMetrics", "HandlerMetrics", "ExportMetrics", "StatsReader", "ExportStats",
           "NO_QUEUE_METRICS"]

#: How a source hands on an event: the queue's ``put``.
Emit = Callable[[Event], None]


class SourceMetrics(Protocol):
    """What a source reports about its requests, watches and the objects it read."""

    def heartbeat(self, loop: str) -> None: ...

    def watch_started(self, reason: str, resource: str) -> None: ...

    def request_failed(self, reason: str, resource: str) -> None: ...

    def relisted(self, seconds: float | None, resource: str) -> None: ...

    def skipped(self, reason: str, resource: str) -> None: ...

    def progressed(self, resource: str) -> None: ...


class QueueMetrics(Protocol):
    def event_added(self, event_type: str) -> None: ...

    def event_taken(self, waited_seconds: float) -> None: ...


class _NoQueueMetrics:
    def event_added(self, event_type: str) -> None:
        pass

    def event_taken(self, waited_seconds: float) -> None:
        pass


NO_QUEUE_METRICS: QueueMetrics = _NoQueueMetrics()


class HandlerMetrics(Protocol):
    def heartbeat(self, loop: str) -> None: ...

    def event_handled(self, seconds: float, error_type: str | None = None) -> None: ...

    def pod_problem(self, subject: str, reason: str) -> None: ...


class ExportMetrics(Protocol):
    def heartbeat(self, loop: str) -> None: ...

    def export_finished(self, ok: bool, seconds: float, reason: str = "success", rejected_points: int = 0) -> None: ...


class StatsReader(Protocol):
    """The agent's own signals as one immutable value (the debug endpoint, /metrics, the OTLP table)."""

    def snapshot(self) -> StatsSnapshot: ...


class ExportStats(ExportMetrics, StatsReader, Protocol):
    """The export side: it reports each export and exports the table of the agent's own signals."""
