"""The agent process's own CPU, memory and threads, named as OTel's process semantic conventions name them.

These are the SDK's instruments, the part of each export that the SDK's
periodic reader collects: the exporter then adds the agent's table and the
node state (``otlp_encode``). The reader exports nothing for a collection
with no instrument in it, so they also keep the export loop turning.
They read the process through psutil, which the agent holds anyway.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import psutil
from opentelemetry.metrics import CallbackOptions, Meter, Observation

__all__ = ["observe_process", "PROCESS_METRICS"]

#: name -> (unit, description); what OTLP carries and docs/metrics.md lists.
PROCESS_METRICS = {
    "process.cpu.time": ("s", "CPU seconds the agent process has used, by cpu.mode (user, system)"),
    "process.memory.usage": ("By", "Resident memory of the agent process"),
    "process.thread.count": ("{thread}", "Threads of the agent process"),
}


def observe_process(meter: Meter, process: psutil.Process | None = None) -> None:
    """The instruments, always: a /proc that does not hold the agent's own process (HOST_PROC, to which psutil's one
    module-wide path points, naming another folder) leaves memory and threads without observations, not the agent
    without its exports (docs/configuration.md#when-a-setting-is-wrong)."""
    try:
        proc: psutil.Process | None = process or psutil.Process()
    except psutil.Error:
        proc = None

    def observed(read: Callable[[psutil.Process], list[Observation]]) -> Callable[[CallbackOptions], list[Observation]]:
        def callback(options: CallbackOptions) -> list[Observation]:
            try:
                return [] if proc is None else read(proc)
            except psutil.Error:
                return []
        return callback

    def cpu(options: CallbackOptions) -> list[Observation]:
        # The kernel's times(2), as psutil's cpu_times() reads them from /proc, but whatever psutil's /proc is: this
        # instrument always observes, and the reader exports nothing for a collection without an observation.
        times = os.times()
        return [Observation(times.user, {"cpu.mode": "user"}), Observation(times.system, {"cpu.mode": "system"})]

    def memory(proc: psutil.Process) -> list[Observation]:
        return [Observation(proc.memory_info().rss)]

    def threads(proc: psutil.Process) -> list[Observation]:
        return [Observation(proc.num_threads())]

    for (name, (unit, description)), callback, create in zip(
            PROCESS_METRICS.items(), (cpu, observed(memory), observed(threads)),
            (meter.create_observable_counter, meter.create_observable_up_down_counter,
             meter.create_observable_up_down_counter), strict=True):
        create(name, callbacks=[callback], unit=unit, description=description)
