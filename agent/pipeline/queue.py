"""The event queue between the sources and the handler.

Each event's enqueue time is recorded once, when it is put, so the time it
waits before handling can be measured the way controller-runtime's
workqueue_queue_duration_seconds does. The queue reports through the small
``QueueMetrics`` interface (client-go's workqueue metrics provider), so it
knows nothing of how the numbers are kept; the default keeps none.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from agent.pipeline.events import Event
from agent.pipeline.interfaces import NO_QUEUE_METRICS, QueueMetrics

__all__ = ["EventQueue", "QueuedEvent"]


class QueuedEvent(NamedTuple):  # one per event: a named tuple is the cheapest record to build
    event: Event
    enqueued_at: float


class EventQueue:
    """FIFO of events, bounded, with a count of those put and not yet handled.

    A ``queue.SimpleQueue`` (C, no condition variables) and one plain lock for
    the count: ``queue.Queue``'s two conditions were a tenth of an event's whole
    cost. A full queue is polled rather than waited on, so the common case,
    a queue with room, takes no wait at all.
    """

    def __init__(self, *, metrics: QueueMetrics = NO_QUEUE_METRICS, maxsize: int = 10_000,
                 clock: Callable[[], float] = time.monotonic, full_poll: float = 0.005) -> None:
        # Bounded: if the handler ever falls behind, the watch reader waits,
        # which pushes back on the API server stream instead of growing memory.
        self._q: queue.SimpleQueue[QueuedEvent | None] = queue.SimpleQueue()  # None: wake()'s
        self._maxsize = maxsize
        self._full_poll = full_poll
        self._metrics = metrics
        self._clock = clock
        self._lock = threading.Lock()
        self._unfinished = 0

    def put(self, event: Event) -> None:
        while self._q.qsize() >= self._maxsize:
            time.sleep(self._full_poll)
        self._metrics.event_added(event.type)
        with self._lock:
            self._unfinished += 1
        self._q.put(QueuedEvent(event, self._clock()))

    def get(self, timeout: float | None = None) -> QueuedEvent | None:
        """Next event, or None after ``timeout`` seconds (or at a wake()). Call task_done() when handled."""
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is None:  # put by wake()
            return None
        self._metrics.event_taken(self._clock() - item.enqueued_at)
        return item

    def wake(self) -> None:
        """End a get() that waits on an empty queue now, as if its timeout had passed (shutdown).

        So the consumer can wait long between checks of its stop event instead of polling.
        """
        self._q.put(None)  # a get() waiting on an empty queue returns at once

    def qsize(self) -> int:
        return self._q.qsize()

    def join(self, timeout: float) -> bool:
        """Wait until every event put so far has been handled."""
        deadline = time.monotonic() + timeout
        while self._unfinished:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def task_done(self) -> None:
        with self._lock:
            self._unfinished -= 1
