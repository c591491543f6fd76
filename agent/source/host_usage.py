"""What the node really uses, read from /proc with psutil.

/proc/stat and /proc/meminfo are not namespaced: the container's own /proc
(a procfs mounted in its PID namespace) shows the whole host's CPU times and
memory, so the agent needs no host mount. CPU use is computed from deltas of
cumulative per-CPU times between two samples; psutil's cpu_percent() keeps
its baseline per calling thread and answers 0 on a thread's first call.
"""

from __future__ import annotations

import logging
import threading

import psutil

from agent.model.node_summary import Usage
from agent.model.quantity import NANO
from agent.pipeline.events import UsageSampled
from agent.pipeline.interfaces import Emit

__all__ = ["UsageSampler", "HostUsageSource", "set_procfs", "busy_cores"]

log = logging.getLogger(__name__)


def set_procfs(path: str) -> None:
    """Point psutil at a /proc. psutil has one module-wide path, so the agent sets it once as it starts."""
    psutil.PROCFS_PATH = path


def _busy_and_total(t) -> tuple[float, float]:
    # guest and guest_nice are already counted in user and nice.
    total = t.user + t.nice + t.system + t.idle + getattr(t, "iowait", 0.0) + getattr(t, "irq", 0.0) \
        + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0)
    return total - t.idle - getattr(t, "iowait", 0.0), total


def busy_cores(before: list, after: list) -> float:
    """Cores busy between two per-CPU samples: each CPU's busy share of its own elapsed time, summed."""
    cores = 0.0
    for b, a in zip(before, after, strict=False):
        busy_b, total_b = _busy_and_total(b)
        busy_a, total_a = _busy_and_total(a)
        elapsed = total_a - total_b
        if elapsed > 0:
            cores += min(1.0, max(0.0, (busy_a - busy_b) / elapsed))
    return cores


class UsageSampler:
    """Samples on demand (once per export); remembers the previous CPU sample for the delta."""

    def __init__(self, on_error=lambda reason: None) -> None:
        self._lock = threading.Lock()
        self._previous: list | None = None
        self._latest: Usage | None = None
        self._on_error = on_error
        self._last_error: str | None = None

    def sample(self) -> Usage | None:
        with self._lock:
            try:
                cpu_now = psutil.cpu_times(percpu=True)
                memory = psutil.virtual_memory()
                if not cpu_now:
                    raise ValueError("no cpuN lines in stat")
                used = memory.total - memory.available
            except FileNotFoundError as exc:
                self._failed("missing", exc)
                return None
            except PermissionError as exc:
                self._failed("unreadable", exc)
                return None
            except Exception as exc:  # noqa: BLE001 - psutil raises assorted errors on odd files: each is a reading's reason
                self._failed("malformed", exc)
                return None
            cpu = None
            if self._previous is not None and len(self._previous) == len(cpu_now):
                cpu = round(busy_cores(self._previous, cpu_now) * NANO)
            self._previous = cpu_now
            self._latest = Usage(cpu, max(0, int(used)) * NANO)
            if self._last_error is not None:
                log.info("host usage readable again from %s", psutil.PROCFS_PATH)
                self._last_error = None
            return self._latest

    def _failed(self, reason: str, exc: Exception) -> None:
        self._on_error(reason)
        if self._last_error != reason:
            log.warning("cannot read host usage from %s (%s: %s); the used series are absent until it can",
                        psutil.PROCFS_PATH, reason, exc)
            self._last_error = reason
        self._latest = None
        self._previous = None

    def latest(self) -> Usage | None:
        with self._lock:
            return self._latest


class HostUsageSource:
    """Samples the host on its own schedule and hands each reading to the queue.

    Whatever the exporter (OTLP, /metrics only, none), the ``used`` series
    then move at the export interval: the first delta comes shortly after the
    baseline, the rest every ``interval``. An unreadable /proc is handed on as
    ``None``, so the series are absent rather than frozen.
    """

    def __init__(self, *, sampler: UsageSampler, emit: Emit, interval: float, first_delta: float = 1.0) -> None:
        self._sampler = sampler
        self._emit = emit
        self._interval = interval
        self._first_delta = min(first_delta, interval)

    def sample_now(self) -> None:
        self._emit(UsageSampled(usage=self._sampler.sample()))

    def run(self, stop: threading.Event) -> None:
        self.sample_now()
        wait = self._first_delta
        while not stop.wait(wait):
            self.sample_now()
            wait = self._interval
