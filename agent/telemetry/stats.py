"""The agent's own signals as plain numbers, in one thread-safe object.

``RuntimeStats`` implements every metrics interface the pipeline declares
(pipeline/interfaces.py), so the stages report without knowing who counts.
Everything that reports on the agent (the OTel runtime instruments, the debug
endpoint, /metrics, tests) reads ``RuntimeStats.snapshot()``: one set of
books, an immutable value. Every key is from a bounded vocabulary, never a
pod name, so the agent's own telemetry cannot grow with pod churn (the
reason client-go dropped its per-reflector metrics).

The queue signals follow controller-runtime's workqueue metrics: depth, adds,
time in queue, work duration, unfinished work, longest running processor.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Protocol

import msgspec

from agent.pipeline.interfaces import SOURCE_LOOP, ExportMetrics

__all__ = ["RuntimeStats", "StatsSnapshot", "HistogramSnapshot", "LATENCY_BUCKETS", "StatsReader", "ExportStats"]

# Seconds. Handling is in-memory and takes microseconds, so the buckets start
# at 1 us: controller-runtime's 5 ms first bucket would hide everything.
LATENCY_BUCKETS: tuple[float, ...] = (
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
    1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)


class HistogramSnapshot(msgspec.Struct, frozen=True):
    bounds: tuple[float, ...]
    # Per bucket (not cumulative): counts[i] observations <= bounds[i] and
    # > bounds[i-1]; the last entry is the +Inf bucket.
    counts: tuple[int, ...]
    sum: float
    count: int

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, cumulative count) pairs as Prometheus exposes them, +Inf last."""
        out, running = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


class _Histogram:
    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def snapshot(self) -> HistogramSnapshot:
        return HistogramSnapshot(self.bounds, tuple(self.counts), self.sum, self.count)


def _frozen(counter: Mapping) -> Mapping:
    return MappingProxyType(dict(counter))


class StatsSnapshot(msgspec.Struct, frozen=True):
    """Everything the agent knows about itself at one instant."""

    # Event queue (controller-runtime's workqueue set).
    queue_depth: int = 0
    events_added: Mapping[str, int] = msgspec.field(default_factory=dict)
    events_handled: int = 0
    events_handled_by_result: Mapping[str, int] = msgspec.field(default_factory=dict)
    queue_duration: HistogramSnapshot | None = None
    work_duration: HistogramSnapshot | None = None
    # Age of the event being handled right now (0 when idle); with one
    # handler worker it is also the longest running processor.
    unfinished_work_seconds: float = 0.0
    handler_errors: Mapping[str, int] = msgspec.field(default_factory=dict)
    # Keyed by (resource, reason): objects a source dropped (undecodable, other_node).
    skipped: Mapping[tuple[str, str], int] = msgspec.field(default_factory=dict)
    pod_problems: Mapping[tuple[str, str], int] = msgspec.field(default_factory=dict)
    # Watch health.
    # Keyed by (resource, reason); resource is "pods" or "nodes".
    watch_starts: Mapping[tuple[str, str], int] = msgspec.field(default_factory=dict)
    relists: Mapping[str, int] = msgspec.field(default_factory=dict)
    # Per watched resource: the last LIST's duration, and seconds since its last LIST, event or bookmark.
    list_duration_seconds: Mapping[str, float] = msgspec.field(default_factory=dict)
    requests_failed: Mapping[tuple[str, str], int] = msgspec.field(default_factory=dict)
    last_event_age_seconds: Mapping[str, float] = msgspec.field(default_factory=dict)
    # Export health.
    exports: Mapping[str, int] = msgspec.field(default_factory=dict)
    last_export_success_age_seconds: float | None = None
    last_export_success_unixtime: float | None = None
    export_duration: HistogramSnapshot | None = None
    export_failures: Mapping[str, int] = msgspec.field(default_factory=dict)
    rejected_points: int = 0
    usage_errors: Mapping[str, int] = msgspec.field(default_factory=dict)
    # Loop liveness: seconds since each loop last ran (a heartbeat, even in backoff).
    loop_idle_seconds: Mapping[str, float] = msgspec.field(default_factory=dict)
    # Per watched resource: seconds since the source last made progress (a LIST, an event, a bookmark,
    # a clean end of watch), or since it started when it never did. A source in endless backoff runs but does
    # not progress.
    source_progress_age: Mapping[str, float] = msgspec.field(default_factory=dict)


class RuntimeStats:
    def __init__(self, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._wall = wall
        self._events_added: Counter[str] = Counter()
        self._events_taken = 0
        self._events_handled = 0
        self._queue_duration = _Histogram()
        self._work_duration = _Histogram()
        self._working_since: float | None = None
        self._handler_errors: Counter[str] = Counter()
        self._skipped: Counter[tuple[str, str]] = Counter()
        self._pod_problems: Counter[tuple[str, str]] = Counter()
        self._watch_starts: Counter[tuple[str, str]] = Counter()
        self._relists: Counter[str] = Counter()
        self._list_duration: dict[str, float] = {}
        self._requests_failed: Counter[tuple[str, str]] = Counter()
        # Exist at zero from the start, as controller-runtime's counters do,
        # so rate() and increase() work from the first scrape.
        self._exports: Counter[str] = Counter({"success": 0, "failure": 0})
        self._events_handled_by_result: Counter[str] = Counter({"success": 0, "error": 0})
        self._last_export_success: float | None = None
        self._last_export_success_wall: float | None = None
        self._export_duration = _Histogram()
        self._export_failures: Counter[str] = Counter()
        self._rejected_points = 0
        self._heartbeats: dict[str, float] = {}
        self._progress: dict[str, float] = {}  # resource -> its last LIST, event or bookmark
        self._source_started: dict[str, float] = {}  # resource -> its source's first heartbeat
        self._usage_errors: Counter[str] = Counter()

    def usage_error(self, reason: str) -> None:
        with self._lock:
            self._usage_errors[reason] += 1

    # -- event queue ---------------------------------------------------------
    def event_added(self, event_type: str) -> None:
        with self._lock:
            self._events_added[event_type] += 1

    def event_taken(self, waited_seconds: float) -> None:
        """The handler took an event off the queue after it waited this long."""
        with self._lock:
            self._events_taken += 1
            self._queue_duration.observe(waited_seconds)
            self._working_since = self._clock()

    def event_handled(self, seconds: float, error_type: str | None = None) -> None:
        with self._lock:
            self._events_handled += 1
            self._work_duration.observe(seconds)
            self._working_since = None
            self._events_handled_by_result["success" if error_type is None else "error"] += 1
            if error_type is not None:
                self._handler_errors[error_type] += 1

    def skipped(self, reason: str, resource: str) -> None:
        """A source dropped one object it cannot or must not use; the rest of the stream goes on."""
        with self._lock:
            self._skipped[(resource, reason)] += 1

    def pod_problem(self, subject: str, reason: str) -> None:
        with self._lock:
            self._pod_problems[(subject, reason)] += 1

    # -- watch ---------------------------------------------------------------
    def watch_started(self, reason: str, resource: str) -> None:
        with self._lock:
            self._watch_starts[(resource, reason)] += 1

    def relisted(self, seconds: float | None, resource: str) -> None:
        with self._lock:
            self._relists[resource] += 1
            self._progress[resource] = self._clock()
            if seconds is not None:
                self._list_duration[resource] = seconds

    def request_failed(self, reason: str, resource: str) -> None:
        with self._lock:
            self._requests_failed[(resource, reason)] += 1

    def progressed(self, resource: str) -> None:
        """An event or bookmark arrived (or a watch ended cleanly): the source is alive and current."""
        with self._lock:
            self._progress[resource] = self._clock()

    # -- export --------------------------------------------------------------
    def export_finished(self, ok: bool, seconds: float, reason: str = "success", rejected_points: int = 0) -> None:
        """One export ended; ``reason`` is a bounded word (http_503, timeout, rejected, ...) for failures."""
        with self._lock:
            self._exports["success" if ok else "failure"] += 1
            if not ok:
                self._export_failures[reason] += 1
            self._rejected_points += rejected_points
            self._export_duration.observe(seconds)
            if ok:
                self._last_export_success = self._clock()
                self._last_export_success_wall = self._wall()

    # -- liveness ------------------------------------------------------------
    def heartbeat(self, loop: str) -> None:
        """``loop`` ("source", "handler", "export") is alive and not stuck."""
        now = self._clock()
        with self._lock:
            first = loop not in self._heartbeats  # a loop's name is read once, not at every event of its stream
            self._heartbeats[loop] = now
            if first:
                prefix, _, resource = loop.partition(":")
                if prefix == SOURCE_LOOP and resource:
                    self._source_started.setdefault(resource, now)  # a source that never progresses ages from its start

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            now = self._clock()
            return StatsSnapshot(
                queue_depth=sum(self._events_added.values()) - self._events_taken,
                events_added=_frozen(self._events_added),
                events_handled=self._events_handled,
                events_handled_by_result=_frozen(self._events_handled_by_result),
                queue_duration=self._queue_duration.snapshot(),
                work_duration=self._work_duration.snapshot(),
                unfinished_work_seconds=0.0 if self._working_since is None else now - self._working_since,
                handler_errors=_frozen(self._handler_errors),
                skipped=_frozen(self._skipped),
                pod_problems=_frozen(self._pod_problems),
                watch_starts=_frozen(self._watch_starts),
                relists=_frozen(self._relists),
                list_duration_seconds=_frozen(self._list_duration),
                requests_failed=_frozen(self._requests_failed),
                last_event_age_seconds=MappingProxyType({k: now - v for k, v in self._progress.items()}),
                exports=_frozen(self._exports),
                last_export_success_age_seconds=(
                    None if self._last_export_success is None else now - self._last_export_success),
                last_export_success_unixtime=self._last_export_success_wall,
                export_duration=self._export_duration.snapshot(),
                export_failures=_frozen(self._export_failures),
                rejected_points=self._rejected_points,
                usage_errors=_frozen(self._usage_errors),
                loop_idle_seconds=MappingProxyType({k: now - v for k, v in self._heartbeats.items()}),
                source_progress_age=MappingProxyType(
                    {k: now - v for k, v in {**self._source_started, **self._progress}.items()}),
            )


class StatsReader(Protocol):
    """The agent's own signals as one immutable value (the debug endpoint, /metrics, the OTLP table)."""

    def snapshot(self) -> StatsSnapshot: ...


class ExportStats(ExportMetrics, StatsReader, Protocol):
    """The export side: it reports each export and exports the table of the agent's own signals."""
