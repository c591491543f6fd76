"""Golden exposition tables (kube-state-metrics' habit): a fixed node state in, the exact points, /metrics text and
OTLP request out.

The golden files under tests/export/golden/ are the mixed node of factory.mixed_pods (init/sidecar peaks,
overhead, a live migration pair, a broken annotation, terminal pods). Any change to names, attributes, units or
values shows up as a diff. Every value in them is also checked against hand arithmetic below (PODS, VMS, ...),
not against the code that wrote them, so regenerating (``NRA_UPDATE_GOLDEN=1 python -m pytest
tests/export/test_golden.py``) cannot bless a wrong formula.
"""

from __future__ import annotations

import os
import uuid
from fractions import Fraction as F
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToJson, Parse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AGGREGATION_TEMPORALITY_CUMULATIVE
from opentelemetry.sdk.metrics.export import MetricsData
from prometheus_client.parser import text_string_to_metric_families

from agent.export.metrics import state_points
from agent.export.otlp.encode import RequestBuilder
from agent.export.prometheus.exposition import render_metrics
from agent.model.node_summary import Usage
from agent.decode.reader import NODE, POD
from agent.model.quantity import NANO
from agent.model.rules import NEWEST
from agent.model.valuation import evaluate
from agent.pipeline.events import ADDED, RELIST
from agent.pipeline.state import NodeSnapshot
from agent.telemetry.stats import RuntimeStats
from testkit.factory import GI, MI, mixed_pods, summary_node
from testkit.virtual_time import VirtualClock

GOLDEN = Path(__file__).parent / "golden"
START_NS, NOW_NS = 1_699_999_990 * 10**9, 1_700_000_000 * 10**9  # the agent's start, the export
NOW = NOW_NS / 1e9  # when the verdict is judged: the export's time


def snapshot() -> NodeSnapshot:
    pods = tuple(sorted((evaluate(POD.record(p), NEWEST) for p in mixed_pods()), key=lambda v: v.name))
    return NodeSnapshot("node-a", pods, NODE.record(summary_node()), Usage(cpu=3 * NANO, memory=10 * GI * NANO),
                        synced=True, node_listed=True, resource_version="42")


def stats() -> RuntimeStats:
    clock = VirtualClock()
    s = RuntimeStats(clock=clock, wall=lambda: 1_700_000_000.0)
    for kind, wait, work in ((RELIST, 0.0002, 0.004), (ADDED, 0.00003, 0.00005)):
        s.event_added(kind)
        clock.advance(wait)
        s.event_taken(wait)
        s.event_handled(work)
    s.relisted(0.12, "pods")
    s.watch_started("initial", "pods")
    s.request_failed("http_500", "pods")
    s.pod_problem("usage", "invalid_json")
    s.export_finished(True, 0.003)
    clock.advance(1.0)
    return s


def compare(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("NRA_UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from the golden file; review and regenerate if intended"


def test_state_points_golden():
    s = snapshot()
    lines = sorted(f"{p.metric}{{{','.join(f'{k}={v!r}' for k, v in sorted(p.attributes.items()))}}} {p.value!r}"
                   for p in state_points(s.pods, s.summary(), s.verdict(NOW)))
    compare("state_points.txt", "\n".join(lines) + "\n")


def test_metrics_exposition_golden():
    text = render_metrics(snapshot(), stats().snapshot(), NOW).decode()
    compare("metrics.txt", text)




class _Frozen:
    """A node state that holds one snapshot (RequestBuilder reads nothing else of it)."""

    def __init__(self, node: NodeSnapshot) -> None:
        self._node = node

    def snapshot(self) -> NodeSnapshot:
        return self._node


def otlp_request() -> ExportMetricsServiceRequest:
    """The export request for the golden state and stats(), as it goes on the wire and is decoded there."""
    builder = RequestBuilder(_Frozen(snapshot()), stats(), {"k8s.node.name": "node-a"}, "0.0.0",
                             wall_ns=iter((START_NS, NOW_NS)).__next__)
    request, _ = builder.build(MetricsData(resource_metrics=[]))
    return ExportMetricsServiceRequest.FromString(request.SerializeToString())


def test_otlp_request_golden():
    compare("otlp_request.json", MessageToJson(otlp_request(), indent=1) + "\n")


# -- every golden value, worked out by hand from the fixture (factory.mixed_pods on factory.summary_node) --------
# The golden files are written by the code under test; these tables are not, so a wrong formula cannot be blessed
# into them. Each value is the README's rule applied by hand to the requests the factory wrote.

Mi = MI
# (namespace, pod, source, cpu cores, memory bytes) for every reported pod (Succeeded and Failed pods report nothing).
PODS = [
    ("default", "web", "pod_requests", F(500, 1000) + F(250, 1000), 1024 * Mi + 256 * Mi),
    # init 2/1Gi after sidecar 100m/128Mi, then sidecar + app 1/512Mi; overhead 100m/64Mi on top:
    # max(0.1 + 1, 0.1 + 2) + 0.1 = 2.2 cores; max(128 + 512, 128 + 1024) + 64 = 1216 Mi.
    ("default", "batch", "pod_requests", max(F(1, 10) + 1, F(1, 10) + 2) + F(1, 10), max(128 + 512, 128 + 1024) * Mi + 64 * Mi),
    ("default", "pending", "pod_requests", F(1), 2 * GI),  # Pending but bound: counted
    ("neon", "broken-vm", "pod_requests", F(250, 1000), 256 * Mi),  # usage annotation unreadable: the runner's requests
    ("neon", "vm1-src", "vm_usage", F(2) / 2, 4 * GI // 1),  # migration source: usage over overcommit (cpu 2, memory 1)
    ("neon", "vm1-dst", "vm_usage", F(2), 4 * GI),  # migration target: no overcommit
    ("neon", "vm2", "vm_usage", F(1, 2), 1 * GI),
]
# (pod, VM, migration role, cpu, memory) of the vm.neon.tech/usage annotations as read.
VMS = [("vm1-src", "vm1", "source", F(2), 4 * GI), ("vm1-dst", "vm1", "target", F(2), 4 * GI), ("vm2", "vm2", "none", F(1, 2), GI)]
CAPACITY, ALLOCATABLE = (F(8), 32 * GI), (F(15, 2), 30 * GI)
# What the scheduler counts: the pods' own requests (NeonVM runner pods request nothing; broken-vm's runner does).
SCHEDULED = (F(3, 4) + F(11, 5) + 1 + F(1, 4), (1280 + 1216 + 2048 + 256) * Mi)
POD_OR_VM = (sum(p[3] for p in PODS), sum(p[4] for p in PODS))
VM_USAGE = (F(2) + F(1, 2), 4 * GI + GI)  # vm1 counted once, though both pods of its migration are on the node
USED = (F(3), 10 * GI)  # the Usage the snapshot was given
PHASES = {"Running": 5, "Pending": 2, "Succeeded": 1, "Failed": 1}  # web batch broken-vm vm1-src vm2 | pending vm1-dst
SOURCES = {"pod_requests": 4, "vm_usage": 3}
# The cluster-autoscaler's verdict (default settings, release 1.36: no pod here is valued differently from 1.37):
# utilization is the pods' own requests over allocatable per resource (no upstream release reads the VM usage
# annotation, only neon's patched one: what the scheduler counts); cpu is the larger, 4.2 of 7.5 cores, so not
# underutilized against 0.5. Every reported pod blocks as not_replicated: web, batch and pending have no controller; the runner
# pods' controllers (VirtualMachine, VirtualMachineMigration for the migration target) are not ones the autoscaler
# trusts. Terminal pods are not judged.
UTILIZATION = {"cpu": SCHEDULED[0] / ALLOCATABLE[0], "memory": F(SCHEDULED[1]) / ALLOCATABLE[1]}
STATE = "not_underutilized"
BLOCKING = {(ns, name): "not_replicated" for ns, name, *_ in PODS}


def uid(namespace: str, name: str) -> str:
    """The factory's uid: uuid5 of namespace/name."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}"))


def expected_points() -> dict[tuple[str, frozenset], F]:
    """Every point of the golden state: metric and attribute set to the value."""
    out: dict[tuple[str, frozenset], F] = {}
    for ns, name, source, cpu, memory in PODS:
        attrs = {"k8s.namespace.name": ns, "k8s.pod.name": name, "k8s.pod.uid": uid(ns, name), "source": source}
        out[("pod_or_vm_cpu_requests", frozenset(attrs.items()))] = F(cpu)
        out[("pod_or_vm_mem_requests", frozenset(attrs.items()))] = F(memory)
    for name, vm, role, cpu, memory in VMS:
        attrs = {"k8s.namespace.name": "neon", "k8s.pod.name": name, "k8s.pod.uid": uid("neon", name),
                 "neon.vm.migration.role": role, "neon.vm.name": vm}
        out[("vm_cpu_usage", frozenset(attrs.items()))] = cpu
        out[("vm_mem_usage", frozenset(attrs.items()))] = F(memory)
    quantities = {"capacity": CAPACITY, "allocatable": ALLOCATABLE, "scheduled": SCHEDULED, "pod_or_vm": POD_OR_VM,
                  "vm_usage": VM_USAGE, "used": USED}
    for quantity, (cpu, memory) in quantities.items():
        out[("node_requests_node_cpu_cores", frozenset({("quantity", quantity)}))] = F(cpu)
        out[("node_requests_node_memory_bytes", frozenset({("quantity", quantity)}))] = F(memory)
    for ratio, (top, bottom) in {"pod_or_vm_to_allocatable": (POD_OR_VM, ALLOCATABLE),
                                 "scheduled_to_allocatable": (SCHEDULED, ALLOCATABLE),
                                 "used_to_allocatable": (USED, ALLOCATABLE), "used_to_pod_or_vm": (USED, POD_OR_VM)}.items():
        for i, resource in enumerate(("cpu", "memory")):
            out[("node_requests_node_ratio", frozenset({("ratio", ratio), ("resource", resource)}))] = F(top[i]) / F(bottom[i])
    for quantity in ("capacity", "allocatable"):
        out[("node_requests_node_pod_slots", frozenset({("quantity", quantity)}))] = F(110)
    for phase, n in PHASES.items():
        out[("node_requests_node_pods_by_phase", frozenset({("phase", phase)}))] = F(n)
    for source, n in SOURCES.items():
        out[("node_requests_node_pods_by_source", frozenset({("source", source)}))] = F(n)
    for resource, ratio in UTILIZATION.items():
        out[("node_requests_node_autoscaler_utilization", frozenset({("resource", resource)}))] = F(ratio)
    out[("node_requests_node_autoscaler_node_utilization", frozenset({("resource", "cpu")}))] = F(UTILIZATION["cpu"])
    out[("node_requests_node_autoscaler_threshold", frozenset())] = F(1, 2)
    for state in ("underutilized", "not_underutilized", "scale_down_disabled", "unknown",
                  "allocatable_unusable", "autoscaler_crash"):
        out[("node_requests_node_autoscaler_state", frozenset({("state", state)}))] = F(state == STATE)
    out[("node_requests_node_autoscaler_scale_down_candidate", frozenset())] = F(STATE == "underutilized")
    out[("node_requests_node_autoscaler_removable", frozenset())] = F(STATE == "underutilized" and not BLOCKING)
    reasons = ("controller_not_found", "min_replicas_reached", "on_completion", "not_replicated",
               "unmovable_kube_system", "kube_system_pdb_unknown", "not_safe_to_evict", "local_storage", "not_enough_pdb",
               "pdb_unknown")
    for reason in reasons:
        out[("node_requests_node_autoscaler_blocking_pods", frozenset({("reason", reason)}))] = F(
            sum(r == reason for r in BLOCKING.values()))
    for (ns, name), reason in BLOCKING.items():
        attrs = {"k8s.namespace.name": ns, "k8s.pod.name": name, "k8s.pod.uid": uid(ns, name), "reason": reason}
        out[("pod_autoscaler_blocking", frozenset(attrs.items()))] = F(1)
    return out


def assert_all_values(got: dict[tuple[str, frozenset], float], expected: dict[tuple[str, frozenset], F]) -> None:
    assert set(got) == set(expected), (sorted(set(got) - set(expected)), sorted(set(expected) - set(got)))
    wrong = {k: (got[k], float(v)) for k, v in expected.items() if got[k] != pytest.approx(float(v), rel=1e-12, abs=0)}
    assert not wrong, wrong


def test_every_golden_point_is_the_hand_computed_value():
    s = snapshot()
    got = {(p.metric, frozenset(p.attributes.items())): p.value for p in state_points(s.pods, s.summary(), s.verdict(NOW))}
    assert_all_values(got, expected_points())
    # ... and the golden file holds exactly these points.
    golden = (GOLDEN / "state_points.txt").read_text().splitlines()
    assert len(golden) == len(got)


def histogram(name: str, observations: list[float]) -> dict[tuple[str, frozenset], F]:
    """A Prometheus histogram of ``observations`` on the agent's documented bucket bounds (1 µs to 60 s)."""
    bounds = [1e-06, 2.5e-06, 5e-06, 1e-05, 2.5e-05, 5e-05, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
              0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, float("inf")]
    out = {(f"{name}_bucket", frozenset({("le", b)})): F(sum(o <= b for o in observations)) for b in bounds}
    out[(f"{name}_count", frozenset())] = F(len(observations))
    out[(f"{name}_sum", frozenset())] = F(sum(F(str(o)) for o in observations))
    return out


def expected_metrics() -> dict[tuple[str, frozenset], F]:
    """Every sample of /metrics for the golden state and the scripted stats(): the product points under their
    Prometheus names, and the agent's own series as stats() drives them."""
    out: dict[tuple[str, frozenset], F] = {}
    for (metric, attrs), value in expected_points().items():
        out[(metric, frozenset((k.replace(".", "_"), v) for k, v in attrs))] = value
    agent = "node_requests_agent_"
    out |= {(agent + name, frozenset(labels)): F(value) for name, labels, value in [
        ("workqueue_depth", {}, 0),
        ("workqueue_adds_total", {("event_type", "RELIST")}, 1), ("workqueue_adds_total", {("event_type", "ADDED")}, 1),
        ("workqueue_unfinished_work_seconds", {}, 0), ("workqueue_longest_running_processor_seconds", {}, 0),
        ("events_handled_total", {("result", "success")}, 2), ("events_handled_total", {("result", "error")}, 0),
        ("pod_problems_total", {("reason", "invalid_json"), ("subject", "usage")}, 1),
        ("watch_starts_total", {("reason", "initial"), ("resource", "pods")}, 1),
        ("relists_total", {("resource", "pods")}, 1),
        ("api_errors_total", {("reason", "http_500"), ("resource", "pods")}, 1),
        ("list_duration_seconds", {("resource", "pods")}, F(12, 100)),
        ("last_event_age_seconds", {("resource", "pods")}, 1),  # the clock moves 1 s after the last event is handled
        ("pods_cached", {}, len(mixed_pods())),
        ("synced", {}, 1),
        ("kubernetes_info", {("rules", "1.37"), ("server_version", "unknown"), ("source", "default")}, 1),
        ("exports_total", {("result", "success")}, 1), ("exports_total", {("result", "failure")}, 0),
        ("export_rejected_points_total", {}, 0),
        ("last_export_success_timestamp_seconds", {}, 1_700_000_000),
    ]}
    out |= histogram(agent + "workqueue_queue_duration_seconds", [0.0002, 0.00003])
    out |= histogram(agent + "workqueue_work_duration_seconds", [0.004, 0.00005])
    out |= histogram(agent + "export_duration_seconds", [0.003])
    return {(metric, frozenset(labels | {("k8s_node_name", "node-a")})): v for (metric, labels), v in out.items()}


def test_every_golden_metrics_sample_is_the_hand_computed_value():
    got = {}
    for family in text_string_to_metric_families((GOLDEN / "metrics.txt").read_text()):
        for sample in family.samples:
            labels = {(k, float(v) if k == "le" else v) for k, v in sample.labels.items()}
            got[(sample.name, frozenset(labels))] = sample.value
    assert_all_values(got, expected_metrics())


def test_every_golden_otlp_point_is_the_hand_computed_value_and_histograms_are_otlp_histograms():
    """Each histogram is one cumulative OTLP Histogram point in seconds, from the agent's start; read the way a
    Prometheus-style receiver reads it (``_bucket{le}`` cumulative, ``_sum``, ``_count``), every point is the hand
    value that /metrics carries."""
    request = Parse((GOLDEN / "otlp_request.json").read_text(), ExportMetricsServiceRequest())
    (resource,) = request.resource_metrics
    node = {(a.key.replace(".", "_"), a.value.string_value) for a in resource.resource.attributes}
    got: dict[tuple[str, frozenset], float] = {}
    histograms = []
    for metric in (m for scope in resource.scope_metrics for m in scope.metrics):
        kind = metric.WhichOneof("data")
        for dp in getattr(metric, kind).data_points:
            labels = frozenset({(a.key.replace(".", "_"), a.value.string_value) for a in dp.attributes} | node)
            if kind != "histogram":
                got[(metric.name, labels)] = dp.as_double if dp.WhichOneof("value") == "as_double" else dp.as_int
                continue
            histograms.append(metric.name)
            assert metric.unit == "s" and metric.histogram.aggregation_temporality == AGGREGATION_TEMPORALITY_CUMULATIVE
            assert (dp.start_time_unix_nano, dp.time_unix_nano) == (START_NS, NOW_NS)
            assert len(dp.bucket_counts) == len(dp.explicit_bounds) + 1 == 25 and sum(dp.bucket_counts) == dp.count
            running = 0
            for bound, n in zip((*dp.explicit_bounds, float("inf")), dp.bucket_counts):
                running += n
                got[(metric.name + "_bucket", labels | {("le", bound)})] = running
            got[(metric.name + "_sum", labels)], got[(metric.name + "_count", labels)] = dp.sum, dp.count
    assert sorted(histograms) == ["node_requests_agent_export_duration_seconds",
                                  "node_requests_agent_workqueue_queue_duration_seconds",
                                  "node_requests_agent_workqueue_work_duration_seconds"]
    assert_all_values(got, expected_metrics())
