"""The agent process's own CPU, memory and threads, named as OTel's process semantic conventions name them.

These are the SDK's instruments, the part of each export that the SDK's
periodic reader collects: the exporter then adds the agent's table and the
node state (``otlp_encode``). The reader exports nothing for a collection
with no instrument in it, so they also keep the export loop turning.
They read the process through psutil, which the agent holds anyway.
"""

from __future__ import annotations

from collections.abc import Iterable

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
    proc = process or psutil.Process()

    def cpu(options: CallbackOptions) -> Iterable[Observation]:
        times = proc.cpu_times()
        return [Observation(times.user, {"cpu.mode": "user"}), Observation(times.system, {"cpu.mode": "system"})]

    def memory(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(proc.memory_info().rss)]

    def threads(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(proc.num_threads())]

    for (name, (unit, description)), callback, create in zip(
            PROCESS_METRICS.items(), (cpu, memory, threads),
            (meter.create_observable_counter, meter.create_observable_up_down_counter,
             meter.create_observable_up_down_counter), strict=True):
        create(name, callbacks=[callback], unit=unit, description=description)
