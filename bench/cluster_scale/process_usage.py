"""CPU and memory of the processes on the machine, by pid or by name."""

from __future__ import annotations

import contextlib
import time
from collections import Counter

import psutil


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def rss_mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def process_cpu() -> Counter:
    """CPU seconds so far of every process on the machine, summed by name: a difference over a phase says who used
    the machine during it. A process that exits within the phase takes its whole time out of its name's sum, so such
    names are left out where that makes the difference negative."""
    out: Counter = Counter()
    for p in psutil.process_iter(["name", "cpu_times"]):
        times = p.info["cpu_times"]
        if times is not None:
            out[p.info["name"]] += times.user + times.system
    return out


def busiest(count: int = 6) -> str:
    """The processes using most CPU over two seconds, whoever started them: what else shares the machine."""
    procs = list(psutil.process_iter(["name"]))
    for p in procs:
        with contextlib.suppress(psutil.Error):  # gone or not ours to read: left out
            p.cpu_percent(None)
    time.sleep(2)
    usage = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            usage.append((p.cpu_percent(None), p.info["name"]))
    return ", ".join(f"{name} {share:.0f}%" for share, name in sorted(usage, reverse=True)[:count] if share >= 1)
