"""The agent on a real node: its image built here, run by a real kubelet on containerd and runc (issue 20).

`python -m pytest -m node` runs this module alone. tests/node_cluster.py starts the control plane, the kubelet,
containerd, kube-proxy and CoreDNS inside a network namespace the fixture makes; the manifests are applied as
shipped (`kubectl apply -k otel-config/` and `-k daemonset/`), so the agent runs from the image under the
DaemonSet's security context, with its probes, memory limit and grace period acted on by the kubelet.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.conftest import wait_until
from tests.node_cluster import NODE_NAME, Node, node_cluster  # noqa: F401  (module fixture)

pytestmark = pytest.mark.node

ROOT = Path(__file__).resolve().parent.parent
AGENT_NS, AGENT_SELECTOR = "node-requests-agent", "app.kubernetes.io/name=node-requests-agent"
COLLECTOR_NS, COLLECTOR_SELECTOR = "node-requests-collector", "app.kubernetes.io/name=otel-collector"
FIGURES: dict[str, float] = {}


def http_json(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def agent_pod(node: Node) -> dict:
    pods = [p for p in node.pods(AGENT_NS, AGENT_SELECTOR) if not p["metadata"].get("deletionTimestamp")]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def agent_status(pod: dict) -> dict:
    return next(s for s in pod["status"]["containerStatuses"] if s["name"] == "agent")


@pytest.fixture(scope="module")
def rollout(node_cluster: Node, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The shipped manifests applied unchanged; the figures of the rollout recorded for the report."""
    node = node_cluster
    started = time.monotonic()
    result = node.cluster.kubectl("apply", "-k", str(ROOT / "otel-config"))
    assert result.returncode == 0, result.stderr
    collector = node.wait_pods_ready(COLLECTOR_NS, COLLECTOR_SELECTOR, 1, 120)[0]
    FIGURES["collector_apply_to_ready_s"] = time.monotonic() - started
    started = time.monotonic()
    result = node.cluster.kubectl("apply", "-k", str(ROOT / "daemonset"))
    assert result.returncode == 0, result.stderr
    assert "PodSecurity" not in result.stderr, result.stderr
    agent = node.wait_pods_ready(AGENT_NS, AGENT_SELECTOR, 1, 180)[0]
    FIGURES["agent_apply_to_ready_s"] = time.monotonic() - started
    print(f"\nnode figures: {json.dumps({**node.timings, **FIGURES}, indent=1)}")
    return {"collector": collector, "agent": agent}


@pytest.fixture(scope="module")
def workload_namespace(node_cluster: Node) -> str:
    return node_cluster.cluster.create_namespace("work")


def tiny_pod(name: str, containers: list[dict], **spec: object) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **spec.pop("metadata", {})},
            "spec": {"nodeSelector": {"nra-test": "node"}, "terminationGracePeriodSeconds": 2, **spec,
                     "containers": containers}}


def tiny(name: str, cpu: str | None = None, memory: str | None = None, args: list[str] | None = None,
         **extra: object) -> dict:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    container = {"name": name, "image": "nra-tiny:1", "imagePullPolicy": "Never",
                 "resources": {"requests": requests} if requests else {}, **extra}
    if args:
        container["args"] = args
    return container


# --------------------------------------------------------------------------- 1. rollout as shipped


def test_node_registered_by_the_real_kubelet(node_cluster: Node) -> None:
    stored = node_cluster.cluster.api("GET", f"/api/v1/nodes/{NODE_NAME}")
    info = stored["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.37.2", info
    assert info["containerRuntimeVersion"].startswith("containerd://"), info
    assert {"type": "InternalIP", "address": "10.201.0.1"} in stored["status"]["addresses"]
    assert ready(node_cluster.pods("kube-system", "k8s-app=kube-dns")[0])


def test_rollout_as_shipped_agent_ready_through_its_own_probes(node_cluster: Node, rollout: dict) -> None:
    pod = agent_pod(node_cluster)
    status = agent_status(pod)
    assert status["ready"] and status["restartCount"] == 0, status
    assert status["image"].endswith("node-requests-agent:0.1.0"), status["image"]
    container = pod["spec"]["containers"][0]
    assert "readinessProbe" in container and "livenessProbe" in container
    # The debug endpoint answers on the pod's own address (its own network namespace), as the probes reach it.
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:9808/readyz", timeout=5) as response:
        assert response.status == 200
    assert FIGURES["agent_apply_to_ready_s"] < 180


def test_agent_pushes_to_the_collector_by_dns_name_and_prometheus_shows_pod_or_vm(
        node_cluster: Node, rollout: dict, workload_namespace: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    from tests.collector import Prometheus

    node = node_cluster
    for i, cpu in enumerate(("100m", "250m")):
        node.cluster.api("POST", f"/api/v1/namespaces/{workload_namespace}/pods",
                         tiny_pod(f"plain-{i}", [tiny("app", cpu, "16Mi")]))
    node.wait_pods_ready(workload_namespace, "", 2, 120)
    collector_ip = node.service_ip(COLLECTOR_NS, "otel-collector")
    # Through the Service's ClusterIP (kube-proxy), as the shipped scrape config's endpoints discovery would.
    with Prometheus(tmp_path_factory.mktemp("prometheus"), [f"{collector_ip}:8889"], interval="2s",
                    binary=node.parts.prometheus) as prometheus:
        def shown() -> dict | None:
            rows = prometheus.query(f'pod_or_vm_cpu_requests{{k8s_node_name="{NODE_NAME}"}}')
            values = {(r["metric"].get("k8s_namespace_name"), r["metric"].get("k8s_pod_name")): float(r["value"][1])
                      for r in rows}
            return values if (workload_namespace, "plain-1") in values else None

        started = time.monotonic()
        values = wait_until(shown, 120, interval=2, message="pod_or_vm_cpu_requests of the workload in Prometheus")
        FIGURES["first_series_in_prometheus_s"] = time.monotonic() - started
        assert values[(workload_namespace, "plain-0")] == 0.1
        assert values[(workload_namespace, "plain-1")] == 0.25
        agent = agent_pod(node)["metadata"]["name"]
        assert values[(AGENT_NS, agent)] == 0.01
        assert prometheus.query(f'pod_or_vm_mem_requests{{k8s_pod_name="plain-0"}}')
    # No DNS workaround: the agent's endpoint is the shipped Service name, resolved by CoreDNS in the pod.
    env = {e["name"]: e.get("value") for e in agent_pod(node)["spec"]["containers"][0]["env"]}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.node-requests-collector.svc:4318"
