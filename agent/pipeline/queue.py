"""The event queue between the Kubernetes source and the handler.

Each event's enqueue time is recorded once, when it is put, so the time it
waits before handling can be measured the way controller-runtime's
workqueue_queue_duration_seconds does.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass

from agent.pipeline.events import Event
from agent.pipeline.stats import RuntimeStats

__all__ = ["EventQueue", "QueuedEvent"]


@dataclass(frozen=True, slots=True)
class QueuedEvent:
    event: Event
    enqueued_at: float


class EventQueue:
    def __init__(self, stats: RuntimeStats, maxsize: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        # Bounded: if the handler ever falls behind, the watch reader blocks,
        # which pushes back on the API server stream instead of growing memory.
        self._q: queue.Queue[QueuedEvent] = queue.Queue(maxsize)
        self._stats = stats
        self._clock = clock

    def put(self, event: Event) -> None:
        self._stats.event_added(event.type)
        self._q.put(QueuedEvent(event, self._clock()))

    def get(self, timeout: float | None = None) -> QueuedEvent | None:
        """Next event, or None after ``timeout`` seconds. Call task_done() when handled."""
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            return None
        self._stats.event_taken(self._clock() - item.enqueued_at)
        return item

    def depth(self) -> int:
        return self._q.qsize()

    def join(self, timeout: float) -> bool:
        """Wait until every event put so far has been handled."""
        deadline = self._clock() + timeout
        while self._q.unfinished_tasks:
            if self._clock() > deadline:
                return False
            time.sleep(0.005)
        return True

    def task_done(self) -> None:
        self._q.task_done()
