"""kube-scheduler as the oracle for the agent's per-pod value and its node's `scheduled` quantity.

The scheduler's ``/metrics/resources`` endpoint exports ``kube_pod_resource_request`` for every non-terminal pod,
computed with component-helpers' ``PodRequests`` (spec only, overhead and pod-level resources included): the very
function the agent reimplements. A battery of pods is scheduled by the real scheduler onto two Nodes, each with
an agent started from the shipped DaemonSet; for every pod that is not a NeonVM runner the agent must report the
scheduler's numbers, and each node's ``scheduled`` must be the scheduler's per-node sum. VM runner pods follow the
annotation rules instead: the first container's spec requests give way to usage / overcommit, the rest of the pod
is what the scheduler counts.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest

from agent.model.quantity import NANO, parse_quantity
from testkit.cluster import Cluster
from testkit.waiting import wait_until
from testkit.factory import container, for_create, pod, vm_pod
from testkit.kubelet import AgentContainer, Deployment, start_agent_pod, wait_for_daemon_pod
from testkit.kwok import Kwok, custom_status, set_custom_status, wait_running
from testkit.otlp_receiver import HttpReceiver

pytestmark = pytest.mark.cluster

NODES = ("oracle-a", "oracle-b")
SELECTOR = {"nra-test": "oracle"}


def sidecar(name: str, cpu: str, memory: str | None = None) -> dict:
    return container(name, cpu, memory, restart_policy="Always")


def battery(runtime_class: str) -> dict[str, dict]:
    """Name -> pod, each a shape of request arithmetic the scheduler and the agent must agree on."""
    gi = "1Gi"
    pods = {
        "plain": pod("plain", containers=[container("app", "250m", "64Mi")]),
        "several-containers": pod("several-containers", containers=[
            container("a", "100m", "32Mi"), container("b", "200m", "64Mi"), container("c", "50m")]),
        "init-dominates": pod("init-dominates", init_containers=[container("migrate", "500m", "256Mi")],
                              containers=[container("app", "100m", "64Mi")]),
        # KEP-753's examples: init 5; sidecars 1, 2, 3; app 1 -> 7. Interleaved: init 5, sidecar 1, sidecar 2,
        # init 5, sidecar 3; app 1 -> 8 (here in units of 100m and 16Mi).
        "sidecars": pod("sidecars", init_containers=[
            container("init", "500m", "80Mi"), sidecar("s1", "100m", "16Mi"), sidecar("s2", "200m", "32Mi"),
            sidecar("s3", "300m", "48Mi")], containers=[container("app", "100m", "16Mi")]),
        "sidecars-interleaved": pod("sidecars-interleaved", init_containers=[
            container("i1", "500m", "80Mi"), sidecar("s1", "100m", "16Mi"), sidecar("s2", "200m", "32Mi"),
            container("i2", "500m", "80Mi"), sidecar("s3", "300m", "48Mi")],
            containers=[container("app", "100m", "16Mi")]),
        "runtimeclass-overhead": pod("runtimeclass-overhead", containers=[container("app", "100m", "64Mi")]),
        "pod-level": pod("pod-level", pod_requests={"cpu": "1", "memory": gi},
                         containers=[container("a", "200m", "128Mi"), container("b", "300m")]),
        "pod-level-and-overhead": pod("pod-level-and-overhead", pod_requests={"cpu": "500m", "memory": "512Mi"},
                                      containers=[container("a", "100m", "64Mi")]),
        "limits-only": pod("limits-only", containers=[
            {"name": "app", "image": "example/app:1", "resources": {"limits": {"cpu": "300m", "memory": "96Mi"}}}]),
        "best-effort": pod("best-effort", containers=[container("app")]),
        "terminal": pod("terminal", containers=[container("job", "400m", "256Mi")]),
        "unschedulable": pod("unschedulable", containers=[container("huge", "500", "1Ti")]),
        # NeonVM runner pods
        "vm-plain": vm_pod("vm-plain", "vm-plain", "250m", gi),
        "vm-overcommit": vm_pod("vm-overcommit", "vm-overcommit", "2", "3Gi",
                                overcommit={"cpu": "2500m", "memory": "1500m"}),
        "vm-requests-and-overhead": vm_pod("vm-requests-and-overhead", "vm-requests-and-overhead", "500m", gi),
        "vm-bad-overcommit": vm_pod("vm-bad-overcommit", "vm-bad-overcommit", "1", gi,
                                    annotations={"vm.neon.tech/overcommit": "not json"}),
    }
    pods["vm-requests-and-overhead"]["spec"]["containers"] = [container("neonvm-runner", "100m", "128Mi"),
                                                             container("metrics", "50m", "32Mi")]
    pods["vm-bad-overcommit"]["spec"]["containers"] = [container("neonvm-runner", "100m", "128Mi")]
    for name in ("runtimeclass-overhead", "pod-level-and-overhead", "vm-requests-and-overhead"):
        pods[name]["spec"]["runtimeClassName"] = runtime_class
    return pods


#: VM pods whose annotation the agent must apply: name -> (usage, overcommit factors or None)
VM_RULES = {"vm-plain": ({"cpu": "250m", "memory": "1Gi"}, None),
            "vm-overcommit": ({"cpu": "2", "memory": "3Gi"}, {"cpu": "2500m", "memory": "1500m"}),
            "vm-requests-and-overhead": ({"cpu": "500m", "memory": "1Gi"}, None)}


@pytest.fixture(scope="module")
def scheduled(cluster: Cluster, kwok: Kwok, deployed: Deployment, module_http_receiver: HttpReceiver, tmp_path_factory):
    """The battery scheduled onto two Nodes, each with its agent running; yields (namespace, agents by node)."""
    agents: dict[str, AgentContainer] = {}
    namespace = cluster.create_namespace("oracle")
    runtime_class = f"nra-sandboxed-{namespace}"
    cluster.api("POST", "/apis/node.k8s.io/v1/runtimeclasses", {
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": runtime_class},
        "handler": "kata", "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}}})
    try:
        for node in NODES:
            kwok.add_node(node, cpu="16", memory="64Gi", labels=SELECTOR)
        for node in NODES:
            agents[node] = start_agent_pod(cluster, wait_for_daemon_pod(cluster, deployed, node),
                                           tmp_path_factory.mktemp(f"agent-{node}"), module_http_receiver.endpoint)
        for name, manifest in battery(runtime_class).items():
            body = for_create(manifest, nodeSelector=SELECTOR)
            # KWOK only completes Job pods: the terminal one's Succeeded is written by the test.
            cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", custom_status(body) if name == "terminal" else body)
        path = f"/api/v1/namespaces/{namespace}/pods"

        def bound() -> list[dict] | None:
            items = cluster.api("GET", path)["items"]
            waiting = [p for p in items if not p["spec"].get("nodeName") and p["metadata"]["name"] != "unschedulable"]
            return None if waiting else items

        for item in wait_until(bound, 60, interval=0.5, message="the battery bound by kube-scheduler"):
            if item["spec"].get("nodeName") and item["metadata"]["name"] != "terminal":
                wait_running(cluster, namespace, item["metadata"]["name"])
        set_custom_status(cluster, namespace, "terminal", "Succeeded", container_statuses=[])
        for agent in agents.values():
            agent.wait_ready()
        yield namespace, agents
    finally:
        for agent in agents.values():
            agent.stop()
        cluster.api("DELETE", f"/apis/node.k8s.io/v1/runtimeclasses/{runtime_class}")


def scheduler_view(cluster: Cluster) -> dict[tuple[str, str], dict]:
    """(namespace, pod) -> {"node", "cpu", "memory"} from kube_pod_resource_request; an absent resource is 0
    (the scheduler skips zero quantities)."""
    view: dict[tuple[str, str], dict] = {}
    for s in cluster.scheduler_resource_metrics():
        entry = view.setdefault((s["namespace"], s["pod"]), {"node": s["node"], "cpu": 0.0, "memory": 0.0})
        if s["resource"] in ("cpu", "memory"):
            entry[s["resource"]] = s["value"]
    return view


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def vm_expected(name: str, oracle: dict, manifest: dict) -> tuple[float, float]:
    """The scheduler's view of the pod with the first container's spec requests replaced by usage / overcommit."""
    usage, factors = VM_RULES[name]
    first = manifest["spec"]["containers"][0].get("resources", {}).get("requests", {})
    out = []
    for resource in ("cpu", "memory"):
        applied = Fraction(parse_quantity(usage[resource]), NANO)  # quantities parse to nano-units
        if factors:
            applied /= Fraction(parse_quantity(factors[resource]), NANO)
        out.append(oracle[resource] - parse_quantity(first.get(resource, "0")) / NANO + float(applied))
    return out[0], out[1]


def mismatches(cluster: Cluster, namespace: str, agents: dict[str, AgentContainer]) -> list[str]:
    oracle = scheduler_view(cluster)
    reports = {node: agent.pods() for node, agent in agents.items()}
    manifests = battery("unused")
    problems = []
    for name, manifest in manifests.items():
        key = f"{namespace}/{name}"
        seen_by = [node for node, pods in reports.items() if key in pods]
        if name == "unschedulable":
            if seen_by or oracle.get((namespace, name), {}).get("node") != "":
                problems.append(f"{name}: pending pod seen by {seen_by} / scheduler {oracle.get((namespace, name))}")
            continue
        if len(seen_by) != 1:
            problems.append(f"{name}: reported by agents {seen_by}")
            continue
        report = reports[seen_by[0]][key]
        if name == "terminal":
            if report["reported"] or (namespace, name) in oracle:
                problems.append(f"{name}: a Succeeded pod is counted ({report['reported']}, {oracle.get((namespace, name))})")
            continue
        # The scheduler writes no sample for a zero request, so a pod requesting nothing has none at all.
        expected = oracle.get((namespace, name), {"node": seen_by[0], "cpu": 0.0, "memory": 0.0})
        if expected["node"] != seen_by[0]:
            problems.append(f"{name}: scheduler has it on {expected['node']}, the agent on {seen_by[0]}")
            continue
        if name in VM_RULES:
            cpu, memory = vm_expected(name, expected, manifest)
            source = "vm_usage"
        else:
            cpu, memory, source = expected["cpu"], expected["memory"], "pod_requests"
        got = (report["cpu_cores"], report["memory_bytes"], report["source"])
        if not (close(got[0], cpu) and close(got[1], memory) and got[2] == source):
            problems.append(f"{name}: agent {got}, expected {(cpu, memory, source)} (scheduler {expected})")
    for node, agent in agents.items():
        quantities = agent.json("/debug/node")
        per_node = [v for v in oracle.values() if v["node"] == node]
        for resource, key in (("cpu", "cpu_cores"), ("memory", "memory_bytes")):
            ours, theirs = quantities[key]["scheduled"], sum(v[resource] for v in per_node)
            if not close(ours, theirs):
                problems.append(f"{node}: scheduled {resource} {ours} != scheduler's sum {theirs}")
    return problems


def test_agent_values_and_node_sums_equal_the_schedulers(cluster: Cluster, scheduled) -> None:
    namespace, agents = scheduled
    last: list[str] = []

    def agree() -> bool:
        last[:] = mismatches(cluster, namespace, agents)
        return not last

    try:
        wait_until(agree, 60, interval=1.0, message="agents and kube-scheduler agree")
    except AssertionError:
        raise AssertionError("agents disagree with kube-scheduler:\n" + "\n".join(last)) from None


def test_battery_spans_both_nodes_and_every_value_source(cluster: Cluster, scheduled) -> None:
    """The comparison above is only worth something if the scheduler spread the pods and VMs were among them."""
    namespace, agents = scheduled
    reports = {node: agent.pods() for node, agent in agents.items()}
    ours = {k: v for pods in reports.values() for k, v in pods.items() if k.startswith(namespace + "/")}
    assert all(any(k.startswith(namespace + "/") for k in pods) for pods in reports.values()), reports.keys()
    assert {v["source"] for v in ours.values()} == {"vm_usage", "pod_requests"}
    bad = ours[f"{namespace}/vm-bad-overcommit"]
    assert bad["source"] == "pod_requests" and any("overcommit" in p for p in bad["problems"]), bad
    overhead = ours[f"{namespace}/runtimeclass-overhead"]
    assert [c["kind"] for c in overhead["contributions"]].count("overhead") == 1, json.dumps(overhead)
