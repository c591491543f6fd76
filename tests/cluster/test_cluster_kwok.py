"""KWOK's simulated nodes do what the cluster tests lean on (testkit/kwok.py).

If one of these fails, the agent tests on KWOK nodes would fail for reasons that have nothing to do with the
agent: nodes going Unknown, pods never Running, deleted pods never gone, or KWOK overwriting status a test wrote.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from agent.model.quantity import NANO
from agent.run.agent import Agent
from testkit.agents import agent_config
from testkit.cluster import NODE_MONITOR_GRACE_SECONDS, Cluster
from testkit.factory import container, for_create, pod
from testkit.kwok import NUDGE_ANNOTATION, Kwok, custom_status, ready_condition, set_custom_status, wait_running
from testkit.waiting import wait_until

pytestmark = pytest.mark.cluster

NODE = "kwok-a"


@pytest.fixture(scope="module")
def node(kwok: Kwok) -> str:
    kwok.add_node(NODE, cpu="8", memory="16Gi")
    kwok.wait_ready([NODE])
    return NODE


@pytest.fixture(scope="module")
def agent(cluster: Cluster, node: str):
    """The agent's pipeline in-process for the KWOK node (what it reads is the subject, not how it is started)."""
    running = Agent(agent_config(node_name=node, kubeconfig=str(cluster.admin_kubeconfig), exporter="none",
                                 read_timeout=30.0, watch_timeout=(60, 120), export_interval=5.0)).start()
    yield running
    running.shutdown(final_export=False)


def lease_age(cluster: Cluster, name: str) -> float:
    lease = cluster.api("GET", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}")
    renewed = dt.datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
    return (dt.datetime.now(dt.timezone.utc) - renewed).total_seconds()


def test_kwok_keeps_its_node_ready_past_the_grace_period_while_a_stopped_kwoks_node_goes_unknown(
        cluster: Cluster, kwok: Kwok, node: str, tmp_path) -> None:
    """The node lifecycle controller is really judging KWOK's Leases: the node of a second KWOK goes Unknown after
    the shortened grace period once that KWOK stopped (a kubelet that died), while the node of the running one is
    still Ready and untainted with a fresh Lease."""
    with Kwok(cluster, workdir=tmp_path / "kwok", group="doomed") as doomed:
        doomed.add_node("kwok-doomed", cpu="1", memory="1Gi")
        doomed.wait_ready(["kwok-doomed"])
    started = time.monotonic()
    try:
        wait_until(lambda: ready_condition(cluster.api("GET", "/api/v1/nodes/kwok-doomed")) == "Unknown",
                   NODE_MONITOR_GRACE_SECONDS + 60, interval=1.0,
                   message="the stopped KWOK's node marked Unknown by the node lifecycle controller")
        assert time.monotonic() - started >= NODE_MONITOR_GRACE_SECONDS - 10  # the grace period, not a failed start
        managed = cluster.api("GET", f"/api/v1/nodes/{node}")
        assert ready_condition(managed) == "True" and not managed["spec"].get("taints"), managed["status"]
        # KWOK renews every lease_seconds / 4 (5 s); three periods leave room for a busy machine.
        assert lease_age(cluster, node) < 3 * kwok.lease_seconds / 4
        assert lease_age(cluster, "kwok-doomed") > NODE_MONITOR_GRACE_SECONDS
    finally:
        cluster.api("DELETE", "/api/v1/nodes/kwok-doomed")


def test_a_pod_with_init_containers_and_a_sidecar_runs_with_the_statuses_the_agent_reads(
        cluster: Cluster, node: str, agent: Agent) -> None:
    namespace = cluster.create_namespace("kwok")
    manifest = pod("web", containers=[container("app", "250m", "64Mi")], init_containers=[
        container("proxy", "100m", "32Mi", restart_policy="Always"), container("migrate", "1500m", "128Mi")])
    cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", for_create(manifest, nodeName=node))
    status = wait_running(cluster, namespace, "web")["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]}.items() >= {"Ready": "True", "Initialized": "True"}.items()
    init = {c["name"]: c["state"] for c in status["initContainerStatuses"]}
    assert init["migrate"]["terminated"]["reason"] == "Completed" and "running" in init["proxy"]
    assert [(c["name"], list(c["state"])) for c in status["containerStatuses"]] == [("app", ["running"])]
    assert status["hostIP"] == "127.0.0.1" and status["podIP"]

    def scheduler_cpu() -> float | None:
        return next((s["value"] for s in cluster.scheduler_resource_metrics()
                     if (s["namespace"], s["pod"], s["resource"]) == (namespace, "web", "cpu")), None)

    expected = wait_until(scheduler_cpu, 30, interval=0.25, message="kube_pod_resource_request for web")
    assert expected == pytest.approx(1.6)  # migrate's 1500m on top of the sidecar started before it
    value = wait_until(lambda: next((v for v in agent.state.pods() if v.name == "web" and v.phase == "Running"),
                                    None), 30, message="the agent sees web Running")
    assert value.cpu / NANO == pytest.approx(expected, rel=1e-12)


def test_a_deleted_pod_is_removed_by_kwok_and_leaves_the_agents_view(cluster: Cluster, node: str,
                                                                      agent: Agent) -> None:
    namespace = cluster.create_namespace("kwok")
    cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods",
                for_create(pod("short", containers=[container("app", "100m", "64Mi")]), nodeName=node))
    wait_running(cluster, namespace, "short")
    wait_until(lambda: any(v.name == "short" for v in agent.state.pods()), 30, message="the agent sees short")
    path = f"/api/v1/namespaces/{namespace}/pods/short"
    cluster.api("DELETE", path)  # graceful (30 s): only the node's final delete removes a bound pod
    wait_until(lambda: not cluster.exists(path), 30, interval=0.25, message="KWOK's pod-delete stage removed short")
    wait_until(lambda: not any(v.name == "short" for v in agent.state.pods()), 30,
               message="short gone from the agent's view")


def test_kwok_leaves_a_custom_status_pod_to_the_test(cluster: Cluster, node: str) -> None:
    namespace = cluster.create_namespace("kwok")
    cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", custom_status(
        for_create(pod("held", containers=[container("app", "100m", "64Mi")]), nodeName=node)))
    cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods",
                for_create(pod("managed", containers=[container("app", "100m", "64Mi")]), nodeName=node))
    wait_running(cluster, namespace, "managed")  # KWOK has acted on this node's pods since
    path = f"/api/v1/namespaces/{namespace}/pods/held"
    assert cluster.api("GET", path)["status"]["phase"] == "Pending"
    crashed = [{"name": "app", "image": "example/app:1", "ready": False, "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]
    set_custom_status(cluster, namespace, "held", "Running", crashed)
    time.sleep(2)  # KWOK would have rewritten it by now (it made "managed" Running within this time)
    assert cluster.api("GET", path)["status"]["containerStatuses"][0]["state"] == crashed[0]["state"]
    with pytest.raises(ValueError, match="KWOK writes its status"):
        set_custom_status(cluster, namespace, "managed", "Running", crashed)


def test_a_pod_kwok_never_starts_is_nudged_and_fails_with_its_story(cluster: Cluster, node: str) -> None:
    """wait_running's remedy for KWOK's lost event (testkit/kwok.py): a pod still Pending gets the test's own
    annotation, once per interval; one that stays Pending anyway (here: a custom-status pod KWOK never touches)
    fails with its phase, node and events, not a bare timeout."""
    namespace = cluster.create_namespace("kwok")
    cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", custom_status(
        for_create(pod("never", containers=[container("app", "100m", "64Mi")]), nodeName=node)))
    with pytest.raises(AssertionError, match=rf"after [23] nudges: phase Pending on {node}, conditions"):
        wait_running(cluster, namespace, "never", timeout=3.5, nudge_after=1.0)
    annotations = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods/never")["metadata"]["annotations"]
    assert annotations[NUDGE_ANNOTATION] in {"2", "3"}
