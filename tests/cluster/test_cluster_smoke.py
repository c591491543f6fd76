"""Proves the real control plane does what the agent's end-to-end tests will lean on.

If one of these fails, agent tests against the cluster would fail for reasons
that have nothing to do with the agent; run these first.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from tests.support.cluster import LEASE_RENEW_SECONDS, NODE_MONITOR_GRACE_SECONDS, Cluster
from tests.support.waiting import wait_until
from tests.support.factory import container, for_create, pod

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def bound_pod(cluster: Cluster) -> dict:
    """A pod with requests that the real scheduler has bound to a registered node."""
    cluster.register_node("smoke-node-a", cpu="4", memory="8Gi")
    namespace = cluster.create_namespace("smoke")
    cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", for_create(pod("web", containers=[container("app", "250m", "64Mi")])))
    path = f"/api/v1/namespaces/{namespace}/pods/web"
    return wait_until(lambda: (pod := cluster.api("GET", path))["spec"].get("nodeName") and pod, 60,
                      interval=0.25, message="pod bound by kube-scheduler")


def test_apiserver_reports_built_version(cluster: Cluster) -> None:
    version = cluster.version()
    assert (version["gitVersion"], version["major"], version["minor"]) == ("v1.37.2", "1", "37")


def test_scheduler_binds_pod_to_registered_node(bound_pod: dict) -> None:
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


def test_pod_status_and_graceful_deletion_as_kubelet(cluster: Cluster, bound_pod: dict) -> None:
    meta = bound_pod["metadata"]
    pod = cluster.set_pod_status(meta["namespace"], meta["name"], "Running")
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["state"].keys() == {"running"}
    path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
    cluster.api("DELETE", path)
    assert cluster.api("GET", path)["metadata"]["deletionTimestamp"]  # a bound pod waits for its kubelet
    assert f"{meta['namespace']}/{meta['name']}" in cluster.finish_deletions()
    assert not cluster.exists(path)


def test_daemonset_controller_creates_one_pod_per_node(cluster: Cluster) -> None:
    cluster.register_node("smoke-node-b", cpu="2", memory="4Gi")
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


def test_heartbeats_keep_a_node_ready_while_a_silent_one_goes_unknown(cluster: Cluster, bound_pod: dict) -> None:
    """The node lifecycle controller is really judging the Leases: a node registered without heartbeats goes
    Unknown after the (shortened) grace period, and at that moment the renewed node is still Ready and untainted."""
    cluster.register_node("smoke-node-silent", cpu="1", memory="1Gi")
    cluster.forget_node("smoke-node-silent")  # a kubelet that died right after registering
    started = time.monotonic()

    def ready_status(name: str) -> str:
        node = cluster.api("GET", f"/api/v1/nodes/{name}")
        return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")

    try:
        wait_until(lambda: ready_status("smoke-node-silent") == "Unknown", NODE_MONITOR_GRACE_SECONDS + 60,
                   interval=1.0, message="the silent node marked Unknown by the node lifecycle controller")
        assert time.monotonic() - started >= NODE_MONITOR_GRACE_SECONDS - 5  # the grace period, not a failed start
        node = cluster.api("GET", "/api/v1/nodes/smoke-node-a")
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True", ready
        assert not node["spec"].get("taints")
        lease = cluster.api("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/smoke-node-a")
        renewed = dt.datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
        assert (dt.datetime.now(dt.timezone.utc) - renewed).total_seconds() < 3 * LEASE_RENEW_SECONDS
    finally:
        cluster.api("DELETE", "/api/v1/nodes/smoke-node-silent")
