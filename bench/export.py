"""The agent's export cycle (SDK reader collect, encode, state points, OTLP/HTTP gzip) against a floor that encodes
the same points directly, in one process (``bench/run.py export``)."""

from __future__ import annotations

import gc
import gzip
import http.client
import os
import statistics
import time
import urllib.parse
from collections.abc import Callable

from bench.common import HttpReceiver, load, machine, required
from bench.measure import Point, last_export_points
from testkit.factory import realistic_pod
from testkit.otlp_receiver import points_of


def main(pods_counts=(0, 110, 500, 2000), repeat: int = 15) -> None:
    """The agent's export cycle (SDK reader collect, encode, state points, OTLP/HTTP gzip) against the floor, same
    run."""
    print("\n### Export cycle: the agent against the direct-encoding floor (OTLP/HTTP gzip to a local receiver)\n")
    print(f"machine: {machine()}; {load()}\n")
    print("The floor builds the very points the agent's export carried (its own instruments' too) as OTLP gauges "
          "straight from plain tuples, serialises, gzips and POSTs them on a kept-alive connection. CPU time of the "
          f"exporting thread (the receiver runs in another), median of {repeat} interleaved runs.\n")
    print("| pods | points | agent CPU ms | floor CPU ms | agent / floor | agent wall ms | floor wall ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    receiver = HttpReceiver().start()
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
    os.environ["OTEL_EXPORTER_OTLP_COMPRESSION"] = "gzip"
    url = urllib.parse.urlsplit(receiver.endpoint)
    conn = http.client.HTTPConnection(required(url.hostname, f"the receiver's host in {receiver.endpoint}"), url.port,
                                      timeout=30)
    try:
        for n in pods_counts:
            _compare(receiver, conn, n, repeat)
    finally:
        conn.close()
        receiver.stop()


def _compare(receiver: HttpReceiver, conn: http.client.HTTPConnection, n: int, repeat: int) -> None:
    """The agent holding ``n`` pods and the floor sending its points, ``repeat`` times each: one table row."""
    from agent.config import from_sources
    from agent.decode.reader import POD
    from agent.pipeline.events import PodsListed
    from agent.run.agent import Agent

    agent = Agent(from_sources({"node_name": "bench-node", "replay": "sample", "exporter": "otlp",
                                "export_interval": 3600, "debug_address": "off", "procfs": "off"}, os.environ))
    agent.handler.handle(PodsListed(pods=tuple(POD.record(realistic_pod(i)) for i in range(n))))
    agent.telemetry.flush()
    points, resource = last_export_points(receiver), _last_resource(receiver)
    cpu, wall = _interleaved({"agent": agent.telemetry.flush,
                              "floor": lambda: _floor_export(points, conn, resource)}, repeat)
    agent.telemetry.shutdown(final_export=False)
    a, f = statistics.median(cpu["agent"]), statistics.median(cpu["floor"])
    print(f"| {n:,} | {len(points):,} | {a:.1f} | {f:.1f} | {a / f:.2f}x | {statistics.median(wall['agent']):.1f} | "
          f"{statistics.median(wall['floor']):.1f} |")


def _last_resource(receiver: HttpReceiver) -> dict[str, str]:
    """The resource attributes of the last export, as text (none when it carried no point)."""
    with receiver.cond:
        sent = points_of(receiver.requests[-1][1])
    return {k: str(v) for k, v in sent[0].resource.items()} if sent else {}


def _interleaved(runs: dict[str, Callable[[], object]],
                 repeat: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Thread CPU and wall milliseconds of each run, ``repeat`` rounds interleaved so machine noise hits all alike."""
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    wall: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, fn in runs.items():
            gc.collect()
            c0, w0 = time.thread_time(), time.perf_counter()
            fn()
            cpu[name].append((time.thread_time() - c0) * 1000)
            wall[name].append((time.perf_counter() - w0) * 1000)
    return cpu, wall


def _floor_export(points: list[Point], conn: http.client.HTTPConnection, resource: dict[str, str]) -> int:
    """The floor: the same points built directly as OTLP protobuf, serialised, gzipped and POSTed. Returns HTTP
    status."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric

    request = ExportMetricsServiceRequest()
    rm = request.resource_metrics.add()
    for key, label in resource.items():
        kv = rm.resource.attributes.add()
        kv.key, kv.value.string_value = key, label
    scope = rm.scope_metrics.add()
    scope.scope.name = "floor"
    metrics: dict[str, Metric] = {}
    now = time.time_ns()
    for name, attributes, value in points:
        metric = metrics.get(name)
        if metric is None:
            metric = metrics[name] = scope.metrics.add()
            metric.name = name
        dp = metric.gauge.data_points.add()
        dp.time_unix_nano, dp.as_double = now, value
        for key, text in attributes.items():
            kv = dp.attributes.add()
            kv.key, kv.value.string_value = key, text
    body = gzip.compress(request.SerializeToString(), compresslevel=6)
    conn.request("POST", "/v1/metrics", body=body, headers={"Content-Type": "application/x-protobuf",
                                                             "Content-Encoding": "gzip"})
    response = conn.getresponse()
    response.read()
    return response.status
