"""The agent's own signals as plain numbers, one thread-safe object.

Exporters (OTLP, and later the debug endpoint) read ``snapshot()``; nothing
keeps a second set of books. Every key is from a bounded vocabulary: never a
pod name, so the agent's own telemetry cannot grow with pod churn.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["RuntimeStats", "StatsSnapshot"]


@dataclass(frozen=True)
class StatsSnapshot:
    events_added: Mapping[str, int] = field(default_factory=dict)
    events_handled: int = 0
    handler_errors: Mapping[str, int] = field(default_factory=dict)
    pod_problems: Mapping[tuple[str, str], int] = field(default_factory=dict)
    watch_starts: Mapping[str, int] = field(default_factory=dict)
    relists: int = 0
    requests_failed: Mapping[str, int] = field(default_factory=dict)
    last_event_age_seconds: float | None = None
    resource_version: str = ""
    synced: bool = False
    exports: Mapping[str, int] = field(default_factory=dict)
    last_export_success_age_seconds: float | None = None
    last_export_duration_seconds: float | None = None


class RuntimeStats:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._events_added: Counter[str] = Counter()
        self._events_handled = 0
        self._handler_errors: Counter[str] = Counter()
        self._pod_problems: Counter[tuple[str, str]] = Counter()
        self._watch_starts: Counter[str] = Counter()
        self._relists = 0
        self._requests_failed: Counter[str] = Counter()
        self._last_event: float | None = None
        self._resource_version = ""
        self._synced = False
        self._exports: Counter[str] = Counter()
        self._last_export_success: float | None = None
        self._last_export_duration: float | None = None

    def event_added(self, event_type: str) -> None:
        with self._lock:
            self._events_added[event_type] += 1

    def event_handled(self) -> None:
        with self._lock:
            self._events_handled += 1

    def handler_error(self, error_type: str) -> None:
        with self._lock:
            self._handler_errors[error_type] += 1

    def pod_problem(self, subject: str, reason: str) -> None:
        with self._lock:
            self._pod_problems[(subject, reason)] += 1

    def watch_started(self, reason: str) -> None:
        with self._lock:
            self._watch_starts[reason] += 1

    def relisted(self, resource_version: str) -> None:
        with self._lock:
            self._relists += 1
            self._synced = True
            self._resource_version = resource_version
            self._last_event = self._clock()

    def request_failed(self, reason: str) -> None:
        with self._lock:
            self._requests_failed[reason] += 1

    def progressed(self, resource_version: str) -> None:
        """An event or bookmark arrived: the watch is alive at this version."""
        with self._lock:
            self._last_event = self._clock()
            if resource_version:
                self._resource_version = resource_version

    def export_finished(self, ok: bool, seconds: float) -> None:
        with self._lock:
            self._exports["success" if ok else "failure"] += 1
            self._last_export_duration = seconds
            if ok:
                self._last_export_success = self._clock()

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            return StatsSnapshot(
                events_added=MappingProxyType(dict(self._events_added)),
                events_handled=self._events_handled,
                handler_errors=MappingProxyType(dict(self._handler_errors)),
                pod_problems=MappingProxyType(dict(self._pod_problems)),
                watch_starts=MappingProxyType(dict(self._watch_starts)),
                relists=self._relists,
                requests_failed=MappingProxyType(dict(self._requests_failed)),
                last_event_age_seconds=None if self._last_event is None else self._clock() - self._last_event,
                resource_version=self._resource_version,
                synced=self._synced,
                exports=MappingProxyType(dict(self._exports)),
                last_export_success_age_seconds=(
                    None if self._last_export_success is None else self._clock() - self._last_export_success),
                last_export_duration_seconds=self._last_export_duration,
            )
