"""End to end: fake API server -> agent -> OTLP/HTTP -> a real VictoriaMetrics -> PromQL."""

from __future__ import annotations

import time

import pytest

from tests.conftest import wait_until
from tests.factory import container, pod, vm_pod


def by_pod(result) -> dict[str, float]:
    return {r["metric"]["k8s.pod.name"]: float(r["value"][1]) for r in result}


def test_series_appear_follow_updates_and_stop_for_deleted_pods(apiserver, make_agent, victoriametrics, monkeypatch):
    node = f"e2e-{time.time_ns()}"  # this run's series only
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", victoriametrics.otlp_endpoint)
    web = apiserver.create(pod("web", node=node, containers=[container("a", "250m", "256Mi")]))
    apiserver.create(pod("gone-soon", node=node, containers=[container("a", "1", "1Gi")]))
    apiserver.create(vm_pod("compute-1", "vm-1", "500m", "2Gi", node=node))
    make_agent(node_name=node, exporter="otlp", export_interval=0.5)
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
    deleted_at = time.time()

    def newest(name: str) -> float:
        rows = victoriametrics.samples(f'pod_or_vm_cpu_requests{{k8s.pod.name="{name}",k8s.node.name="{node}"}}')
        return max(ts for row in rows for ts in row["timestamps"]) / 1000

    # Live pods keep being exported: wait until several intervals have landed...
    wait_until(lambda: newest("web") > deleted_at + 2.0, timeout=20, message="live pod exported after the delete")
    # ...and none of them carried the deleted pod (at most the export already under way).
    assert newest("gone-soon") <= deleted_at + 0.6, "a sample was written for a deleted pod after the next export"
    # The seed's names, exactly.
    names = {r["metric"]["__name__"] for r in victoriametrics.query(f'{{__name__=~"pod_or_vm_.*",k8s.node.name="{node}"}}')}
    assert names == {"pod_or_vm_cpu_requests", "pod_or_vm_mem_requests"}


@pytest.mark.parametrize("flag", ["-opentelemetry.usePrometheusNaming"])
def test_prometheus_naming_keeps_the_cpu_name_and_suffixes_bytes(flag, apiserver, make_agent, tmp_path, monkeypatch):
    """What a Prometheus-style OTLP receiver does to the names (see README, 'Prometheus names')."""
    from tests.victoriametrics import VictoriaMetrics

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
    from agent.export.runtime import PREFIX, RUNTIME_METRICS

    node = f"e2e-runtime-{time.time_ns()}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", victoriametrics.otlp_endpoint)
    apiserver.create(pod("p", node=node))
    make_agent(node_name=node, exporter="otlp", export_interval=0.5)
    expected = set()
    for m in RUNTIME_METRICS:
        if m.kind == "histogram":
            expected |= {PREFIX + m.name + s for s in ("_bucket", "_sum", "_count")}
        elif m.name not in ("handler_errors_total", "pod_problems_total", "api_errors_total"):  # empty until something fails
            expected.add(PREFIX + m.name)

    def names():
        rows = victoriametrics.query(f'count by (__name__) ({{__name__=~"{PREFIX}.*",k8s.node.name="{node}"}})')
        return {r["metric"]["__name__"] for r in rows}

    wait_until(lambda: expected <= names(), timeout=30, message=f"missing {expected - names()}")
    synced = victoriametrics.query(f'{PREFIX}synced{{k8s.node.name="{node}"}}')
    assert float(synced[0]["value"][1]) == 1
    p99 = victoriametrics.query(
        f'histogram_quantile(0.99, sum by (le) ({PREFIX}workqueue_queue_duration_seconds_bucket{{k8s.node.name="{node}"}}))')
    assert p99 and 0 <= float(p99[0]["value"][1]) < 1
