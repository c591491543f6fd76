"""``explain --live`` and the kubectl plugin against the fake API server over real HTTP.

The installed console script ``kubectl-node_requests`` is run as kubectl runs a
plugin, and (marker ``cluster``) the kubectl components/ builds runs it as ``kubectl node-requests``.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from components.kubernetes import kubernetes_bin
from testkit.cluster import NEWEST
from testkit.factory import container, pod, vm_pod
from testkit.cli import PLUGIN, run
from testkit.factory import GI, node, resizing_pod, unscheduled

@pytest.fixture
def cluster_api(apiserver, tmp_path):
    apiserver.create(node("node-a", "2", "4Gi"), kind="nodes")
    apiserver.create(node("node-b", "1", "8Gi"), kind="nodes")
    apiserver.create(pod("web", node="node-a", containers=[container("app", "500m", "1Gi")]))
    apiserver.create(vm_pod("compute", "vm-1", "1", "2Gi", node="node-a"))
    apiserver.create(pod("batch", namespace="jobs", node="node-b", containers=[container("app", "500m", "1Gi")],
                         init_containers=[container("setup", "1200m", "256Mi")]))
    apiserver.create(unscheduled("pending", "3", "6Gi"))
    return apiserver, apiserver.kubeconfig(tmp_path / "kubeconfig")


def test_live_explains_the_whole_cluster_per_node(cluster_api):
    api, kubeconfig = cluster_api
    result = run("explain", "--live", "--kubeconfig", kubeconfig, "-o", "json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    nodes = {n["node"]: n for n in out["nodes"]}
    assert [n["node"] for n in out["nodes"]] == ["node-b", "node-a"]
    assert nodes["node-a"]["cpu_cores"]["pod_or_vm"] == 1.5 and nodes["node-a"]["memory_bytes"]["pod_or_vm"] == 3 * GI
    assert nodes["node-b"]["ratios"]["cpu"]["pod_or_vm_to_allocatable"] == pytest.approx(1.2)
    assert [p["name"] for p in out["unscheduled"]] == ["pending"]
    # One LIST of each, no field selector, and no watch.
    pods_requests, nodes_requests = api.requests_to("/api/v1/pods"), api.requests_to("/api/v1/nodes")
    assert len(pods_requests) == len(nodes_requests) == 1
    assert "watch" not in pods_requests[0][1] and "fieldSelector" not in pods_requests[0][1]


def test_live_node_lists_with_field_selectors(cluster_api):
    api, kubeconfig = cluster_api
    result = run("explain", "--live", "--node", "node-a", "--kubeconfig", kubeconfig, "-o", "json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["node"]["node"] == "node-a" and sorted(p["name"] for p in out["pods"]) == ["compute", "web"]
    assert api.requests_to("/api/v1/pods")[0][1]["fieldSelector"] == ["spec.nodeName=node-a"]
    assert api.requests_to("/api/v1/nodes")[0][1]["fieldSelector"] == ["metadata.name=node-a"]
    missing = run("explain", "--live", "--node", "node-x", "--kubeconfig", kubeconfig)
    assert missing.returncode == 2 and "no Node 'node-x'" in missing.stderr


def test_live_errors_say_what_to_do(cluster_api, tmp_path):
    api, kubeconfig = cluster_api
    absent = tmp_path / "nowhere" / "config"
    result = run("explain", "--live", env={"KUBECONFIG": str(absent)})
    assert result.returncode == 2
    assert str(absent) in result.stderr and "--kubeconfig" in result.stderr and "Traceback" not in result.stderr
    api.fail_next(1, 403)
    result = run("explain", "--live", "--kubeconfig", kubeconfig)
    assert result.returncode == 1 and "403" in result.stderr and "Traceback" not in result.stderr
    assert run("explain", "--live", "dump.json", "--kubeconfig", kubeconfig).returncode == 2
    no_live = run("explain", "--kubeconfig", kubeconfig, input="{}")
    assert no_live.returncode == 2 and "add --live" in no_live.stderr


def _plugin_env(kubeconfig: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    return {**env, "KUBECONFIG": kubeconfig, "PATH": f"{PLUGIN.parent}{os.pathsep}{env.get('PATH', '')}"}


def test_installed_kubectl_plugin_script(cluster_api):
    _, kubeconfig = cluster_api
    assert PLUGIN.exists(), "pip install -e . installs the kubectl-node_requests console script"
    result = subprocess.run([str(PLUGIN), "explain", "--live", "--node", "node-b"], capture_output=True, text=True,
                            env=_plugin_env(kubeconfig), timeout=60)
    assert result.returncode == 0, result.stderr
    assert "NODE node-b  1 pod  cpu 120%" in result.stdout and "jobs/batch" in result.stdout
    usage = subprocess.run([str(PLUGIN), "explain", "--help"], capture_output=True, text=True, timeout=60)
    assert usage.stdout.startswith("usage: kubectl node-requests explain")


@pytest.mark.cluster  # needs the kubectl components/ builds, as the other real-component tests do
def test_kubectl_runs_it_as_a_plugin(cluster_api):
    _, kubeconfig = cluster_api
    kubectl = str(kubernetes_bin(NEWEST) / "kubectl")  # built on first use; a failed build fails here, never skips
    env = _plugin_env(kubeconfig)
    plugins = subprocess.run([kubectl, "plugin", "list"], capture_output=True, text=True, env=env, timeout=60)
    assert str(PLUGIN) in plugins.stdout, plugins.stdout + plugins.stderr
    result = subprocess.run([kubectl, "node-requests", "explain", "--live", "--node", "node-a"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "NODE node-a  2 pods  cpu 75%, memory 75% of allocatable" in result.stdout


def test_live_follows_the_api_servers_release_unless_told(cluster_api):
    api, kubeconfig = cluster_api
    api.set_version("v1.36.3")
    api.create(resizing_pod())
    out = json.loads(run("explain", "--live", "--kubeconfig", kubeconfig, "-o", "json").stdout)
    resizing = next(p for p in out["pods"] if p["name"] == "resizing")
    assert (out["kubernetes_rules"], resizing["cpu_cores"]) == ("1.36", 4.0)  # 1.36 sums per-container maxima
    table = run("explain", "--live", "--kubeconfig", kubeconfig).stdout
    assert table.splitlines()[0] == "RULES  Kubernetes 1.36 PodRequests (API server v1.36.3)"
    asked = len(api.requests_to("/version"))
    pinned = json.loads(run("explain", "--live", "--kubernetes-version", "1.37", "--kubeconfig", kubeconfig,
                            "-o", "json").stdout)
    assert pinned["kubernetes_rules"] == "1.37"
    assert next(p for p in pinned["pods"] if p["name"] == "resizing")["cpu_cores"] == 3.0
    assert len(api.requests_to("/version")) == asked  # a pinned release never asks
