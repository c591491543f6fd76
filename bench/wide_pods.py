"""What pods with thousands of containers cost the agent (``bench/run.py wide-pods``; issue 38, item 4).

A pod of 10,000 containers (the API server sets no bound; etcd's request limit does, where it is raised). In this
process, with the agent's own decode, handler, node state and debug endpoint (its route, no socket): what the node state
holds per pod (tracemalloc: the Python objects left once the events are handled; the RSS also keeps the decoding's
high-water mark) for NRA_WIDE_PODS (4) such pods (10,000 app containers each, all with a container status, as the
kubelet writes them for a running pod), and the process's peak RSS (VmHWM, reset before) above that while /debug/pods
and the page render once; and what one event of such a pod costs (decode and value). The pods' JSON is decoded one at a
time and dropped, as the watch delivers them.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import time
import tracemalloc
from pathlib import Path

import psutil

from agent.config import Address
from agent.debug.endpoint import DebugServer
from agent.decode.reader import POD
from agent.model.rules import NEWEST
from agent.model.valuation import evaluate
from agent.pipeline.events import PodsListed
from agent.pipeline.handler import Handler
from agent.pipeline.state import NodeState
from agent.telemetry.health import HealthLimits
from agent.telemetry.stats import RuntimeStats
from bench.common import load
from testkit.factory import container, pod

PODS = int(os.environ.get("NRA_WIDE_PODS", "4"))
CONTAINERS = 10_000
MIB = 1 << 20


def _wide(name: str) -> bytes:
    containers = [container(f"c{i:05d}", f"{1 + i % 7}m", f"{1 + i % 5}Mi") for i in range(CONTAINERS)]
    statuses = [{"name": c["name"], "allocatedResources": c["resources"]["requests"],
                 "resources": {"requests": c["resources"]["requests"]}} for c in containers]
    return json.dumps(pod(name, containers=containers, container_statuses=statuses)).encode()


def _rss() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / MIB


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux)


def _peak() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> None:
    state, stats = NodeState("node-a"), RuntimeStats()
    server = DebugServer(Address(host="127.0.0.1", port=0), state, stats,
                         HealthLimits(source=10, handler=5, export=20, stale=240))
    try:
        tracemalloc.start()
        records = tuple(POD.record(_wide(f"wide-{i}")) for i in range(PODS))
        Handler(state=state, metrics=stats).handle(PodsListed(pods=records))
        del records
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        held_rss = _rss()
        figures = {"rss_holding_mib": round(held_rss, 1), "held_per_pod_kib": round(held / PODS / 1024)}
        for path in ("/debug/pods", "/"):
            _reset_peak()
            status, _, body = server.route(path)
            assert status == 200, (path, status)
            figures[f"peak_{path}_mib"] = round(_peak() - held_rss, 1)
            figures[f"body_{path}_kib"] = round(len(body) / 1024)
            del body
        one = _wide("wide-0")
        costs = []
        for _ in range(5):  # one MODIFIED event of such a pod: decode, then its value
            began = time.perf_counter()
            evaluate(POD.record(one), NEWEST)
            costs.append(time.perf_counter() - began)
        figures["event_ms"] = round(statistics.median(costs) * 1000)
    finally:
        server.stop()
    print(f"\n## Pods of {CONTAINERS:,} containers ({load()})\n")
    print("| pods | held per pod (tracemalloc) | one event: decode and value (median of 5) | RSS holding them | "
          "one /debug/pods: peak RSS above that | its body | the page: peak RSS above that |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {PODS} | {figures['held_per_pod_kib']:,} KiB | {figures['event_ms']} ms | "
          f"{figures['rss_holding_mib']} MiB | "
          f"+{figures['peak_/debug/pods_mib']} MiB | {figures['body_/debug/pods_kib']:,} KiB | "
          f"+{figures['peak_/_mib']} MiB |")


if __name__ == "__main__":
    main()
