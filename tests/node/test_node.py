"""The agent on a real node: its image built here, run by a real kubelet on containerd and runc (issue 20).

`python -m pytest -m node` runs this module alone. testkit/node_cluster.py starts the control plane, the kubelet,
containerd, kube-proxy and CoreDNS inside a network namespace the fixture makes; the manifests are applied as
shipped (`kubectl apply -k daemonset/`, and `-k` of an overlay in the test's tmp dir over the unchanged otel-config/
that sets only the Deployment's two ADAPT values, as an operator would), so the agent runs from the image under the
DaemonSet's security context, with its probes, memory limit and grace period acted on by the kubelet, and pushes
with its projected token over TLS (the Collector's certificate and the agent's CA made by otel-config/tls/
make-secrets.sh, as the docs have an operator do) to both Collector replicas, which verify the token against the API
server's issuer and write into Prometheus 3 by remote write. The shipped token lifetime is the API server's minimum,
600 s, so the kubelet rotates it within the suite (at 80 % of it) and the token test sees the agent push with the new
token after the old one expired. An agent given a CA that did not sign the Collector's certificate pushes nothing.
The rollout restart runs last, over the real node and simulated ones (KWOK), so ``maxUnavailable`` is a share.
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.cluster import Cluster
from testkit.kwok import KWOK_NODE_TAINT, Kwok
from testkit.node_cluster import NODE_NAME, Node
from testkit.node_rollout import (  # the fixtures prometheus and rollout live there
    AGENT_NS, AGENT_SELECTOR, COLLECTOR_AUDIENCE, COLLECTOR_NS, COLLECTOR_SELECTOR, MAKE_TLS_SECRETS,
    ROTATED_TOKEN_SECONDS, SHIPPED_DAEMONSET)
from testkit.waiting import wait_until

_AGENT_CONTAINER = SHIPPED_DAEMONSET["spec"]["template"]["spec"]["containers"][0]
# The port the shipped DaemonSet declares for the agent's endpoint: inside the pod's own network namespace.
DEBUG_PORT = next(p["containerPort"] for p in _AGENT_CONTAINER["ports"] if p["name"] == "debug")
# Where the agent reads the Collector's token (the projected volume the kubelet writes and rotates).
COLLECTOR_TOKEN_FILE = next(e["value"] for e in _AGENT_CONTAINER["env"] if e["name"] == "NRA_OTLP_TOKEN_FILE")
# The name the agent dials and the Collector's certificate is for: the Service's, in the Collector's namespace.
COLLECTOR_HOST = f"otel-collector.{COLLECTOR_NS}.svc"

pytestmark = pytest.mark.node

FIGURES: dict[str, float] = {}


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def agent_pod(node: Node) -> dict:
    """The agent's pod on the real node (the last test adds simulated nodes with agent pods of their own)."""
    pods = [p for p in node.pods(AGENT_NS, AGENT_SELECTOR)
            if not p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName") == node.name]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def agent_status(pod: dict) -> dict:
    return next(s for s in pod["status"]["containerStatuses"] if s["name"] == "agent")


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


def test_the_namespace_has_no_way_out(node_cluster: Node) -> None:
    """No default route and no link out of the test's namespace: every address the node uses stays inside."""
    import subprocess

    routes = json.loads(subprocess.run(["ip", "-j", "route", "show", "table", "all"], stdout=subprocess.PIPE,
                                       text=True, check=True).stdout)
    assert not [r for r in routes if r.get("dst") == "default"], routes
    links = json.loads(subprocess.run(["ip", "-j", "link", "show"], stdout=subprocess.PIPE, text=True,
                                      check=True).stdout)
    kinds = {link["ifname"]: link.get("link_type") for link in links}
    assert {"lo", "nra0", "nra1", "cni0"} <= kinds.keys(), kinds
    # every other link is a pod's veth end on the bridge
    assert all(name.startswith("veth") for name in kinds.keys() - {"lo", "nra0", "nra1", "cni0"}), kinds


def test_rollout_as_shipped_agent_ready_through_its_own_probes(node_cluster: Node, rollout: dict) -> None:
    pod = agent_pod(node_cluster)
    status = agent_status(pod)
    assert status["ready"] and status["restartCount"] == 0, status
    assert status["image"].endswith("node-requests-agent:0.1.0"), status["image"]
    container = pod["spec"]["containers"][0]
    assert "readinessProbe" in container and "livenessProbe" in container
    # The debug endpoint answers on the pod's own address (its own network namespace), as the probes reach it.
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:{DEBUG_PORT}/readyz", timeout=5) as response:
        assert response.status == 200
    # The views are node-local: from outside the pod (here the node's own stack) they are refused.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://{pod['status']['podIP']}:{DEBUG_PORT}/debug/pods", timeout=5)
    assert refused.value.code == 403
    assert node_cluster.timings["agent_apply_to_ready_s"] < 180


def test_agent_pushes_to_the_collector_by_dns_name_and_prometheus_shows_pod_or_vm(
        node_cluster: Node, rollout: dict, workload_namespace: str, prometheus) -> None:
    node = node_cluster
    for i, cpu in enumerate(("100m", "250m")):
        node.cluster.api("POST", f"/api/v1/namespaces/{workload_namespace}/pods",
                         tiny_pod(f"plain-{i}", [tiny("app", cpu, "16Mi")]))
    node.wait_pods_ready(workload_namespace, "", 2, 120)
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
    assert prometheus.query('pod_or_vm_mem_requests{k8s_pod_name="plain-0"}')
    # No DNS workaround: the agent's endpoint is the shipped Service name, resolved by CoreDNS in the pod.
    env = {e["name"]: e.get("value") for e in agent_pod(node)["spec"]["containers"][0]["env"]}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"https://{COLLECTOR_HOST}:4318"
    assert not agent_debug(node, "/debug/runtime")["export_failures"]  # TLS verified: not one failed export


# --------------------------------------------------------------------------- 2. workload pods are real containers


def in_agent(node: Node, code: str) -> str:
    """What Python ``code`` prints, run with the image's python inside the agent's container (kubectl exec)."""
    pod = agent_pod(node)
    result = node.cluster.kubectl("exec", "-n", AGENT_NS, pod["metadata"]["name"], "-c", "agent", "--",
                                  "python", "-c", code)
    assert result.returncode == 0, result.stderr
    return result.stdout


def agent_debug(node: Node, path: str) -> dict:
    """A debug view of the agent. The views answer loopback peers only (agent/debug/endpoint.py; kubectl
    port-forward arrives there), so the test asks from inside the agent's own container, over its loopback."""
    return json.loads(in_agent(node, "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
                                     f"'http://127.0.0.1:{DEBUG_PORT}{path}', timeout=5).read().decode())"))


def agent_debug_pods(node: Node) -> dict[str, dict]:
    return {f"{p['namespace']}/{p['name']}": p for p in agent_debug(node, "/debug/pods")["pods"]}


def scheduler_view(node: Node) -> dict[tuple[str, str], float]:
    """(namespace/pod, resource) -> kube_pod_resource_request from the real kube-scheduler."""
    return {(f"{s['namespace']}/{s['pod']}", s["resource"]): s["value"] for s in node.cluster.scheduler_resource_metrics()}


# Small requests: the node's allocatable is this machine's 2 cores, shared with the Collector, CoreDNS and the agent.
WORKLOADS = {
    # name: (pod, expected cpu cores the agent reports, expected memory bytes)
    "multi": (tiny_pod("multi", [tiny("a", "20m", "32Mi"), tiny("b", "30m", "16Mi")]), 0.05, 48 << 20),
    "inits": (tiny_pod("inits", [tiny("app", "10m", "16Mi")],
                       initContainers=[tiny("init", "100m", "8Mi", args=["run", "0.5"])]), 0.1, 16 << 20),
    "sidecar": (tiny_pod("sidecar", [tiny("app", "20m", "16Mi")],
                         initContainers=[tiny("side", "10m", "8Mi", restartPolicy="Always"),
                                         tiny("init", "40m", "32Mi", args=["run", "0.5"])]), 0.05, 40 << 20),
    "overhead": (tiny_pod("overhead", [tiny("app", "10m", "16Mi")], runtimeClassName="nra-runc"), 0.06, 80 << 20),
    "podlevel": (tiny_pod("podlevel", [tiny("app"), tiny("helper")],
                          resources={"requests": {"cpu": "80m", "memory": "64Mi"}}), 0.08, 64 << 20),
    "crashloop": (tiny_pod("crashloop", [tiny("app", "30m", "16Mi", args=["exit", "1"])]), 0.03, 16 << 20),
    "resized": (tiny_pod("resized", [tiny("app", "100m", "16Mi")]), 0.1, 16 << 20),  # resized in place below
}
RUNNER = tiny_pod("runner", [tiny("neonvm-runner")], metadata={
    "labels": {"app.kubernetes.io/name": "NeonVM", "vm.neon.tech/name": "vm-a"},
    "annotations": {"vm.neon.tech/usage": '{"cpu":"1","memory":"2Gi"}',
                    "vm.neon.tech/overcommit": '{"cpu":"2","memory":"1"}'}})
COMPLETES = tiny_pod("completes", [tiny("app", "20m", "16Mi", args=["exit", "0"])], restartPolicy="Never")


@pytest.fixture(scope="module")
def workloads(node_cluster: Node, rollout: dict, workload_namespace: str) -> str:
    node, ns = node_cluster, workload_namespace
    node.cluster.api("POST", "/apis/node.k8s.io/v1/runtimeclasses", {
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nra-runc"}, "handler": "runc",
        "overhead": {"podFixed": {"cpu": "50m", "memory": "64Mi"}}})
    for pod in [*(p for p, _, _ in WORKLOADS.values()), RUNNER, COMPLETES]:
        node.cluster.api("POST", f"/api/v1/namespaces/{ns}/pods", json.loads(json.dumps(pod)))

    def settled() -> bool:
        pods = {p["metadata"]["name"]: p for p in node.pods(ns)}
        status = {n: p.get("status", {}) for n, p in pods.items()}
        restarted = any(s.get("restartCount", 0) >= 1 for s in status.get("crashloop", {}).get("containerStatuses", []))
        running = all(ready(pods[n]) for n in (*WORKLOADS.keys() - {"crashloop"}, "runner"))
        return running and restarted and status["completes"].get("phase") == "Succeeded"

    try:
        wait_until(settled, 180, interval=1, message="workload pods running, one completed, one crash-looping")
    except AssertionError as error:
        summary = {p["metadata"]["name"]: (p.get("status", {}).get("phase"), ready(p), p.get("status", {}).get("reason"),
                                           [c.get("message") for c in p.get("status", {}).get("conditions", [])
                                            if c.get("message")])
                   for p in node.pods(ns)}
        raise AssertionError(f"{error}\n{json.dumps(summary, indent=1)}\n{node.describe(ns, '')}") from None
    return ns


def test_workload_status_is_written_by_the_real_kubelet(node_cluster: Node, workloads: str) -> None:
    pods = {p["metadata"]["name"]: p for p in node_cluster.pods(workloads)}
    sidecar = pods["sidecar"]["status"]
    assert {s["name"]: s["state"].keys() for s in sidecar["initContainerStatuses"]} == \
           {"side": {"running"}, "init": {"terminated"}}
    for status in pods["multi"]["status"]["containerStatuses"]:
        assert status["containerID"].startswith("containerd://") and "running" in status["state"], status
        assert status["allocatedResources"] == status["resources"]["requests"], status
    assert pods["overhead"]["spec"]["overhead"] == {"cpu": "50m", "memory": "64Mi"}  # RuntimeClass admission
    crash = pods["crashloop"]["status"]["containerStatuses"][0]
    assert crash["restartCount"] >= 1 and crash["lastState"]["terminated"]["exitCode"] == 1, crash


def test_agent_values_equal_the_real_schedulers_for_real_containers(node_cluster: Node, workloads: str) -> None:
    node = node_cluster
    # "overhead" is checked on its own below: the kubelet's pod-level status totals include the overhead.
    names = [n for n in WORKLOADS if n != "overhead"]

    def agreeing() -> dict | None:
        agent, scheduler = agent_debug_pods(node), scheduler_view(node)
        rows = {}
        for name in names:
            key = f"{workloads}/{name}"
            if key not in agent or (key, "cpu") not in scheduler:
                return None
            rows[name] = (agent[key]["cpu_cores"], scheduler[(key, "cpu")],
                          agent[key]["memory_bytes"], scheduler.get((key, "memory")))
        return rows if all(abs(a - s) < 1e-9 and m == sm for a, s, m, sm in rows.values()) else None

    try:
        rows = wait_until(agreeing, 60, interval=1, message="agent == kube_pod_resource_request for every pod")
    except AssertionError:
        agent, scheduler = agent_debug_pods(node), scheduler_view(node)
        raise AssertionError({n: (agent.get(f"{workloads}/{n}", {}).get("cpu_cores"),
                                  scheduler.get((f"{workloads}/{n}", "cpu"))) for n in names}) from None
    for name in names:
        _, expected_cpu, expected_memory = WORKLOADS[name]
        assert rows[name][0] == pytest.approx(expected_cpu) and rows[name][2] == expected_memory, (name, rows[name])
    agent = agent_debug_pods(node)
    # RuntimeClass overhead on a real 1.37 kubelet: it writes pod-level status totals (status.resources and
    # status.allocatedResources) that already contain spec.overhead, and 1.37's PodRequests (component-helpers
    # v0.37.2), which the agent follows, takes them as the allocated/actuated totals and adds spec.overhead again
    # (upstream kubernetes/kubernetes#139627). kube_pod_resource_request (default options, no status) counts it once.
    pod = node.cluster.api("GET", f"/api/v1/namespaces/{workloads}/pods/overhead")
    scheduler = scheduler_view(node)
    overhead = agent[f"{workloads}/overhead"]
    detail = {"agent": overhead, "pod_status_resources": pod["status"].get("resources"),
              "pod_status_allocated": pod["status"].get("allocatedResources"),
              "scheduler": scheduler.get((f"{workloads}/overhead", "cpu"))}
    print(f"\noverhead pod on the real kubelet: {json.dumps(detail, indent=1)}")
    assert scheduler[(f"{workloads}/overhead", "cpu")] == pytest.approx(0.06), detail
    if pod["status"].get("resources"):
        assert overhead["cpu_cores"] == pytest.approx(0.11), detail  # 10m + 50m (status total) + 50m again
    else:
        assert overhead["cpu_cores"] == pytest.approx(0.06), detail
    runner = agent[f"{workloads}/runner"]
    assert (runner["cpu_cores"], runner["memory_bytes"], runner["source"]) == (0.5, 2 << 30, "vm_usage"), runner
    assert f"{workloads}/completes" not in agent or not agent[f"{workloads}/completes"]["reported"]


def _resize(node: Node, namespace: str, name: str, cpu: str) -> None:
    patch = {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]}}
    result = node.cluster.kubectl("patch", "pod", name, "-n", namespace, "--subresource", "resize",
                                  "--type", "strategic", "-p", json.dumps(patch))
    assert result.returncode == 0, result.stderr


def test_in_place_resize_by_the_real_kubelet_agent_follows_and_equals_the_scheduler(node_cluster: Node,
                                                                                 workloads: str) -> None:
    node, key = node_cluster, f"{workloads}/resized"
    steps = []
    for cpu, cores in (("300m", 0.3), ("150m", 0.15)):
        _resize(node, workloads, "resized", cpu)

        def actuated() -> dict | None:
            pod = node.cluster.api("GET", f"/api/v1/namespaces/{workloads}/pods/resized")
            status = pod["status"]["containerStatuses"][0]
            return pod if status.get("resources", {}).get("requests", {}).get("cpu") == cpu else None

        pod = wait_until(actuated, 90, interval=0.5, message=f"kubelet actuated the resize to {cpu}")
        assert pod["status"]["containerStatuses"][0]["allocatedResources"]["cpu"] == cpu
        value = wait_until(lambda: (a := agent_debug_pods(node)[key]["cpu_cores"]) == cores and a, 60, interval=0.5,
                           message=f"agent reports {cores} after the resize")
        scheduler = wait_until(lambda: scheduler_view(node).get((key, "cpu")) == cores and cores, 30, interval=0.5,
                               message=f"scheduler reports {cores}")
        steps.append((cpu, value, scheduler))
    assert steps == [("300m", 0.3, 0.3), ("150m", 0.15, 0.15)]


# --------------------------------------------------------------------------- 3. inside the container

INSIDE = r"""
import json, os, psutil
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
try:
    open("/written-by-test", "w")
    write = "allowed"
except OSError as error:
    write = error.strerror
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
meminfo = dict(line.split(":", 1) for line in open("/proc/meminfo").read().splitlines())
limit = None
for path in ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"):
    if os.path.exists(path):
        limit = open(path).read().strip()
        break
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "cap_eff": status["CapEff"].strip(), "seccomp": status["Seccomp"].strip(),
    "no_new_privs": status["NoNewPrivs"].strip(), "write": write, "memory_limit": limit,
    "token": open(sa + "/token").read(), "token_link": os.path.realpath(sa + "/token"),
    "meminfo_total_kb": int(meminfo["MemTotal"].split()[0]), "psutil_total": psutil.virtual_memory().total,
    "psutil_cpus": psutil.cpu_count(), "sched_cpus": len(os.sched_getaffinity(0)),
    "proc_stat_cpus": sum(1 for l in open("/proc/stat") if l[:3] == "cpu" and l[3].isdigit()),
}))
"""


@pytest.fixture(scope="module")
def inside(node_cluster: Node, rollout: dict) -> dict:
    return {**json.loads(in_agent(node_cluster, INSIDE)), "pod": agent_pod(node_cluster)}


def _jwt_claims(token: str) -> dict:
    import base64

    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_inside_the_container_the_restricted_context_holds(inside: dict) -> None:
    assert (inside["uid"], inside["gid"]) == (65532, 65532)
    assert int(inside["cap_eff"], 16) == 0, inside["cap_eff"]
    assert inside["seccomp"] == "2" and inside["no_new_privs"] == "1"  # RuntimeDefault filter, no escalation
    assert inside["write"] == "Read-only file system"
    limit = inside["pod"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    assert limit == "160Mi" and int(inside["memory_limit"]) == 160 << 20, inside["memory_limit"]


def test_the_token_is_the_projected_one_bound_to_the_pod(inside: dict) -> None:
    claims = _jwt_claims(inside["token"])
    meta = inside["pod"]["metadata"]
    assert claims["kubernetes.io"]["pod"] == {"name": meta["name"], "uid": meta["uid"]}
    assert claims["kubernetes.io"]["serviceaccount"]["name"] == "node-requests-agent"
    assert claims["kubernetes.io"]["node"]["name"] == NODE_NAME
    # The kubelet's atomic writer: token is a link into a timestamped ..data folder, swapped on rotation.
    assert "/..20" in inside["token_link"] or "..data" not in inside["token_link"], inside["token_link"]


# --------------------------------------------------------------------------- 5. `used` from inside a pod


def test_psutil_in_the_container_sees_the_hosts_memory_and_cpus(inside: dict) -> None:
    host_total_kb = int(next(l for l in open("/proc/meminfo") if l.startswith("MemTotal")).split()[1])
    host_cpus = sum(1 for l in open("/proc/stat") if l[:3] == "cpu" and l[3].isdigit())
    assert inside["meminfo_total_kb"] == host_total_kb  # /proc/meminfo is not namespaced: the host's, not 160Mi
    assert inside["psutil_total"] == host_total_kb * 1024
    assert inside["proc_stat_cpus"] == inside["psutil_cpus"] == host_cpus
    assert int(inside["memory_limit"]) < inside["psutil_total"]


# --------------------------------------------------------------------------- 4. lifecycle


def _container_id(pod: dict) -> str:
    return agent_status(pod)["containerID"].removeprefix("containerd://")


def _task_pid(node: Node, container_id: str) -> int | None:
    for line in node.ctr("tasks", "ls").stdout.splitlines()[1:]:
        task, pid, state = line.split()
        if task == container_id and state == "RUNNING":
            return int(pid)
    return None


def _restarted(node: Node, count: int) -> dict | None:
    pod = agent_pod(node)
    status = agent_status(pod)
    return pod if status["restartCount"] == count and status.get("ready") else None


def test_killed_agent_is_restarted_by_the_kubelet_and_series_resume(node_cluster: Node, rollout: dict,
                                                                   prometheus) -> None:
    node = node_cluster
    before = agent_pod(node)
    count = agent_status(before)["restartCount"]
    node.ctr("tasks", "kill", "-s", "SIGKILL", _container_id(before))
    pod = wait_until(lambda: _restarted(node, count + 1), 120, interval=1, message="agent restarted, Ready again")
    assert pod["metadata"]["uid"] == before["metadata"]["uid"]
    assert agent_status(pod)["lastState"]["terminated"]["exitCode"] == 137
    # service.instance.id is the node name, so the restarted process continues the same series (no ghost ones).
    own = f"{AGENT_NS}/{pod['metadata']['name']}"
    assert wait_until(lambda: own in agent_debug_pods(node), 60, interval=1)
    restarted_at = time.time()
    selector = f'pod_or_vm_cpu_requests{{k8s_node_name="{NODE_NAME}",k8s_pod_name="{pod["metadata"]["name"]}"}}'

    def fresh() -> list | None:
        rows = prometheus.query(f"timestamp({selector})")
        return rows if rows and all(float(r["value"][1]) > restarted_at for r in rows) else None

    wait_until(fresh, 90, interval=2, message="a sample pushed by the restarted agent in Prometheus")
    # Same labels before and after the restart (service.instance.id is the node name): one series per pod.
    ghosts = prometheus.query(f'count by (k8s_namespace_name, k8s_pod_name) '
                              f'(pod_or_vm_cpu_requests{{k8s_node_name="{NODE_NAME}"}}) > 1')
    assert ghosts == [], ghosts


def test_wedged_agent_fails_liveness_and_is_restarted(node_cluster: Node, rollout: dict) -> None:
    node = node_cluster
    before = agent_pod(node)
    count = agent_status(before)["restartCount"]
    pid = _task_pid(node, _container_id(before))
    assert pid
    import os
    import signal

    os.kill(pid, signal.SIGSTOP)  # the container's main process, by pid: frozen, probes time out
    started = time.monotonic()
    probe = before["spec"]["containers"][0]["livenessProbe"]
    budget = probe["periodSeconds"] * (probe["failureThreshold"] + 1) + probe["timeoutSeconds"] + 60
    pod = wait_until(lambda: _restarted(node, count + 1), budget, interval=1, message="liveness restart")
    FIGURES["wedged_to_ready_again_s"] = time.monotonic() - started
    assert "Liveness probe failed" in node.cluster.kubectl("get", "events", "-n", AGENT_NS).stdout or pod


# --------------------------------------------------------------------------- 6. the Collector token, rotated

READ_COLLECTOR_TOKEN = f"import sys; sys.stdout.write(open({COLLECTOR_TOKEN_FILE!r}).read())"


def _push_empty(node: Node, token: str, ca_file: Path) -> int:
    """The HTTP status the Collector's OTLP receiver (through its Service's address, over TLS verified against
    ``ca_file`` for the Service's name) gives an empty push with ``token``: the oidc authenticator answers before
    the body is read."""
    context = ssl.create_default_context(cafile=str(ca_file))
    raw = socket.create_connection((node.service_ip(COLLECTOR_NS, "otel-collector"), 4318), timeout=10)
    conn = http.client.HTTPConnection(COLLECTOR_HOST, 4318, timeout=10)
    conn.sock = context.wrap_socket(raw, server_hostname=COLLECTOR_HOST)
    try:
        conn.request("POST", "/v1/metrics", body=b"", headers={
            "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {token}"})
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_kubelet_rotates_the_collector_token_and_the_same_agent_process_pushes_with_the_new_one(
        node_cluster: Node, rollout: dict, prometheus) -> None:
    """Placed after the tests that keep the agent's pod (a new pod gets a new token), so it waits only for the rest
    of the token's lifetime. Proof of the re-read: after the first token expired, which the Collector then refuses,
    the same agent process still pushes series that reach Prometheus."""
    node = node_cluster
    pod = agent_pod(node)
    status = agent_status(pod)
    volume = (node.workdir / "kubelet" / "pods" / pod["metadata"]["uid"] / "volumes" / "kubernetes.io~projected"
              / "collector-token" / "token")
    first = in_agent(node, READ_COLLECTOR_TOKEN)
    assert volume.read_text() == first  # the kubelet's copy on the node is the file the container reads
    old = _jwt_claims(first)
    assert old["aud"] == [COLLECTOR_AUDIENCE] and old["exp"] - old["iat"] == ROTATED_TOKEN_SECONDS, old
    assert old["kubernetes.io"]["pod"] == {"name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
    stats_before = agent_debug(node, "/debug/runtime")

    def rewritten() -> str | None:
        try:
            token = volume.read_text()
        except OSError:  # between the kubelet's ..data swap and our open; the next poll reads the new one
            return None
        return token if token != first else None

    # Due once less than 20 % of the lifetime is left (minus up to 10 s of jitter), written at the pod's next sync.
    due = old["exp"] - ROTATED_TOKEN_SECONDS // 5
    second = wait_until(rewritten, due - time.time() + 60, interval=1, message="the kubelet rewrote the token")
    rewritten_at = time.time()
    new = _jwt_claims(second)
    FIGURES["token_renewed_at_s_of_600"] = new["iat"] - old["iat"]
    FIGURES["token_file_rewritten_at_s_of_600"] = rewritten_at - old["iat"]
    assert new["kubernetes.io"]["pod"] == old["kubernetes.io"]["pod"] and new["aud"] == old["aud"], new
    assert new["jti"] != old["jti"], (old["jti"], new["jti"])
    assert due - 10 - 1 <= new["iat"] < old["exp"], (old, new)  # the kubelet's rule, before the old one expires
    assert in_agent(node, READ_COLLECTOR_TOKEN) == second  # what the container sees

    # From its expiry on the Collector refuses the first token; a series sampled after that reached Prometheus only
    # if the agent sent the second one.
    selector = f'pod_or_vm_cpu_requests{{k8s_node_name="{NODE_NAME}",k8s_pod_name="{pod["metadata"]["name"]}"}}'

    def sampled_after_expiry() -> list | None:
        rows = prometheus.query(f"timestamp({selector})")
        return rows if rows and all(float(r["value"][1]) > old["exp"] + 1 for r in rows) else None

    wait_until(sampled_after_expiry, old["exp"] - time.time() + 90, interval=2,
               message="a sample pushed after the first token expired, in Prometheus")
    FIGURES["pushed_after_expiry_at_s_of_600"] = time.time() - old["iat"]
    assert _push_empty(node, first, rollout["tls"] / "ca.crt") == 401  # the expired token is refused
    assert _push_empty(node, second, rollout["tls"] / "ca.crt") == 200  # the rotated one is accepted
    stats_after = agent_debug(node, "/debug/runtime")
    assert stats_after["last_export_success_unixtime"] > old["exp"] + 1, stats_after
    refused = [sum(n for reason, n in stats["export_failures"].items() if reason.startswith("http_4"))
               for stats in (stats_before, stats_after)]
    assert refused[0] == refused[1], (stats_before["export_failures"], stats_after["export_failures"])
    assert stats_after["exports"]["success"] > stats_before["exports"]["success"]
    # one process throughout: the new token was re-read, not picked up by a restart
    now = agent_status(agent_pod(node))
    assert (now["restartCount"], now["state"]["running"]["startedAt"]) == \
           (status["restartCount"], status["state"]["running"]["startedAt"]), now


def _log_follower(node: Node, pod: str):
    import subprocess

    return subprocess.Popen([str(node.cluster.kubectl_binary), f"--kubeconfig={node.cluster.admin_kubeconfig}",
                             "logs", "-f", "-n", AGENT_NS, pod, "-c", "agent", "--tail=0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _apply_agents_ca(node: Node, ca_file: Path) -> None:
    """Secret otel-collector-ca holding ``ca_file``, as make-secrets.sh writes it."""
    secret = node.cluster.kubectl("create", "secret", "generic", "otel-collector-ca", "-n", AGENT_NS,
                                  f"--from-file=ca.crt={ca_file}", "--dry-run=client", "-o", "yaml")
    assert secret.returncode == 0, secret.stderr
    applied = node.cluster.kubectl("apply", "-f", "-", input=secret.stdout)
    assert applied.returncode == 0, applied.stderr


def _replace_agent_pod(node: Node) -> dict:
    """Delete the agent's pod; its replacement (which reads the CA afresh) once Ready."""
    old = agent_pod(node)["metadata"]["uid"]
    result = node.cluster.kubectl("delete", "pod", "-n", AGENT_NS, agent_pod(node)["metadata"]["name"])
    assert result.returncode == 0, result.stderr
    return wait_until(lambda: next((p for p in [agent_pod_or_none(node)] if p and p["metadata"]["uid"] != old
                                    and ready(p)), None), 120, interval=1, message="a new agent pod Ready")


def agent_pod_or_none(node: Node) -> dict | None:
    try:
        return agent_pod(node)
    except AssertionError:  # between the old pod's end and the new one's creation
        return None


def test_an_agent_given_another_ca_pushes_nothing_and_says_tls_never_clear_text(
        node_cluster: Node, rollout: dict, prometheus, tmp_path) -> None:
    """Issue 29 item 6, the negative check on the real Service path: the agent's CA Secret holds a CA that did not
    sign the Collector's certificate (as with a Collector someone else stands up behind the name). The new agent pod
    verifies, refuses and pushes nothing: its export health counts only ``tls`` failures (a push in clear would be
    answered 400 by the TLS listener and counted http_4xx), no sample of it reaches Prometheus, and the Collector
    logs the TLS handshakes the agent aborted, from its pod's address. With the right CA back, the next pod pushes again."""
    node = node_cluster
    other = subprocess.run([str(MAKE_TLS_SECRETS), "--no-apply", str(tmp_path / "other")], capture_output=True,
                           text=True, timeout=60)
    assert other.returncode == 0, other.stderr
    _apply_agents_ca(node, tmp_path / "other" / "ca.crt")
    try:
        pod = _replace_agent_pod(node)
        name = pod["metadata"]["name"]

        def refused() -> dict | None:
            stats = agent_debug(node, "/debug/runtime")
            return stats if stats["export_failures"].get("tls", 0) >= 3 else None

        wait_until(lambda: agent_debug(node, "/debug/runtime")["export_failures"].get("tls"), 60, interval=1,
                   message="a first export refused for TLS")
        refusing_since = time.time()  # the old pod's final export (at its SIGTERM) is over by now
        stats = wait_until(refused, 120, interval=2, message="three exports refused for TLS")
        assert set(stats["export_failures"]) == {"tls"}, stats["export_failures"]
        assert stats["exports"].get("success", 0) == 0 and stats["last_export_success_unixtime"] is None, stats
        logs = node.cluster.kubectl("logs", "-n", AGENT_NS, name, "-c", "agent").stdout
        assert "tls: SSLCertVerificationError" in logs and "CERTIFICATE_VERIFY_FAILED" in logs, logs[-2000:]
        assert not prometheus.query(f'pod_or_vm_cpu_requests{{k8s_pod_name="{name}"}}')
        samples = prometheus.query(f'timestamp(node_requests_agent_exports_total{{instance="{NODE_NAME}"}})')
        assert all(float(r["value"][1]) < refusing_since for r in samples), (refusing_since, samples)
        collector_logs = "".join(node.cluster.kubectl("logs", "-n", COLLECTOR_NS, p["metadata"]["name"]).stdout
                                 for p in node.pods(COLLECTOR_NS, COLLECTOR_SELECTOR))
        # The agent aborts the handshake once it has seen the certificate; Go's TLS 1.3 server logs that as
        # "local error: tls: bad record MAC" (not as the client's alert), so the test asks only that the aborted
        # handshakes came from the agent's pod: it spoke TLS to the Collector, never plain HTTP.
        handshakes = [line for line in collector_logs.splitlines()
                      if "TLS handshake error" in line and f'{pod["status"]["podIP"]}:' in line]
        assert handshakes, collector_logs[-3000:]
    finally:
        _apply_agents_ca(node, rollout["tls"] / "ca.crt")
    pod = _replace_agent_pod(node)
    wait_until(lambda: agent_debug(node, "/debug/runtime")["exports"].get("success", 0) >= 1, 60, interval=2,
               message="the agent with the right CA pushes again")
    assert not agent_debug(node, "/debug/runtime")["export_failures"]


def test_delete_pod_sigterm_final_export_and_exit_within_grace(node_cluster: Node, rollout: dict) -> None:
    node = node_cluster
    pod = agent_pod(node)
    container_id = _container_id(pod)
    follower = _log_follower(node, pod["metadata"]["name"])
    time.sleep(1)
    started = time.monotonic()
    result = node.cluster.kubectl("delete", "pod", "-n", AGENT_NS, pod["metadata"]["name"], "--wait=false")
    assert result.returncode == 0, result.stderr
    wait_until(lambda: _task_pid(node, container_id) is None, 40, interval=0.1, message="agent container exited")
    exited = time.monotonic() - started
    FIGURES["delete_to_exit_s"] = exited
    try:
        output, _ = follower.communicate(timeout=15)
    except Exception:
        follower.kill()
        output, _ = follower.communicate()
    assert exited < pod["spec"]["terminationGracePeriodSeconds"], exited
    print(f"\nagent's last lines after SIGTERM:\n{output[-1500:]}")
    # The DaemonSet controller replaces it; the new pod becomes Ready through its probes.
    new = node.wait_pods_ready(AGENT_NS, AGENT_SELECTOR, 1, 120)[0]
    assert new["metadata"]["uid"] != pod["metadata"]["uid"]


# --------------------------------------------------------------------------- 7. rollout over several nodes

KWOK_NODES = 19  # with the real node 20: the shipped "10%" allows two unavailable at once


@pytest.fixture(scope="module")
def kwok_nodes(node_cluster: Node, rollout: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Simulated nodes beside the real one, added last: KWOK keeps them Ready and takes the agent pods the
    DaemonSet controller puts there to Running and Ready (no container runs there). KWOK's taint keeps everything
    else (the Collector, CoreDNS, the workloads) off them; the agent tolerates every taint."""
    kwok = Kwok(node_cluster.cluster, workdir=tmp_path_factory.mktemp("kwok")).start()
    names = [f"kwok-{i:02d}" for i in range(KWOK_NODES)]
    try:
        for name in names:
            kwok.add_node(name, cpu="4", memory="16Gi", taints=[KWOK_NODE_TAINT])
        kwok.wait_ready(names)
        yield names
    finally:
        # Gone before KWOK stops, so that no pod is left terminating with nobody to finish it: the nodes (the
        # DaemonSet then wants no pod there), then their pods.
        node_cluster.cluster.kubectl("delete", "nodes", *names, "--wait=false", "--ignore-not-found")
        node_cluster.cluster.kubectl("delete", "pods", "-n", AGENT_NS, f"--field-selector=spec.nodeName!={NODE_NAME}",
                                     "--grace-period=0", "--force")
        kwok.stop()


class PodTimeline:
    """Every change of a set of pods in the API server's order: a LIST, then WATCHes from the last resourceVersion
    in a thread, so no state between two polls is missed."""

    def __init__(self, cluster: Cluster, namespace: str, selector: str) -> None:
        self.path = f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}"
        listed = cluster.api("GET", self.path)
        self.cluster, self.initial = cluster, {p["metadata"]["uid"]: p for p in listed["items"]}
        self.events: list[dict] = []
        self.error: object = None
        self._version = listed["metadata"]["resourceVersion"]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-timeline", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for event in self.cluster.watch(self.path, self._version, timeout_seconds=2):
                    if event["type"] == "ERROR":
                        self.error = event["object"]
                        return
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self.events.append(event)
                    self._version = event["object"]["metadata"]["resourceVersion"]
        except Exception as error:  # surfaced by the test through .error
            self.error = error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def states(self) -> Iterator[dict[str, dict]]:
        """The pods (by uid) after each change, from the LIST on."""
        pods = dict(self.initial)
        yield pods
        for event in self.events:
            uid = event["object"]["metadata"]["uid"]
            if event["type"] == "DELETED":
                pods.pop(uid, None)
            else:
                pods[uid] = event["object"]
            yield pods


def unavailable_nodes(pods: dict[str, dict], nodes: list[str]) -> set[str]:
    """The nodes without an available agent pod as the DaemonSet controller counts them (minReadySeconds 0; a
    terminating pod is skipped, pkg/controller/daemon/update.go findUpdatedPodsOnNode)."""
    return set(nodes) - {p["spec"].get("nodeName") for p in pods.values()
                         if not p["metadata"].get("deletionTimestamp") and ready(p)}


def describe_pod(pod: dict) -> str:
    """One line: name, node, phase, Ready (with its reason), terminating or not."""
    condition = next((c for c in pod.get("status", {}).get("conditions", []) if c["type"] == "Ready"), {})
    ready_line = " ".join(filter(None, ("Ready", condition.get("status"), condition.get("reason"),
                                        condition.get("message"))))
    return (f"{pod['metadata']['name']} on {pod['spec'].get('nodeName')}: {pod.get('status', {}).get('phase')}, "
            f"{ready_line}{', terminating' if pod['metadata'].get('deletionTimestamp') else ''}")


def allowed_replaced(steps: list[dict], budget: int) -> list[int]:
    """Per state, how many nodes the DaemonSet controller can have taken down: ``budget``, plus what its deletion
    expectations let through. It lowers them on every event of a terminating pod (daemon_controller.go updatePod
    and deletePod, 1.37.2), and a pod sends several (the graceful deletion's update, its kubelet's or KWOK's status
    updates while it terminates, the final delete), so a batch of deletions can count as seen before the cache holds
    all of it: the controller then counts a pod it has just deleted as available and deletes one more. From the
    batch's own pods that is at most ``budget - 1`` more; an extra event of a pod from an earlier batch (``stray``:
    the real node's old pod, deleted by its kubelet only after its replacement exists) adds one each. Only what
    such events came before, since the controller last had room (fewer than ``budget`` replaced), is allowed."""
    allowed, extra, stray = [], 0, 0
    for step in steps:
        if len(step["replaced"]) < budget:
            extra = stray = 0
        extra, stray = extra + step["extra"], stray + step["stray"]
        allowed.append(budget + min(extra, budget - 1 + stray))
    return allowed


def rollout_steps(timeline: PodTimeline, nodes: list[str]) -> list[dict]:
    """Per state of the timeline: ``unavailable`` (the nodes without an available pod), ``replaced`` (those of them
    whose Ready pod the rollout deleted, not yet served by a Ready pod again: what maxUnavailable bounds), ``lost``
    (pods that went from Ready to not Ready without being deleted: the flaps no budget covers) and ``event`` (the
    change that led to the state), with ``nodes``: the unavailable nodes' pods, one line each; ``extra``: whether that
    event is one of a pod already terminating, ``stray``: one of those whose node has its replacement already (both
    for allowed_replaced)."""
    steps, replaced, before = [], set(), {}
    events = [None, *timeline.events]
    for event, pods in zip(events, timeline.states()):
        lost, subject = [], event and event["object"]
        # an event of a pod that was terminating already; a stray one if its node has its replacement
        extra = bool(subject and before.get(subject["metadata"]["uid"], {}).get("deleting"))
        stray = extra and any(p["spec"].get("nodeName") == subject["spec"].get("nodeName")
                              and not p["metadata"].get("deletionTimestamp") for p in pods.values())
        for uid, pod in pods.items():
            was = before.get(uid)
            deleting = bool(pod["metadata"].get("deletionTimestamp"))
            if was is not None and was["ready"] and not was["deleting"]:
                if deleting:
                    replaced.add(pod["spec"].get("nodeName"))
                elif not ready(pod):
                    lost.append(describe_pod(pod))
        unavailable = unavailable_nodes(pods, nodes)
        replaced &= unavailable
        steps.append({"unavailable": unavailable, "replaced": set(replaced), "lost": lost, "extra": extra,
                      "stray": stray,
                      "event": f"{event['type']} {describe_pod(event['object'])}" if event else "the LIST",
                      "nodes": {n: [describe_pod(p) for p in pods.values() if p["spec"].get("nodeName") == n]
                                for n in sorted(unavailable)}})
        before = {uid: {"ready": ready(p), "deleting": bool(p["metadata"].get("deletionTimestamp"))}
                  for uid, p in pods.items()}
    return steps


def test_rollout_restart_over_the_real_and_simulated_nodes_honours_max_unavailable(
        node_cluster: Node, rollout: dict, kwok_nodes: list[str]) -> None:
    node = node_cluster
    nodes = [node.name, *kwok_nodes]

    def every_node_served() -> bool:
        pods = node.pods(AGENT_NS, AGENT_SELECTOR)
        return len(pods) == len(nodes) and not unavailable_nodes({p["metadata"]["uid"]: p for p in pods}, nodes)

    wait_until(every_node_served, 120, interval=1, message="a Ready agent pod on every node")
    old = agent_pod(node)
    ds = node.cluster.api("GET", f"/apis/apps/v1/namespaces/{AGENT_NS}/daemonsets/node-requests-agent")
    assert ds["status"]["desiredNumberScheduled"] == len(nodes), ds["status"]
    shipped = SHIPPED_DAEMONSET["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"]
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == shipped
    # the controller scales a percentage of the desired pods and rounds up (GetScaledValueFromIntOrPercent)
    budget = math.ceil(int(shipped[:-1]) * len(nodes) / 100) if str(shipped).endswith("%") else int(shipped)
    timeline = PodTimeline(node.cluster, AGENT_NS, AGENT_SELECTOR)
    started = time.monotonic()
    try:
        result = node.cluster.kubectl("rollout", "restart", "daemonset/node-requests-agent", "-n", AGENT_NS)
        assert result.returncode == 0, result.stderr
        result = node.cluster.kubectl("rollout", "status", "daemonset/node-requests-agent", "-n", AGENT_NS,
                                      "--timeout=300s", timeout=320)
        assert result.returncode == 0, result.stdout + result.stderr
        FIGURES["rollout_restart_20_nodes_s"] = time.monotonic() - started
    finally:
        timeline.stop()
    assert timeline.error is None, timeline.error
    steps = rollout_steps(timeline, nodes)
    *_, final = timeline.states()
    allowed = allowed_replaced(steps, budget)
    over = [i for i, step in enumerate(steps) if len(step["replaced"]) > allowed[i]]
    worst = over[0] if over else max(range(len(steps)), key=lambda i: len(steps[i]["replaced"]))
    FIGURES["rollout_max_unavailable_seen"] = max(len(step["unavailable"]) for step in steps)
    FIGURES["rollout_max_replaced_at_once"] = max(len(step["replaced"]) for step in steps)
    FIGURES["rollout_states_over_budget"] = sum(len(step["replaced"]) > budget for step in steps)
    history = "\n".join(f"  {len(step['unavailable'])} unavailable, {len(step['replaced'])} replaced (allowed "
                        f"{allowed[i]}){', stray' if step['stray'] else ', extra' if step['extra'] else ''} "
                        f"after {step['event']}"
                        for i, step in enumerate(steps) if worst - 15 <= i <= worst)
    worst_nodes = "\n".join(f"  {n}: {'; '.join(pods)}" for n, pods in steps[worst]["nodes"].items())
    lost = [line for step in steps for line in step["lost"]]
    assert not lost, f"agent pods lost readiness on their own during the rollout: {lost}\n{history}"
    assert not over, (f"the rollout took down more than {budget} nodes at once; the states up to the first over "
                      f"the budget:\n{history}\nits unavailable nodes then:\n{worst_nodes}")
    # ...and the watch does see the controller replace `budget` pods at once, so the bound above can fail
    assert FIGURES["rollout_max_replaced_at_once"] >= budget, history
    assert {p["spec"]["nodeName"] for uid, p in final.items() if uid not in timeline.initial} == set(nodes)
    # the real node's pod was replaced by the kubelet: a new pod, a new container running in containerd
    new = agent_pod(node)
    assert new["metadata"]["uid"] != old["metadata"]["uid"] and ready(new)
    assert _task_pid(node, _container_id(new)) is not None and _task_pid(node, _container_id(old)) is None
    print(f"\nthe rollout, up to its most nodes replaced at once:\n{history}")
    print(f"\nnode figures: {json.dumps({**node.timings, **FIGURES}, indent=1)}")
