"""The event queue between the sources and the handler.

Each event's enqueue time is recorded once, when it is put, so the time it
waits before handling can be measured the way controller-runtime's
workqueue_queue_duration_seconds does. The queue reports through the small
``QueueMetrics`` interface (client-go's workqueue metrics provider), so it
knows nothing of how the numbers are kept; the default keeps none.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from agent.pipeline.events import Event

__all__ = ["EventQueue", "QueuedEvent", "QueueMetrics", "NO_QUEUE_METRICS"]


class QueueMetrics(Protocol):
    def event_added(self, event_type: str) -> None: ...

    def event_taken(self, waited_seconds: float) -> None: ...


class _NoQueueMetrics:
    def event_added(self, event_type: str) -> None:
        pass

    def event_taken(self, waited_seconds: float) -> None:
        pass


NO_QUEUE_METRICS: QueueMetrics = _NoQueueMetrics()


@dataclass(frozen=True, slots=True)
class QueuedEvent:
    event: Event
    enqueued_at: float


class EventQueue:
    def __init__(self, metrics: QueueMetrics = NO_QUEUE_METRICS, maxsize: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        # Bounded: if the handler ever falls behind, the watch reader blocks,
        # which pushes back on the API server stream instead of growing memory.
        self._q: queue.Queue[QueuedEvent] = queue.Queue(maxsize)
        self._metrics = metrics
        self._clock = clock

    def put(self, event: Event) -> None:
        self._metrics.event_added(event.type)
        self._q.put(QueuedEvent(event, self._clock()))

    def get(self, timeout: float | None = None) -> QueuedEvent | None:
        """Next event, or None after ``timeout`` seconds. Call task_done() when handled."""
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            return None
        self._metrics.event_taken(self._clock() - item.enqueued_at)
        return item

    def join(self, timeout: float) -> bool:
        """Wait until every event put so far has been handled."""
        deadline = time.monotonic() + timeout
        while self._q.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def task_done(self) -> None:
        self._q.task_done()
