"""The honest push through the Collector, before issue 38 and now (``bench/run.py collector-push``).

Two Collectors side by side: the one of the commit before issue 38 (``NRA_BENCH_COLLECTOR_BEFORE``, default
291f010: its otel-config/ taken from the repository's history with ``git archive`` and built by
components.collector, which caches by content) and the current tree's. Each runs its own commit's shipped
collector.yaml as the suite runs the shipped Collector (testkit.collector.Collector: TLS, the oidc token check
against a real API server's issuer, admission, nodeidentity, remote write into its own Prometheus 3 with the shipped
storage, its Deployment's Go runtime settings). The pushes are the agent's own OTLP requests (testkit.honest_push): a
node of 110 ordinary VM pods, and the largest honest node (220 pods, migrating, blocking, longest names). Each is
stamped anew before each push, as the agent's next export would be, gzipped as the agent sends it, and posted with
an agent pod's token to both Collectors in turn (before, now, now, before...), on a new TLS connection each time, and
again on one kept-alive connection per Collector. Timed: connect (if new) to the answer read; every answer must be
200.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import io
import os
import ssl
import statistics
import subprocess
import tarfile
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from bench.common import ROOT, load, machine, required
from components.collector import otelcol_bin
from testkit.collector import SHIPPED_CONFIG, Collector, go_runtime_env
from testkit.honest_push import LONGEST_NODE, agents_push, largest_honest_pods, ordinary_vm_pods
from testkit.otlp_receiver import HttpReceiver
from testkit.trust import TrustCluster, collector_env, remote_write_prometheus, running_trust_cluster

#: The commit whose Collector is "before": the one issue 38 started from. Any git revision of this repository.
BEFORE = os.environ.get("NRA_BENCH_COLLECTOR_BEFORE", "291f010")
PUSHES, WARMUP = 60, 5


@dataclass(frozen=True)
class Side:
    """One Collector to push to, with what a sender needs to reach it."""

    name: str
    url: str
    context: ssl.SSLContext


@dataclass(frozen=True)
class Push:
    """One honest push, sent by one node's agent."""

    label: str
    node: str
    token: str
    request: ExportMetricsServiceRequest


def main(pushes: int = PUSHES, warmup: int = WARMUP) -> None:
    print("\n### The honest push through the Collector, before issue 38 and now\n")
    print(f"machine: {machine()}; {load()} at start\n")
    with tempfile.TemporaryDirectory(prefix="nra-collector-push-") as tmp:
        work = Path(tmp)
        configs = {f"before ({BEFORE})": otel_config_of(BEFORE, work / "before"), "now": SHIPPED_CONFIG.parent}
        binaries = {name: otelcol_bin(config / "builder-config.yaml") for name, config in configs.items()}
        with HttpReceiver() as receiver:
            bodies = [("110 VM pods", "node-a", agents_push(receiver, "node-a", ordinary_vm_pods(110, "node-a"))),
                      ("220 pods, the largest honest", "node-b",
                       agents_push(receiver, LONGEST_NODE, largest_honest_pods(220)))]
        with contextlib.ExitStack() as stack:
            cluster = stack.enter_context(running_trust_cluster(work / "cluster", nodes=("node-a", "node-b")))
            sides = [stack.enter_context(_running(name, config, binaries[name], cluster, work / f"side-{i}"))
                     for i, (name, config) in enumerate(configs.items())]
            print(f"Each push posted {pushes} times to each Collector, interleaved (before, now, now, before...), the "
                  f"first {warmup} of each left out; gzipped as the agent sends it, stamped anew each time; "
                  "milliseconds from connect (a new connection) or from the request (kept alive) to the answer read.\n")
            before, now = sides
            print(f"| push | bytes (gzipped) | connection | {before.name} median / p90 ms | {now.name} median / p90 ms "
                  "| now / before, median |")
            print("|---|---:|---|---:|---:|---:|")
            for label, node, body in bodies:
                push = Push(label=label, node=node, token=_agent_token(cluster, node),
                            request=ExportMetricsServiceRequest.FromString(body))
                size = f"{len(body):,} ({len(gzip.compress(body, compresslevel=6)):,})"
                for kept_alive in (False, True):
                    times = _interleaved(sides, push, pushes, kept_alive)
                    b, n = (t[warmup:] for t in times)
                    print(f"| {label} | {size} | {'kept alive' if kept_alive else 'new TLS'} | "
                          f"{statistics.median(b):.1f} / {_p90(b):.1f} | {statistics.median(n):.1f} / {_p90(n):.1f} | "
                          f"{statistics.median(n) / statistics.median(b):.2f}x |")
    print(f"\n{load()} at the end")


def otel_config_of(rev: str, into: Path) -> Path:
    """The otel-config/ folder of commit ``rev``, from this repository's history (``git archive``), under ``into``."""
    archived = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "otel-config"], capture_output=True)
    if archived.returncode != 0:
        raise SystemExit(f"NRA_BENCH_COLLECTOR_BEFORE={rev}: git archive failed: {archived.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(archived.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into / "otel-config"


@contextlib.contextmanager
def _running(name: str, otel_config: Path, binary: Path, cluster: TrustCluster, workdir: Path) -> Iterator[Side]:
    """``binary`` running ``otel_config``'s collector.yaml as the suite runs the shipped one, writing into its own
    Prometheus 3."""
    with remote_write_prometheus(workdir / "prometheus") as prom, \
            Collector(workdir / "otelcol", otel_config / "collector.yaml", binary=binary,
                      env={**collector_env(cluster, f"{prom.url}/api/v1/write"), **go_runtime_env(otel_config)}) as c:
        ca = required(c.ca_file, f"the TLS of {name}'s OTLP/HTTP receiver")
        yield Side(name=name, url=c.otlp_http_metrics_url, context=ssl.create_default_context(cafile=ca))


def _agent_token(cluster: TrustCluster, node: str) -> str:
    """A Collector-audience token of an agent pod on ``node``, as the kubelet projects it."""
    return cluster.pod_token(cluster.agent_pod(node, name=f"push-bench-{node}"))


def _interleaved(sides: list[Side], push: Push, pushes: int, kept_alive: bool) -> list[list[float]]:
    """Milliseconds of each of ``pushes`` pushes to each side, the sides taking turns, which goes first alternating
    from round to round (before, now, now, before...), so neither always follows the other's write."""
    times: list[list[float]] = [[] for _ in sides]
    connections: list[http.client.HTTPSConnection | None] = [None] * len(sides)
    try:
        for round_ in range(pushes):
            for i, side in (reversed(list(enumerate(sides))) if round_ % 2 else enumerate(sides)):
                body = _stamped(push.request)
                conn = connections[i] or _connect(side)
                start = time.perf_counter()
                if conn.sock is None:
                    conn.connect()
                conn.request("POST", urllib.parse.urlsplit(side.url).path, body=body,
                             headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip",
                                      "User-Agent": "node-requests-agent", "Authorization": f"Bearer {push.token}"})
                response = conn.getresponse()
                answer = response.read()
                times[i].append((time.perf_counter() - start) * 1000)
                if response.status != 200:
                    raise SystemExit(f"{side.name} answered {push.label} {response.status}: {answer[:300]!r}")
                if kept_alive and not response.will_close:
                    connections[i] = conn
                else:
                    conn.close()
    finally:
        for held in connections:
            if held is not None:
                held.close()
    return times


def _connect(side: Side) -> http.client.HTTPSConnection:
    """An unconnected HTTPS connection to ``side`` (it connects on first use, inside the timing)."""
    url = urllib.parse.urlsplit(side.url)
    return http.client.HTTPSConnection(required(url.hostname, side.url), url.port, timeout=30, context=side.context)


def _stamped(request: ExportMetricsServiceRequest) -> bytes:
    """``request`` with every point stamped now, as the agent's next export of the same node, gzipped as it sends."""
    now = time.time_ns()
    for resource in request.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                kind = metric.WhichOneof("data")
                for point in getattr(metric, kind).data_points if kind else ():
                    point.time_unix_nano = now
    return gzip.compress(request.SerializeToString(), compresslevel=6)


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]
