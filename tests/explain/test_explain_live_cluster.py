"""``explain --live`` and ``kubectl node-requests`` against a real kube-apiserver, checked against the scheduler.

Pods are created with spec.nodeName set (as a bound pod is), on Nodes the test
registers; kube-scheduler's ``kube_pod_resource_request`` is the oracle for
each pod's requests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from components.kubernetes import kubernetes_bin
from testkit.cluster import NEWEST, Cluster
from testkit.kwok import Kwok
from testkit.cli import PLUGIN, run
from testkit.factory import GI
from testkit.waiting import wait_until


pytestmark = pytest.mark.cluster



def bound(name: str, node: str, cpu: str, memory: str, init_cpu: str | None = None) -> dict:
    spec = {"nodeName": node, "containers": [{"name": "app", "image": "registry.invalid/app:1",
                                              "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    if init_cpu:
        spec["initContainers"] = [{"name": "setup", "image": "registry.invalid/setup:1",
                                   "resources": {"requests": {"cpu": init_cpu}}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.fixture(scope="module")
def live(cluster: Cluster, kwok: Kwok) -> tuple[Cluster, str]:
    kwok.add_node("explain-a", cpu="2", memory="4Gi")
    kwok.add_node("explain-b", cpu="1", memory="8Gi")
    namespace = cluster.create_namespace("explain")
    for manifest in (bound("web", "explain-a", "500m", "1Gi"), bound("api", "explain-a", "1", "2Gi"),
                     bound("batch", "explain-b", "500m", "1Gi", init_cpu="1200m")):
        cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", manifest)
    return cluster, namespace


def test_live_answer_matches_the_scheduler_per_node(live):
    cluster, namespace = live
    result = run("explain", "--live", "--kubeconfig", str(cluster.admin_kubeconfig), "-o", "json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    nodes = {n["node"]: n for n in out["nodes"]}
    # By hand: explain-a 500m + 1 = 1.5 of 2 cores, 3Gi of 4Gi; explain-b max(500m, init 1200m) = 1.2 of 1 core.
    assert nodes["explain-a"]["cpu_cores"]["pod_or_vm"] == 1.5 and nodes["explain-a"]["memory_bytes"]["pod_or_vm"] == 3 * GI
    assert nodes["explain-b"]["ratios"]["cpu"]["pod_or_vm_to_allocatable"] == pytest.approx(1.2)
    ours = {(p["name"], p["node"]): p["cpu_cores"] for p in out["pods"] if p["namespace"] == namespace}

    def oracle() -> dict:
        found = {(s["pod"], s["node"]): s["value"] for s in cluster.scheduler_resource_metrics()
                 if s["namespace"] == namespace and s["resource"] == "cpu"}
        return found if len(found) == 3 else {}

    assert wait_until(oracle, 30, interval=0.25, message="kube_pod_resource_request for the three pods") == pytest.approx(ours)


def test_kubectl_node_requests_against_the_real_api_server(live):
    cluster, _ = live
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env.update(KUBECONFIG=str(cluster.admin_kubeconfig), PATH=f"{PLUGIN.parent}{os.pathsep}{env.get('PATH', '')}")
    result = subprocess.run([str(kubernetes_bin(NEWEST) / "kubectl"), "node-requests", "explain", "--live", "--node", "explain-b"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "NODE explain-b  1 pod  cpu 120%, memory 13% of allocatable" in result.stdout
    # the node explain-a, as a whole word: the test namespace (explain-<8 hex>) starts with "explain-a" one time in 16
    assert "init setup peak" in result.stdout and re.search(r"\bexplain-a\b", result.stdout) is None, result.stdout
