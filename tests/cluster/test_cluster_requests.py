"""The agent against real kube-apiserver and kube-scheduler builds of 1.36.3 and 1.37.2.

* Run against each API server, the agent reads /version and picks that release's rules by itself.
* For ordinary pods its values equal the scheduler's own ``kube_pod_resource_request`` (/metrics/resources).
* For pods on which the releases disagree (a resize in progress, Infeasible, a crash-looping container with
  only allocatedResources, a regular init container's status, the pod's own status totals, pod-level requests
  with an Infeasible resize) the scheduler's fit
  accounting is read with probe pods on a node of their own: a probe asking for exactly the allocatable minus
  the agent's value binds, one asking 1m more stays Pending (Unschedulable), and so does a probe sized by the
  other release's arithmetic whenever that arithmetic counts less. So the scheduler counts exactly what the agent
  reports, which is not what the other release would count.

Nodes are KWOK's (testkit/kwok.py), which reports ordinary pods Running with the status of a kubelet
that has no in-place resize to report. The divergence pods are custom-status pods: the test writes their status
(allocatedResources, status.resources, PodResizePending, a crash loop, an init container's resources) as a
kubelet would, and resizes through the ``resize`` subresource, leaving status behind as a resize in progress does.
"""

from __future__ import annotations

import uuid
from fractions import Fraction

import pytest

from agent.run.agent import Agent
from agent.model.quantity import NANO
from agent.model.rules import RULES_1_36, RULES_1_37
from components.kubernetes import etcd_bin, kubernetes_bin
from testkit.agents import agent_config
from testkit.cluster import ApiError, Cluster, rfc3339
from testkit.kwok import Kwok, custom_status, set_custom_status, wait_running
from testkit.waiting import wait_until

pytestmark = pytest.mark.cluster

RULES = {"1.36.3": RULES_1_36, "1.37.2": RULES_1_37}
NAMESPACE = "requests"
NODE_CPU = "8"
IMAGE = "registry.invalid/app:1"


@pytest.fixture(scope="module", params=sorted(RULES), ids=lambda v: f"k8s-{v}")
def nodes(request, tmp_path_factory) -> Kwok:
    """KWOK on a control plane of each release; the cluster is ``.cluster``."""
    version = request.param
    kubernetes_bin(version)
    etcd_bin()
    cluster = Cluster(tmp_path_factory.mktemp(f"cluster-{version}"), version=version)
    try:  # stopped on every path: a start that fails half-way must not leave etcd or an API server running
        try:
            cluster.start()
        except RuntimeError as error:
            pytest.fail(str(error), pytrace=False)
        cluster.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        if not cluster.has_controller_manager:
            # The controller-manager's job, done by hand where the build has none: pods need their ServiceAccount.
            cluster.api("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
                        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
        wait_until(lambda: cluster.exists(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"), 60,
                   interval=0.25, message="default ServiceAccount")
        with Kwok(cluster, workdir=cluster.workdir / "kwok") as kwok:
            yield kwok
        if request.session.testsfailed:
            print(f"\ncontrol-plane {version} logs:\n{cluster.logs_tail()}")
    finally:
        cluster.stop()


@pytest.fixture
def control_plane(nodes: Kwok) -> Cluster:
    return nodes.cluster


@pytest.fixture
def agent_on(control_plane):
    """An agent (the real pipeline, in-process) for one node of the cluster; stopped after the test."""
    agents: list[Agent] = []

    def start(node: str) -> Agent:
        agent = Agent(agent_config(node_name=node, kubeconfig=str(control_plane.admin_kubeconfig), exporter="none",
                                   read_timeout=30.0, watch_timeout=(60, 120), export_interval=5.0))
        agents.append(agent.start())
        return agent

    yield start
    for agent in agents:
        agent.shutdown(final_export=False)


def new_node(nodes: Kwok, cpu: str = NODE_CPU, memory: str = "32Gi") -> str:
    name = f"n-{uuid.uuid4().hex[:8]}"
    cluster = nodes.cluster
    nodes.add_node(name, cpu=cpu, memory=memory)
    if not cluster.has_controller_manager:
        # Admission taints a new Node not-ready; the node lifecycle controller lifts it once the Node is Ready.
        # Without a controller-manager, the test does that controller's one step.
        cluster.api("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}})
    return name


def container(name: str, cpu: str | None = None, memory: str | None = None, sidecar: bool = False) -> dict:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    c = {"name": name, "image": IMAGE, "resources": {"requests": requests} if requests else {}}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def manifest(name: str, node: str, containers: list[dict], init: list[dict] | None = None, **spec) -> dict:
    """Pinned to ``node`` by selector, so the real scheduler binds it (and counts it there)."""
    body = {"containers": containers, "nodeSelector": {"kubernetes.io/hostname": node},
            "automountServiceAccountToken": False, **spec}
    if init:
        body["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def held(*args, **spec) -> dict:
    """A ``manifest`` KWOK leaves alone: the divergence set-ups write the resize status a kubelet would."""
    return custom_status(manifest(*args, **spec))


def pod_path(name: str) -> str:
    return f"/api/v1/namespaces/{NAMESPACE}/pods/{name}"


def create_bound(cluster: Cluster, body: dict) -> dict:
    """``body`` created and bound by the scheduler (a custom-status pod stays Pending until the test writes)."""
    cluster.api("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body)
    name = body["metadata"]["name"]
    return wait_until(lambda: (p := cluster.api("GET", pod_path(name)))["spec"].get("nodeName") and p, 60, interval=0.25,
                      message=f"{name} bound by kube-scheduler")


def cores(value: int) -> Fraction:
    return Fraction(value, NANO)


def value_of(agent: Agent, name: str):
    return next((v for v in agent.state.pods() if v.name == name), None)


# -- the rules come from the API server ----------------------------------------------------

def test_the_agent_picks_the_api_servers_release_by_itself(nodes, control_plane, agent_on):
    agent = agent_on(new_node(nodes))
    expected = RULES[control_plane.release]
    wait_until(lambda: agent.state.kubernetes.source == "apiserver", 30, message="the agent read /version")
    info = agent.state.kubernetes
    assert (info.server_version, info.rules, info.warning) == (f"v{control_plane.release}", expected, None)


# -- ordinary pods: the scheduler's /metrics/resources is the oracle -----------------------

def test_ordinary_pods_equal_the_schedulers_resource_metrics(nodes, control_plane, agent_on):
    cluster = control_plane
    node = new_node(nodes, cpu="32", memory="128Gi")
    agent = agent_on(node)
    runtime_class = f"kata-{uuid.uuid4().hex[:6]}"
    cluster.api("POST", "/apis/node.k8s.io/v1/runtimeclasses", {
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": runtime_class},
        "handler": "kata", "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}}})
    suffix = uuid.uuid4().hex[:6]
    pods = [
        manifest(f"web-{suffix}", node, [container("a", "250m", "64Mi"), container("b", "100m", "128Mi")]),
        manifest(f"sidecars-{suffix}", node, [container("app", "1", "256Mi")],
                 init=[container("i1", "5"), container("s1", "1", sidecar=True), container("s2", "2", sidecar=True),
                       container("i2", "5", "1Gi"), container("s3", "3", sidecar=True)]),
        manifest(f"overhead-{suffix}", node, [container("a", "500m", "1Gi")], runtimeClassName=runtime_class),
        manifest(f"pod-level-{suffix}", node, [container("a", "500m", "256Mi"), container("b", "250m")],
                 resources={"requests": {"cpu": "1500m", "memory": "1Gi"}}),
        manifest(f"bare-{suffix}", node, [container("a")]),
    ]
    for body in pods:
        create_bound(cluster, body)
        wait_running(cluster, NAMESPACE, body["metadata"]["name"])  # by KWOK: no resize status, as before any resize
    names = {p["metadata"]["name"] for p in pods}

    def scheduler_view() -> dict[str, dict[str, float]]:
        view: dict[str, dict[str, float]] = {}
        for s in cluster.scheduler_resource_metrics():
            if s["namespace"] == NAMESPACE and s["pod"] in names:
                view.setdefault(s["pod"], {})[s["resource"]] = s["value"]
        return view if set(view) == names - {f"bare-{suffix}"} else {}

    view = wait_until(scheduler_view, 60, interval=0.25, message="kube_pod_resource_request for every pod")
    wait_until(lambda: {v.name for v in agent.state.pods()} == names, 30, message="the agent sees every pod")
    for name in names:
        v = value_of(agent, name)
        assert v.source == "pod_requests" and v.rules is RULES[cluster.release]
        sched = view.get(name, {})  # a pod requesting nothing has no series
        # The scheduler prints floats it summed itself (0.25 + 0.1 = 0.35000000000000003): equal to the float's precision.
        assert (v.cpu / NANO, v.memory / NANO) == pytest.approx((sched.get("cpu", 0.0), sched.get("memory", 0.0)),
                                                                rel=1e-12, abs=0), name
    assert view[f"sidecars-{suffix}"]["cpu"] == 8.0 and view[f"overhead-{suffix}"]["cpu"] == 0.75


# -- where the releases disagree: the scheduler's fit accounting, read with probe pods ------

def resize(cluster: Cluster, name: str, cpu: dict[str, str]) -> None:
    """In-place resize through the ``resize`` subresource (spec changes; status stays until a kubelet acts)."""
    cluster.api("PATCH", pod_path(name) + "/resize",
                {"spec": {"containers": [{"name": c, "resources": {"requests": {"cpu": v}}} for c, v in cpu.items()]}},
                content_type="application/strategic-merge-patch+json")


def status_entry(pod: dict, name: str, allocated: dict | None, actual: dict | None) -> dict:
    entry = {"name": name, "image": IMAGE, "imageID": f"sha256:{'0' * 64}", "containerID": f"containerd://{name}",
             "ready": actual is not None, "started": actual is not None, "restartCount": 0,
             "state": {"running": {"startedAt": pod["metadata"]["creationTimestamp"]}} if actual is not None
             else {"waiting": {"reason": "CrashLoopBackOff"}}}
    if allocated is not None:
        entry["allocatedResources"] = allocated
    if actual is not None:
        entry["resources"] = {"requests": actual}
    return entry


def resize_in_progress(cluster: Cluster, node: str, name: str) -> None:
    """c1 spec 2 / allocated 1 / actual 1, c2 spec 1 / allocated 2 / actual 2 (the issue's example)."""
    pod = create_bound(cluster, held(name, node, [container("c1", "1", "64Mi"), container("c2", "2", "64Mi")]))
    one, two = {"cpu": "1", "memory": "64Mi"}, {"cpu": "2", "memory": "64Mi"}
    set_custom_status(cluster, NAMESPACE, name, "Running", [status_entry(pod, "c1", one, one), status_entry(pod, "c2", two, two)])
    resize(cluster, name, {"c1": "2", "c2": "1"})


def infeasible(cluster: Cluster, node: str, name: str) -> None:
    """c1 resized 2 -> 4 and found Infeasible; c2 (1 cpu) has no status yet."""
    pod = create_bound(cluster, held(name, node, [container("c1", "2", "64Mi"), container("c2", "1", "64Mi")]))
    two = {"cpu": "2", "memory": "64Mi"}
    resize(cluster, name, {"c1": "4"})
    set_custom_status(cluster, NAMESPACE, name, "Running", [status_entry(pod, "c1", two, two)])
    mark_infeasible(cluster, name)


def mark_infeasible(cluster: Cluster, name: str) -> None:
    """The PodResizePending condition a kubelet sets when the node can never fit the resize."""
    pod = cluster.api("GET", pod_path(name))
    conditions = pod["status"]["conditions"] + [{"type": "PodResizePending", "status": "True", "reason": "Infeasible",
                                                  "message": "Node didn't have enough capacity", "lastTransitionTime": rfc3339()}]
    cluster.api("PATCH", pod_path(name) + "/status", {"status": {"conditions": conditions}})


def crash_loop(cluster: Cluster, node: str, name: str) -> None:
    """app resized 2 -> 1 while crash-looping: its status has allocatedResources (2) and no resources."""
    pod = create_bound(cluster, held(name, node, [container("app", "2", "64Mi"), container("helper", "500m", "64Mi")]))
    set_custom_status(cluster, NAMESPACE, name, "Running", [
        status_entry(pod, "app", {"cpu": "2", "memory": "64Mi"}, None),
        status_entry(pod, "helper", {"cpu": "500m", "memory": "64Mi"}, {"cpu": "500m", "memory": "64Mi"})])
    resize(cluster, name, {"app": "1"})


def init_status(cluster: Cluster, node: str, name: str) -> None:
    """A regular init container whose status reports 3 cpu against a spec of 1."""
    pod = create_bound(cluster, held(name, node, [container("app", "100m", "64Mi")], init=[container("init", "1")]))
    three, tenth = {"cpu": "3"}, {"cpu": "100m", "memory": "64Mi"}
    init = status_entry(pod, "init", three, three)
    init["state"] = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": pod["metadata"]["creationTimestamp"],
                                    "finishedAt": pod["metadata"]["creationTimestamp"]}}
    set_custom_status(cluster, NAMESPACE, name, "Running", [status_entry(pod, "app", tenth, tenth)],
                           initContainerStatuses=[init])


def pod_status_totals(cluster: Cluster, node: str, name: str) -> None:
    """The pod reports its own totals (in-place pod-level resize): allocated 5, actual 2, over containers of 1 + 1."""
    pod = create_bound(cluster, held(name, node, [container("a", "1", "64Mi"), container("b", "1", "64Mi")]))
    one = {"cpu": "1", "memory": "64Mi"}
    set_custom_status(cluster, NAMESPACE, name, "Running", [status_entry(pod, "a", one, one), status_entry(pod, "b", one, one)],
                           allocatedResources={"cpu": "5", "memory": "128Mi"},
                           resources={"requests": {"cpu": "2", "memory": "128Mi"}})


def pod_level_infeasible(cluster: Cluster, node: str, name: str) -> None:
    """Pod-level requests (cpu 4) whose pod status reports memory only, resize Infeasible: v0.36 reads the missing
    cpu as 0, v0.37 keeps the container aggregate (1)."""
    pod = create_bound(cluster, held(name, node, [container("c1", "1", "64Mi")],
                                         resources={"requests": {"cpu": "4", "memory": "1Gi"}}))
    one = {"cpu": "1", "memory": "64Mi"}
    set_custom_status(cluster, NAMESPACE, name, "Running", [status_entry(pod, "c1", one, one)],
                           resources={"requests": {"memory": "1Gi"}})
    mark_infeasible(cluster, name)


DIVERGENCES = {  # name: (set-up, cpu cores counted by 1.36, by 1.37)
    "resize-in-progress": (resize_in_progress, Fraction(4), Fraction(3)),
    "infeasible": (infeasible, Fraction(3), Fraction(2)),
    "crash-loop": (crash_loop, Fraction(3, 2), Fraction(5, 2)),
    "init-status": (init_status, Fraction(1), Fraction(3)),
    "pod-status-totals": (pod_status_totals, Fraction(2), Fraction(5)),
    "pod-level-infeasible": (pod_level_infeasible, Fraction(0), Fraction(1)),
}


def millicores(value: Fraction) -> str:
    assert value * 1000 == int(value * 1000)
    return f"{int(value * 1000)}m"


def probe(cluster: Cluster, node: str, cpu: Fraction) -> str:
    """Create a probe asking for ``cpu`` on ``node``; return "bound" or "unschedulable" as the scheduler decides."""
    name = f"probe-{uuid.uuid4().hex[:8]}"
    cluster.api("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", manifest(name, node, [container("p", millicores(cpu))]))

    def decided() -> str | None:
        pod = cluster.api("GET", pod_path(name))
        if pod["spec"].get("nodeName"):
            return "bound"
        for c in pod.get("status", {}).get("conditions", []):
            if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable":
                return "unschedulable"
        return None

    verdict = wait_until(decided, 60, interval=0.2, message=f"the scheduler's verdict on {name} ({cpu} cpu)")
    if verdict == "unschedulable":
        cluster.api("DELETE", pod_path(name))  # never bound: gone at once, and out of the way of the next probe
        wait_until(lambda: not cluster.exists(pod_path(name)), 30, interval=0.25, message=f"{name} deleted")
    return verdict


@pytest.mark.parametrize("case", sorted(DIVERGENCES))
def test_the_schedulers_accounting_equals_the_agents_value(nodes, control_plane, agent_on, case):
    cluster = control_plane
    set_up, v136, v137 = DIVERGENCES[case]
    own, other = (v136, v137) if cluster.release.startswith("1.36") else (v137, v136)
    node = new_node(nodes)
    agent = agent_on(node)
    name = f"{case}-{uuid.uuid4().hex[:6]}"
    set_up(cluster, node, name)

    # The agent's value for the pod's final state (it re-evaluates on every change of the pod).
    wait_until(lambda: (v := value_of(agent, name)) is not None and cores(v.cpu) == own, 30,
               message=f"agent value {own} cpu for {name} (got {getattr(value_of(agent, name), 'cpu', None)})")
    assert agent.state.kubernetes.rules is RULES[cluster.release]
    remaining = Fraction(int(NODE_CPU)) - own

    assert probe(cluster, node, remaining + Fraction(1, 1000)) == "unschedulable"
    if other < own:  # the other release's arithmetic would leave more room: the scheduler does not
        assert probe(cluster, node, Fraction(int(NODE_CPU)) - other) == "unschedulable"
    assert probe(cluster, node, remaining) == "bound"


def test_the_api_server_keeps_the_resize_as_written(nodes, control_plane):
    """Guards the set-up: the resize subresource changed spec and left status as the test wrote it (KWOK did not
    touch the custom-status pod)."""
    cluster = control_plane
    node = new_node(nodes)
    name = f"guard-{uuid.uuid4().hex[:6]}"
    resize_in_progress(cluster, node, name)
    pod = cluster.api("GET", pod_path(name))
    spec = {c["name"]: c["resources"]["requests"]["cpu"] for c in pod["spec"]["containers"]}
    status = {c["name"]: (c["allocatedResources"]["cpu"], c["resources"]["requests"]["cpu"])
              for c in pod["status"]["containerStatuses"]}
    assert spec == {"c1": "2", "c2": "1"} and status == {"c1": ("1", "1"), "c2": ("2", "2")}
    with pytest.raises(ApiError):  # spec resources are immutable outside the resize subresource
        cluster.api("PATCH", pod_path(name), {"spec": {"containers": [{"name": "c1", "resources": {"requests": {"cpu": "3"}}}]}},
                    content_type="application/strategic-merge-patch+json")
