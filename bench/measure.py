"""How the benchmarks measure: CPU time of competing paths, a process going quiet, what the agent exported."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

from testkit.otlp_receiver import HttpReceiver, points_of

#: One exported point as plain data: metric name, attributes as text, value (what a floor program re-exports).
Point = tuple[str, dict[str, str], float]


def best_cpu(fns: list[Callable[[], object]], repeat: int = 7) -> list[float]:
    """Best CPU time of each function, runs interleaved so machine noise hits all alike."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            gc.collect()
            start = time.process_time()
            fn()
            best[i] = min(best[i], time.process_time() - start)
    return best


def cpu_when_quiet(ps, settle: float = 0.3, poll: float = 0.05, timeout: float = 300.0) -> float:
    """The process's CPU seconds once it has stopped working: unchanged for ``settle`` seconds (ticks are 10 ms)."""
    def cpu() -> float:
        t = ps.cpu_times()
        return t.user + t.system

    last, since, deadline = cpu(), time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(poll)
        now = cpu()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= settle:
            return now
    raise SystemExit("the process never went quiet")


def pods_exported(receiver: HttpReceiver) -> int:
    """Pods in the last export ``receiver`` got (0 before the first)."""
    with receiver.cond:
        if not receiver.requests:
            return 0
        req = receiver.requests[-1][1]
    return sum(1 for p in points_of(req) if p.metric == "pod_or_vm_cpu_requests")


def wait_exported(receiver: HttpReceiver, expected: int, timeout: float = 60) -> None:
    """Until the agent's last export carried exactly ``expected`` pods."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pods_exported(receiver) == expected:
            return
        time.sleep(0.2)
    raise SystemExit(f"agent did not export {expected} pods (last export had {pods_exported(receiver)})")


def last_export_points(receiver: HttpReceiver) -> list[Point]:
    """Every point of the last export ``receiver`` got, as plain data."""
    with receiver.cond:
        last = receiver.requests[-1][1]
    return [(p.metric, {k: str(v) for k, v in p.attributes.items()}, p.value) for p in points_of(last)]
