"""Proves the real control plane does what the agent's end-to-end tests will lean on.

If one of these fails, agent tests against the cluster would fail for reasons
that have nothing to do with the agent; run these first. What the tests lean on
KWOK's simulated nodes for is proven in test_cluster_kwok.py.
"""

from __future__ import annotations

import pytest

from testkit.cluster import Cluster
from testkit.kwok import Kwok
from testkit.waiting import wait_until
from testkit.factory import container, for_create, pod

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def bound_pod(cluster: Cluster, kwok: Kwok) -> dict:
    """A pod with requests that the real scheduler has bound to a KWOK node."""
    kwok.add_node("smoke-node-a", cpu="4", memory="8Gi")
    namespace = cluster.create_namespace("smoke")
    cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", for_create(pod("web", containers=[container("app", "250m", "64Mi")])))
    path = f"/api/v1/namespaces/{namespace}/pods/web"
    return wait_until(lambda: (pod := cluster.api("GET", path))["spec"].get("nodeName") and pod, 60,
                      interval=0.25, message="pod bound by kube-scheduler")


def test_apiserver_reports_built_version(cluster: Cluster) -> None:
    version = cluster.version()
    assert (version["gitVersion"], version["major"], version["minor"]) == ("v1.37.2", "1", "37")


def test_scheduler_binds_pod_to_a_kwok_node(bound_pod: dict) -> None:
    assert bound_pod["spec"]["nodeName"] == "smoke-node-a"


def test_scheduler_resource_metrics_show_pod_requests(cluster: Cluster, bound_pod: dict) -> None:
    meta = bound_pod["metadata"]

    def samples() -> dict[str, dict]:
        found = {s["resource"]: s for s in cluster.scheduler_resource_metrics()
                 if s["namespace"] == meta["namespace"] and s["pod"] == meta["name"]}
        return found if {"cpu", "memory"} <= found.keys() else {}

    found = wait_until(samples, 30, interval=0.25, message="kube_pod_resource_request for the bound pod")
    assert (found["cpu"]["value"], found["cpu"]["unit"]) == (0.25, "cores")
    assert (found["memory"]["value"], found["memory"]["unit"]) == (64 * 2**20, "bytes")
    assert found["cpu"]["node"] == "smoke-node-a"


def test_daemonset_controller_creates_one_pod_per_node(cluster: Cluster, kwok: Kwok) -> None:
    kwok.add_node("smoke-node-b", cpu="2", memory="4Gi")
    namespace = cluster.create_namespace("smoke")
    labels = {"app": "agent"}
    cluster.api("POST", f"/apis/apps/v1/namespaces/{namespace}/daemonsets", {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "agent", "image": "registry.invalid/agent:1",
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}},
    })
    nodes = {n["metadata"]["name"] for n in cluster.api("GET", "/api/v1/nodes")["items"]}

    def placed() -> dict[str, int]:
        pods = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
        per_node: dict[str, int] = {}
        for item in pods:
            node = item["spec"].get("nodeName")
            if node:
                per_node[node] = per_node.get(node, 0) + 1
        return per_node if set(per_node) == nodes else {}

    per_node = wait_until(placed, 90, interval=0.25, message=f"one DaemonSet pod bound on each of {sorted(nodes)}")
    assert all(count == 1 for count in per_node.values()), per_node


def test_token_request_issues_a_valid_service_account_token(cluster: Cluster) -> None:
    namespace = cluster.create_namespace("smoke")
    cluster.api("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "agent"}})
    token = cluster.api("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/agent/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600},
    })["status"]["token"]
    review = cluster.api("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token},
    })
    assert review["status"]["authenticated"] is True
    assert review["status"]["user"]["username"] == f"system:serviceaccount:{namespace}:agent"


def test_kubectl_talks_to_cluster(cluster: Cluster) -> None:
    result = cluster.kubectl("get", "namespaces", "-o", "name")
    assert result.returncode == 0, result.stderr
    assert "namespace/kube-system" in result.stdout.split()


def test_previous_minor_apiserver_and_scheduler(tmp_path) -> None:
    """The agent picks rules from /version, so the older apiserver must really report its own version."""
    with Cluster(tmp_path, version="1.36.3") as old:
        version = old.version()
        assert (version["gitVersion"], version["minor"]) == ("v1.36.3", "36")
        assert old.scheduler_resource_metrics() == []  # scheduler up and scrapeable, nothing scheduled yet
