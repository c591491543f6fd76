"""End to end: fake API server -> agent -> OTLP/HTTP -> a real VictoriaMetrics -> PromQL."""

from __future__ import annotations

import time

import pytest

from testkit.waiting import wait_until
from testkit.factory import container, pod, vm_pod


def by_pod(result) -> dict[str, float]:
    return {r["metric"]["k8s.pod.name"]: float(r["value"][1]) for r in result}


def test_series_appear_follow_updates_and_stop_for_deleted_pods(apiserver, make_agent, victoriametrics, monkeypatch):
    node = f"e2e-{time.time_ns()}"  # this run's series only
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", victoriametrics.otlp_endpoint)
    web = apiserver.create(pod("web", node=node, containers=[container("a", "250m", "256Mi")]))
    apiserver.create(pod("gone-soon", node=node, containers=[container("a", "1", "1Gi")]))
    apiserver.create(vm_pod("compute-1", "vm-1", "500m", "2Gi", node=node))
    agent = make_agent(node_name=node, exporter="otlp", export_interval=0.5)
    sel = f'{{k8s_node="{node}"}}'.replace("k8s_node", "k8s.node.name")

    def cpu() -> dict[str, float]:
        return by_pod(victoriametrics.query(f"pod_or_vm_cpu_requests{sel}"))

    wait_until(lambda: cpu() == {"web": 0.25, "gone-soon": 1.0, "compute-1": 0.5}, timeout=20, message="series appear")
    mem = by_pod(victoriametrics.query(f"pod_or_vm_mem_requests{sel}"))
    assert mem == {"web": 256 * 2**20, "gone-soon": 2**30, "compute-1": 2 * 2**30}
    vm = victoriametrics.query(f"vm_mem_usage{sel}")
    assert [(r["metric"]["neon.vm.name"], float(r["value"][1])) for r in vm] == [("vm-1", 2 * 2**30)]

    web["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1500m"
    apiserver.update(web)
    wait_until(lambda: cpu().get("web") == 1.5, timeout=20, message="update followed")

    apiserver.delete("default", "gone-soon")
    wait_until(lambda: "gone-soon" not in {p.name for p in agent.state.pods()}, timeout=10,
               message="the agent handled the delete")
    handled_at = time.time()

    def times(name: str) -> list[float]:
        rows = victoriametrics.samples(f'pod_or_vm_cpu_requests{{k8s.pod.name="{name}",k8s.node.name="{node}"}}')
        return [ts / 1000 for row in rows for ts in row["timestamps"]]

    # Live pods keep being exported: wait until several intervals have landed...
    wait_until(lambda: max(times("web")) > handled_at + 2.0, timeout=20, message="live pod exported after the delete")
    # ...and none of them carried the deleted pod: an export reads the state, then stamps its points, so at most
    # the one that read it just before the delete was handled can bear a later time.
    late = [t for t in times("gone-soon") if t > handled_at]
    assert len(late) <= 1, f"samples written for a deleted pod after the agent dropped it: {late}"
    # The seed's names, exactly.
    names = {r["metric"]["__name__"] for r in victoriametrics.query(f'{{__name__=~"pod_or_vm_.*",k8s.node.name="{node}"}}')}
    assert names == {"pod_or_vm_cpu_requests", "pod_or_vm_mem_requests"}


@pytest.mark.parametrize("flag", ["-opentelemetry.usePrometheusNaming"])
def test_prometheus_naming_keeps_the_cpu_name_and_suffixes_bytes(flag, apiserver, make_agent, tmp_path, monkeypatch):
    """What a Prometheus-style OTLP receiver does to the names (see README, 'Prometheus names')."""
    from testkit.victoriametrics import VictoriaMetrics

    vm = VictoriaMetrics(tmp_path / "vm", (flag,))
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", vm.otlp_endpoint)
        apiserver.create(pod("p", containers=[container("a", "1", "1Gi")]))
        make_agent(exporter="otlp", export_interval=0.5)
        wait_until(lambda: vm.query("pod_or_vm_cpu_requests") and vm.query("pod_or_vm_mem_requests_bytes"), timeout=20)
        row = vm.query("pod_or_vm_mem_requests_bytes")[0]["metric"]
        assert row["k8s_pod_name"] == "p" and row["k8s_node_name"] == "node-a"
    finally:
        vm.stop()


def test_runtime_metrics_arrive_with_the_documented_names(apiserver, make_agent, victoriametrics, monkeypatch):
    from agent.telemetry.table import PREFIX, RUNTIME_METRICS

    node = f"e2e-runtime-{time.time_ns()}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", victoriametrics.otlp_endpoint)
    apiserver.create(pod("p", node=node))
    make_agent(node_name=node, exporter="otlp", export_interval=0.5)
    expected = set()
    for m in RUNTIME_METRICS:
        if m.kind == "histogram":
            expected |= {PREFIX + m.name + s for s in ("_bucket", "_sum", "_count")}
        elif m.name not in ("handler_errors_total", "pod_problems_total", "api_errors_total", "usage_read_errors_total",
                            "export_failures_total", "objects_skipped_total"):
            # (those have no series until something fails)
            expected.add(PREFIX + m.name)

    def names():
        rows = victoriametrics.query(f'count by (__name__) ({{__name__=~"{PREFIX}.*",k8s.node.name="{node}"}})')
        return {r["metric"]["__name__"] for r in rows}

    wait_until(lambda: expected <= names(), timeout=30, message="every documented runtime metric arrives")
    synced = victoriametrics.query(f'{PREFIX}synced{{k8s.node.name="{node}"}}')
    assert float(synced[0]["value"][1]) == 1
    p99 = victoriametrics.query(
        f'histogram_quantile(0.99, sum by (le) ({PREFIX}workqueue_queue_duration_seconds_bucket{{k8s.node.name="{node}"}}))')
    assert p99 and 0 <= float(p99[0]["value"][1]) < 1


def test_node_comparisons_follow_the_node_object(apiserver, make_agent, victoriametrics, monkeypatch):
    node = f"e2e-node-{time.time_ns()}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", victoriametrics.otlp_endpoint)
    node_obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "namespace": ""},
                "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                           "allocatable": {"cpu": "7", "memory": "30Gi", "pods": "110"}}}
    apiserver.create(node_obj, kind="nodes")
    apiserver.create(pod("app", node=node, containers=[container("a", "2", "4Gi")]))
    apiserver.create(vm_pod("vm", "vm-1", "1", "2Gi", node=node))
    agent = make_agent(node_name=node, exporter="otlp", export_interval=0.5, procfs="/proc")

    def cpu() -> dict[str, float]:
        rows = victoriametrics.query(f'node_requests_node_cpu_cores{{k8s.node.name="{node}"}}')
        return {r["metric"]["quantity"]: float(r["value"][1]) for r in rows}

    wait_until(lambda: {"capacity", "allocatable", "scheduled", "pod_or_vm", "vm_usage", "used"} <= set(cpu()), timeout=20)
    values = cpu()
    assert (values["capacity"], values["allocatable"], values["scheduled"], values["pod_or_vm"], values["vm_usage"]) == (8, 7, 2, 3, 1)
    ratio = victoriametrics.query(f'node_requests_node_ratio{{k8s.node.name="{node}",resource="cpu",ratio="pod_or_vm_to_allocatable"}}')
    assert float(ratio[0]["value"][1]) == pytest.approx(3 / 7)
    mem = victoriametrics.query(f'node_requests_node_memory_bytes{{k8s.node.name="{node}",quantity="allocatable"}}')
    assert float(mem[0]["value"][1]) == 30 * 2**30

    def samples(quantity: str) -> list[tuple[float, float]]:
        """(time, value) of every sample of one node quantity: the agent's own timestamps."""
        rows = victoriametrics.samples(f'node_requests_node_cpu_cores{{k8s.node.name="{node}",quantity="{quantity}"}}')
        return [(ts / 1000, v) for row in rows for ts, v in zip(row["timestamps"], row["values"])]

    node_obj["status"]["allocatable"]["cpu"] = "6"
    apiserver.update(node_obj, kind="nodes")
    changed = time.time()
    wait_until(lambda: cpu().get("allocatable") == 6, timeout=20)
    # Exported within the bound this test always had, now from the samples' own times, not from when
    # VictoriaMetrics made them searchable (its ingestion runs on its own schedule).
    first = min(t for t, v in samples("allocatable") if v == 6)
    assert first - changed < 5, first - changed

    apiserver.delete("", node, kind="nodes")
    wait_until(lambda: agent.state.node is None, timeout=10, message="the agent handled the Node's delete")
    handled_at = time.time()
    wait_until(lambda: max(t for t, _ in samples("pod_or_vm")) > handled_at + 2.0, timeout=20)
    # As for a deleted pod: at most the export that read the state just before the delete was handled.
    for quantity in ("allocatable", "capacity"):
        late = [t for t, _ in samples(quantity) if t > handled_at]
        assert len(late) <= 1, (quantity, late)

    node_obj["status"]["allocatable"]["cpu"] = "5"
    apiserver.create(node_obj, kind="nodes")  # the Node comes back
    wait_until(lambda: cpu().get("allocatable") == 5 and max(t for t, _ in samples("allocatable")) > time.time() - 2,
               timeout=20)
