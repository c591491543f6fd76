"""``explain`` on a whole cluster: each node compared with its own pods only, sums worked out by hand."""

from __future__ import annotations

import json

import pytest

from testkit.factory import GI, container, node, pod, unscheduled, vm_pod
from testkit.cli import run

def cluster_dump() -> str:
    """Two nodes with Node objects, one node seen only through a pod, one unscheduled pod.

    By hand:
      node-a (2 cores, 4Gi): web 500m/1Gi + VM 1 core/2Gi (runner requests nothing)
             pod_or_vm 1.5 cores / 3Gi = 75 % / 75 %; scheduled 500m / 1Gi
      node-b (1 core, 8Gi):  batch: app 500m/1Gi, init setup 1200m/256Mi -> 1.2 cores (init peak) / 1Gi
             done (Succeeded, 4 cores) counts nowhere; pod_or_vm 1.2 / 1 = 120 %, 1Gi / 8Gi = 12.5 %
      node-c (no Node object): lone 100m/128Mi
      pending (no nodeName): 3 cores / 6Gi, counted in no node
      cluster over a and b: allocatable 3 cores / 12Gi, pod_or_vm 2.7 / 4Gi, headroom 300m / 8Gi
    Summing every pod against the first node, as explain used to, gave (0.5+1+1.2+0.1+3) / 2 = 290 %.
    """
    items = [
        node("node-a", "2", "4Gi"), node("node-b", "1", "8Gi"),
        pod("web", node="node-a", containers=[container("app", "500m", "1Gi")]),
        vm_pod("compute", "vm-1", "1", "2Gi", node="node-a"),
        pod("batch", namespace="jobs", node="node-b", containers=[container("app", "500m", "1Gi")],
            init_containers=[container("setup", "1200m", "256Mi")]),
        pod("done", namespace="jobs", node="node-b", phase="Succeeded", containers=[container("app", "4", "1Gi")]),
        pod("lone", node="node-c", containers=[container("app", "100m", "128Mi")]),
        unscheduled("pending", "3", "6Gi"),
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def explain_json(*args: str) -> dict:
    result = run("explain", "-o", "json", *args, input=cluster_dump())
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_every_node_is_compared_with_its_own_pods_only():
    out = explain_json()
    nodes = {n["node"]: n for n in out["nodes"]}
    assert [n["node"] for n in out["nodes"]] == ["node-b", "node-a", "node-c"]  # busiest first, unknown last
    assert nodes["node-a"]["cpu_cores"] == {"capacity": 2.0, "allocatable": 2.0, "scheduled": 0.5, "pod_or_vm": 1.5,
                                            "vm_usage": 1.0}
    assert nodes["node-a"]["memory_bytes"]["pod_or_vm"] == 3 * GI and nodes["node-a"]["memory_bytes"]["scheduled"] == GI
    assert nodes["node-a"]["ratios"]["cpu"]["pod_or_vm_to_allocatable"] == pytest.approx(0.75)
    assert nodes["node-b"]["cpu_cores"]["pod_or_vm"] == pytest.approx(1.2)
    assert nodes["node-b"]["ratios"]["cpu"]["pod_or_vm_to_allocatable"] == pytest.approx(1.2)
    assert nodes["node-b"]["ratios"]["memory"]["pod_or_vm_to_allocatable"] == pytest.approx(0.125)
    assert nodes["node-b"]["pods_by_phase"] == {"Running": 1, "Succeeded": 1}
    assert nodes["node-c"]["node_present"] is False and nodes["node-c"]["cpu_cores"] == {
        "scheduled": 0.1, "pod_or_vm": 0.1, "vm_usage": 0.0}
    assert {p["name"]: p["node"] for p in out["pods"]} == {
        "web": "node-a", "compute": "node-a", "batch": "node-b", "done": "node-b", "lone": "node-c", "pending": None}
    assert [p["name"] for p in out["unscheduled"]] == ["pending"]
    cluster = out["cluster"]
    assert cluster["cpu_cores"] == pytest.approx({"allocatable": 3.0, "scheduled": 1.7, "pod_or_vm": 2.7, "headroom": 0.3})
    assert cluster["memory_bytes"] == {"allocatable": 12 * GI, "scheduled": 2 * GI, "pod_or_vm": 4 * GI, "headroom": 8 * GI}
    assert cluster["ratios"]["cpu"] == pytest.approx(0.9) and cluster["nodes_without_allocatable"] == ["node-c"]
    assert cluster["unscheduled_pods"] == 1 and "node" not in out  # several nodes: no single "node"


def test_table_has_a_section_per_node_busiest_first_and_a_cluster_summary():
    result = run("explain", input=cluster_dump(), env={"COLUMNS": "120"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    titles = [line for line in lines if line.startswith(("NODE ", "UNSCHEDULED", "CLUSTER"))]
    assert titles == [
        "NODE node-b  1 pod  cpu 120%, memory 13% of allocatable",
        "NODE node-a  2 pods  cpu 75%, memory 75% of allocatable",
        "NODE node-c  1 pod  (no Node object in the input: allocatable unknown)",
        "UNSCHEDULED  1 pod without spec.nodeName (counted in no node)",
        "CLUSTER  3 nodes, 1 unscheduled pod (in no node); busiest node-b at 120% of allocatable",
    ]
    summaries = [line.split() for line in lines if line.startswith(("  cpu ", "  memory "))]
    assert summaries == [
        ["cpu", "1", "1.2", "1.2", "-200m", "120%"], ["memory", "8Gi", "1Gi", "1Gi", "7Gi", "13%"],     # node-b
        ["cpu", "2", "500m", "1.5", "500m", "75%"], ["memory", "4Gi", "1Gi", "3Gi", "1Gi", "75%"],      # node-a
        ["cpu", "-", "100m", "100m", "-", "-"], ["memory", "-", "128Mi", "128Mi", "-", "-"],            # node-c
        ["cpu", "3", "1.7", "2.7", "300m", "90%"], ["memory", "12Gi", "2Gi", "4Gi", "8Gi", "33%"],      # cluster
    ]
    batch = next(line for line in lines if line.startswith("jobs/batch"))
    assert "init setup peak" in batch and batch.split()[-2:] == ["1.2", "1Gi"]
    vm = next(line for line in lines if line.startswith("neon/compute"))
    assert "vm usage" in vm
    runner = next(line for line in lines if "runner spec requests" in line)
    assert runner.split()[-2:] == ["0", "0"]  # the runner's own requests beside the usage
    assert lines.index(next(line for line in lines if line.startswith("jobs/done"))) > lines.index(batch)


def test_columns_fit_the_terminal_and_wide_shows_everything():
    long_name = "a-very-long-deployment-name-that-no-terminal-column-holds-7d4b9c5f8-x2k4p"
    dump = json.dumps({"kind": "List", "items": [node("node-a", "4", "8Gi"),
                                                 pod(long_name, containers=[container("app", "250m", "1Gi")])]})
    narrow = run("explain", input=dump, env={"COLUMNS": "80"}).stdout
    assert max(len(line) for line in narrow.splitlines()) <= 80
    assert long_name not in narrow and "default/a-very-long-deployment" in narrow and "…" in narrow
    wide = run("explain", "-o", "wide", input=dump, env={"COLUMNS": "80"}).stdout
    assert f"default/{long_name}" in wide


def test_node_filter_keeps_that_node_only():
    out = explain_json("--node", "node-a")
    assert [n["node"] for n in out["nodes"]] == ["node-a"] and out["node"]["node"] == "node-a"
    assert sorted(p["name"] for p in out["pods"]) == ["compute", "web"] and out["unscheduled"] == []
    table = run("explain", "--node", "node-a", input=cluster_dump()).stdout
    assert "NODE node-a" in table and "node-b" not in table and "CLUSTER" not in table
    missing = run("explain", "--node", "node-x", input=cluster_dump())
    assert missing.returncode == 2 and "node-x" in missing.stderr and "node-a, node-b, node-c" in missing.stderr


def test_pod_filters_pick_rows_but_node_sums_stay_whole():
    out = explain_json("--namespace", "jobs")
    assert sorted(p["name"] for p in out["pods"]) == ["batch", "done"]
    assert [n["node"] for n in out["nodes"]] == ["node-b"]
    vms = explain_json("--source", "vm_usage")
    assert [p["name"] for p in vms["pods"]] == ["compute"]
    assert vms["nodes"][0]["cpu_cores"]["pod_or_vm"] == 1.5  # the whole node, not just the VM
    assert explain_json("--problems")["pods"] == []
    bad = vm_pod("broken", "vm-2", "1", "1Gi", node="node-a")
    bad["metadata"]["annotations"]["vm.neon.tech/usage"] = "{oops"
    items = json.loads(cluster_dump())["items"] + [bad]
    result = run("explain", "-o", "json", "--problems", input=json.dumps({"kind": "List", "items": items}))
    assert [p["name"] for p in json.loads(result.stdout)["pods"]] == ["broken"]


@pytest.mark.parametrize("sort,nodes,first_pods", [
    ("name", ["node-a", "node-b", "node-c"], ["web", "compute"]),   # pods by namespace/name: default/, neon/
    ("cpu", ["node-b", "node-a", "node-c"], ["batch", "done"]),     # 120 % cpu; pods by cpu, terminal last
    ("memory", ["node-a", "node-b", "node-c"], ["compute", "web"]), # 75 % memory; 2Gi before 1Gi
    ("busy", ["node-b", "node-a", "node-c"], ["batch", "done"]),
])
def test_sort_orders_nodes_and_pods(sort, nodes, first_pods):
    out = explain_json("--sort", sort)
    assert [n["node"] for n in out["nodes"]] == nodes
    assert [p["name"] for p in out["pods"]][:2] == first_pods


def test_the_bundled_sample_explains_like_the_demo():
    result = run("explain", "sample")
    assert result.returncode == 0, result.stderr
    assert "NODE sample-node  12 pods  cpu 75%, memory 64% of allocatable" in result.stdout
    # One node: its whole verdict, every blocker listed.
    # Upstream 1.36 counts the NeonVM runners by their own requests (it reads no VM usage); neon's autoscaler by it.
    assert ("AUTOSCALER  underutilized: cpu 33% < threshold 50%, a scale-down candidate, not removable: 9 pods block "
            "its removal") in result.stdout
    assert "  UTILIZATION  cpu 33% (decides), memory 13%; threshold 50%; as cluster-autoscaler 1.36 computes it" \
        in result.stdout and "default/debug-shell" in result.stdout and "CANNOT SEE" in result.stdout
    assert "does not read vm.neon.tech/usage" in result.stdout
    neon = run("explain", "sample", "--autoscaler-release", "neon")
    assert "AUTOSCALER  not underutilized: cpu 75% > threshold 50%; 9 pods would also block its removal" in neon.stdout


@pytest.mark.parametrize("text,words", [
    ("", ["empty", "kubectl get nodes,pods -A -o json"]),
    ("   \n", ["empty"]),
    (json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api"}}]}),
     ["no Pod", "found 2 Deployment", "kubectl get nodes,pods -A -o json"]),
    (json.dumps({"apiVersion": "v1", "kind": "List", "items": []}), ["no Pod", "found an empty List"]),
    (json.dumps({"kind": "List", "items": [node("node-a", "1", "1Gi")]}), ["no Pod", "found 1 Node"]),
    ("NAME                     READY   STATUS    RESTARTS   AGE\nweb-7d4b9c-x2k4p         1/1     Running   0          3d\n",
     ["table output", "-o json"]),
])
def test_input_without_pods_is_an_error_that_says_what_to_run(text, words):
    result = run("explain", input=text)
    assert result.returncode == 2 and result.stdout == ""
    assert all(w in result.stderr for w in words), result.stderr
    assert "Traceback" not in result.stderr


def test_node_file_without_a_node_is_an_error(tmp_path):
    node_file = tmp_path / "node.json"
    node_file.write_text(json.dumps(pod("not-a-node")))
    result = run("explain", "--node-file", str(node_file), input=cluster_dump())
    assert result.returncode == 2 and "holds no Node" in result.stderr and "found 1 Pod" in result.stderr
