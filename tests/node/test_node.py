"""The agent on a real node: its image built here, run by a real kubelet on containerd and runc (issue 20).

`python -m pytest -m node` runs this module alone. tests/support/node_cluster.py starts the control plane, the kubelet,
containerd, kube-proxy and CoreDNS inside a network namespace the fixture makes; the manifests are applied as
shipped (`kubectl apply -k daemonset/`, and `-k` of an overlay in the test's tmp dir over the unchanged otel-config/
that sets only the Deployment's two ADAPT values, as an operator would), so the agent runs from the image under the
DaemonSet's security context, with its probes, memory limit and grace period acted on by the kubelet, and pushes
with its projected token to both Collector replicas, which verify it against the API server's issuer and write into
Prometheus 3 by remote write.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

import pytest
import yaml

from tests.support.node_cluster import NODE_NAME, Node
from tests.support.node_rollout import AGENT_NS, AGENT_SELECTOR  # the fixtures prometheus and rollout live there
from tests.support.repo import REPO as ROOT
from tests.support.waiting import wait_until

# The port the shipped DaemonSet declares for the agent's endpoint: inside the pod's own network namespace.
DEBUG_PORT = next(p["containerPort"] for d in yaml.safe_load_all((ROOT / "daemonset" / "daemonset.yaml").read_text())
                  if d and d.get("kind") == "DaemonSet"
                  for p in d["spec"]["template"]["spec"]["containers"][0]["ports"] if p["name"] == "debug")

pytestmark = pytest.mark.node

FIGURES: dict[str, float] = {}


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def agent_pod(node: Node) -> dict:
    pods = [p for p in node.pods(AGENT_NS, AGENT_SELECTOR) if not p["metadata"].get("deletionTimestamp")]
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
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.node-requests-collector.svc:4318"


# --------------------------------------------------------------------------- 2. workload pods are real containers


# The debug views answer loopback peers only (agent/debug/endpoint.py; kubectl port-forward arrives there), so the
# test asks from inside the agent's own container, over its loopback.
FETCH_DEBUG_PODS = ("import sys, urllib.request; "
                    f"sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:{DEBUG_PORT}/debug/pods', "
                    "timeout=5).read().decode())")


def agent_debug_pods(node: Node) -> dict[str, dict]:
    pod = agent_pod(node)
    result = node.cluster.kubectl("exec", "-n", AGENT_NS, pod["metadata"]["name"], "-c", "agent", "--",
                                  "python", "-c", FETCH_DEBUG_PODS)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    return {f"{p['namespace']}/{p['name']}": p for p in report["pods"]}


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
    pod = agent_pod(node_cluster)
    result = node_cluster.cluster.kubectl("exec", "-n", AGENT_NS, pod["metadata"]["name"], "-c", "agent", "--",
                                          "python", "-c", INSIDE)
    assert result.returncode == 0, result.stderr
    return {**json.loads(result.stdout), "pod": pod}


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


def _log_follower(node: Node, pod: str):
    import subprocess

    return subprocess.Popen([str(node.cluster._bins["kubectl"]), f"--kubeconfig={node.cluster.admin_kubeconfig}",
                             "logs", "-f", "-n", AGENT_NS, pod, "-c", "agent", "--tail=0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


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


def test_rollout_restart_honours_max_unavailable(node_cluster: Node, rollout: dict) -> None:
    node = node_cluster
    old = agent_pod(node)
    result = node.cluster.kubectl("rollout", "restart", "daemonset/node-requests-agent", "-n", AGENT_NS)
    assert result.returncode == 0, result.stderr
    unavailable = []

    def done() -> bool:
        ds = node.cluster.api("GET", f"/apis/apps/v1/namespaces/{AGENT_NS}/daemonsets/node-requests-agent")
        unavailable.append(ds["status"].get("numberUnavailable", 0))
        pods = node.pods(AGENT_NS, AGENT_SELECTOR)
        return (len(pods) == 1 and pods[0]["metadata"]["uid"] != old["metadata"]["uid"] and ready(pods[0])
                and ds["status"].get("updatedNumberScheduled") == 1)

    wait_until(done, 120, interval=0.5, message="rollout restart finished")
    ds = node.cluster.api("GET", f"/apis/apps/v1/namespaces/{AGENT_NS}/daemonsets/node-requests-agent")
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "10%"
    assert max(unavailable) <= 1, unavailable  # 10% of one node rounds up to one
    print(f"\nnode figures: {json.dumps({**node.timings, **FIGURES}, indent=1)}")
