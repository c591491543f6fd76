"""What the agent sends over OTLP, decoded with the official protobuf definitions."""

from __future__ import annotations

import pytest

from tests.factory import container, pod, vm_pod
from tests.otlp_receiver import GrpcReceiver, HttpReceiver

OVERFLOW = "otel.metric.overflow"


def series(points, metric):
    return {p.attributes["k8s.pod.name"]: p for p in points if p.metric == metric}


def pods_in(points, metric="pod_or_vm_cpu_requests"):
    return set(series(points, metric))


@pytest.fixture
def http_receiver():
    r = HttpReceiver().start()
    yield r
    r.stop()


@pytest.fixture
def otlp_env(monkeypatch):
    def configure(receiver, protocol="http/protobuf", compression="gzip"):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", compression)
    return configure


def test_http_export_carries_values_units_attributes_and_resource(apiserver, make_agent, http_receiver, otlp_env):
    apiserver.create(pod("web", containers=[container("a", "250m", "256Mi"), container("b", "100m", "64Mi")]))
    apiserver.create(vm_pod("runner", "vm-1", "2", "4Gi", overcommit={"cpu": "2", "memory": "1"}, node="node-a"))
    apiserver.create(vm_pod("target", "vm-2", "1", "1Gi", role="target", node="node-a"))
    otlp_env(http_receiver)
    make_agent(exporter="otlp")
    points = http_receiver.wait_for(lambda pts: pods_in(pts) == {"web", "runner", "target"})
    assert http_receiver.encodings[-1] == "gzip"
    cpu, mem = series(points, "pod_or_vm_cpu_requests"), series(points, "pod_or_vm_mem_requests")
    assert cpu["web"].value == pytest.approx(0.35) and mem["web"].value == 320 * 2**20
    assert cpu["runner"].value == 1.0 and mem["runner"].value == 4 * 2**30
    assert cpu["web"].attributes["source"] == "pod_requests" and cpu["runner"].attributes["source"] == "vm_usage"
    assert cpu["web"].kind == "gauge" and cpu["web"].unit == "{cpu}" and mem["web"].unit == "By"
    uid = [p for p in apiserver.objects() if p["metadata"]["name"] == "web"][0]["metadata"]["uid"]
    assert cpu["web"].attributes == {"k8s.namespace.name": "default", "k8s.pod.name": "web", "k8s.pod.uid": uid,
                                     "source": "pod_requests"}
    vm_cpu = series(points, "vm_cpu_usage")
    assert set(vm_cpu) == {"runner", "target"}
    assert vm_cpu["runner"].value == 2.0  # raw usage, before overcommit
    assert vm_cpu["runner"].attributes["neon.vm.name"] == "vm-1"
    assert vm_cpu["runner"].attributes["neon.vm.migration.role"] == "none"
    assert vm_cpu["target"].attributes["neon.vm.migration.role"] == "target"
    assert cpu["web"].resource["service.instance.id"] == "node-a"
    assert cpu["web"].resource["k8s.node.name"] == "node-a"
    assert cpu["web"].resource["service.name"] == "node-requests-agent"


def test_grpc_export(apiserver, make_agent, otlp_env):
    receiver = GrpcReceiver().start()
    try:
        apiserver.create(pod("g", containers=[container("a", "1", "1Gi")]))
        otlp_env(receiver, protocol="grpc")
        make_agent(exporter="otlp", otlp_protocol="grpc")
        points = receiver.wait_for(lambda pts: pods_in(pts) == {"g"})
        assert series(points, "pod_or_vm_mem_requests")["g"].value == 2**30
    finally:
        receiver.stop()


def test_series_stop_in_the_next_export_after_delete_or_finish(apiserver, make_agent, http_receiver, otlp_env):
    for name in ("keep", "delete-me", "finish-me"):
        apiserver.create(pod(name))
    otlp_env(http_receiver)
    make_agent(exporter="otlp")
    http_receiver.wait_for(lambda pts: pods_in(pts) == {"keep", "delete-me", "finish-me"})
    apiserver.delete("default", "delete-me")
    finished = [p for p in apiserver.objects() if p["metadata"]["name"] == "finish-me"][0]
    finished["status"]["phase"] = "Succeeded"
    apiserver.update(finished)
    points = http_receiver.wait_for(lambda pts: pods_in(pts) == {"keep"})
    assert pods_in(points, "pod_or_vm_mem_requests") == {"keep"}


def test_churn_beyond_the_sdk_cardinality_limit_keeps_every_live_pod(apiserver, make_agent, http_receiver, otlp_env):
    otlp_env(http_receiver, compression="none")
    agent = make_agent(exporter="otlp")
    live: list[str] = []
    for i in range(2600):  # more distinct pods than the SDK's 2000 attribute sets
        name = f"batch-{i}"
        apiserver.create(pod(name, containers=[container("c", f"{i % 7 + 1}00m", "64Mi")]))
        live.append(name)
        if len(live) > 40:
            apiserver.delete("default", live.pop(0))
    expected = set(live)
    points = http_receiver.wait_for(lambda pts: pods_in(pts) == expected, timeout=30)
    assert not any(OVERFLOW in p.attributes for p in points)
    cpu = series(points, "pod_or_vm_cpu_requests")
    for name in expected:
        i = int(name.split("-")[1])
        assert cpu[name].value == pytest.approx((i % 7 + 1) / 10)
    assert len(agent.state) == 40


def test_collector_outage_does_not_stop_the_agent(apiserver, make_agent, http_receiver, otlp_env, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    apiserver.create(pod("a"))
    otlp_env(http_receiver)
    agent = make_agent(exporter="otlp")
    http_receiver.wait_for(lambda pts: pods_in(pts) == {"a"})
    http_receiver.fail = True
    apiserver.create(pod("b"))
    from tests.conftest import wait_until
    wait_until(lambda: agent.stats.snapshot().exports.get("failure", 0) >= 1, timeout=15)
    http_receiver.fail = False
    http_receiver.wait_for(lambda pts: pods_in(pts) == {"a", "b"}, timeout=15)


def test_a_node_with_more_live_pods_than_the_sdk_default_limit_is_exported_whole(apiserver, make_agent, http_receiver, otlp_env):
    otlp_env(http_receiver)
    for i in range(2100):
        apiserver.create(pod(f"dense-{i}"))
    make_agent(exporter="otlp")
    points = http_receiver.wait_for(lambda pts: len(pods_in(pts)) == 2100, timeout=30)
    assert not any(OVERFLOW in p.attributes for p in points)
