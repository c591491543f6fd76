"""The cluster-autoscaler's verdict on a KWOK node of the real control plane, followed by a running agent.

On one node: a pod of every kind the autoscaler's drain rules tell apart (no controller, a custom controller, a
kube-system pod no PDB covers, a hostPath volume, a disk emptyDir, one in memory, one named in
safe-to-evict-local-volumes, safe-to-evict "false" and "true", a DaemonSet's pod, a mirror pod), all owned by real
controllers where they have one (the garbage collector deletes a pod whose owner does not exist). Then a PDB that
allows no disruption, the same PDB allowing one, a PDB for the kube-system pod, and the Node annotated
scale-down-disabled: the agent's verdict follows each change. The PDBs' status.disruptionsAllowed is written by
kube-controller-manager's disruption controller (the suite's cluster runs it, testkit/cluster.py) from the
pods' readiness, which KWOK reports: nothing here writes a PDB's status.

The agent runs in-process (its pipeline is the subject) with its settings resolved from the environment the
DaemonSet sets (NRA_AUTOSCALER_ARGS), and the verdict is read from its state's snapshot, as every exporter reads it.
Not here: a malformed PDB (the API server refuses an unknown selector operator; tests/pipeline/test_pdbs.py covers
it), and the Prometheus leg (tests/collector/).
"""

from __future__ import annotations

import time

import pytest

from agent.config import from_sources
from agent.model.quantity import NANO
from agent.model.scale_down import NO_NODE, NOT_UNDERUTILIZED, SCALE_DOWN_DISABLED, UNDERUTILIZED, Verdict
from agent.run.agent import Agent
from testkit.cluster import Cluster
from testkit.factory import container
from testkit.kwok import Kwok
from testkit.waiting import wait_until

pytestmark = pytest.mark.cluster

NODE = "kwok-verdict"
SYSTEM = "kube-system"
APP = container("app", "100m", "128Mi")
DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
SYSTEM_RS = "nra-verdict-system"
#: The ReplicaSets of the test; their pods are named <ReplicaSet>-<suffix>.
REPLICA_SETS = (SYSTEM_RS, "rs-hostpath", "rs-scratch", "rs-memory", "rs-named", "rs-pinned", "rs-guarded")


@pytest.fixture(scope="module")
def node(kwok: Kwok) -> str:
    kwok.add_node(NODE, cpu="8", memory="16Gi")
    kwok.wait_ready([NODE])
    return NODE


def start_agent(cluster: Cluster, env: dict[str, str]) -> Agent:
    """The agent for the node, configured as the DaemonSet configures it: flags none, settings from ``env``."""
    flags = {"node_name": NODE, "kubeconfig": str(cluster.admin_kubeconfig), "exporter": "none",
             "debug_address": "off", "procfs": "off", "read_timeout": 30.0}
    return Agent(from_sources(flags, env)).start()


@pytest.fixture(scope="module")
def agent(cluster: Cluster, node: str):
    # The autoscaler's args as copied from its Deployment: its other flags are ignored.
    running = start_agent(cluster, {"NRA_AUTOSCALER_ARGS": "--cloud-provider=clusterapi "
                                    "--scale-down-utilization-threshold=0.6 --ignore-daemonsets-utilization=true",
                                    "NRA_AUTOSCALER_RELEASE": "1.36"})
    yield running
    running.shutdown(final_export=False)


@pytest.fixture(scope="module")
def namespace(cluster: Cluster, node: str):
    name = cluster.create_namespace("verdict")
    yield name
    cluster.api("DELETE", f"/api/v1/namespaces/{name}")
    for path in (f"/apis/apps/v1/namespaces/{SYSTEM}/replicasets/{SYSTEM_RS}",
                 f"/apis/policy/v1/namespaces/{SYSTEM}/poddisruptionbudgets/{SYSTEM_RS}"):
        if cluster.exists(path):
            cluster.api("DELETE", path)


def template(app: str, annotations: dict[str, str] | None = None, volumes: list[dict] | None = None,
             bound: bool = True) -> dict:
    """A pod template labelled ``app``; ``bound``: to the node by name (no scheduler needed)."""
    spec: dict = {"containers": [dict(APP)], "terminationGracePeriodSeconds": 0}
    if bound:
        spec["nodeName"] = NODE
    if volumes:
        spec["volumes"] = volumes
        spec["containers"][0]["volumeMounts"] = [{"name": v["name"], "mountPath": f"/mnt/{v['name']}"} for v in volumes]
    meta: dict = {"labels": {"app": app}}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec}


def replica_set(cluster: Cluster, namespace: str, name: str, **kw) -> None:
    body = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": template(name, **kw)}}
    cluster.api("POST", f"/apis/apps/v1/namespaces/{namespace}/replicasets", body)


def bare_pod(cluster: Cluster, namespace: str, name: str, owner: dict | None = None, **kw) -> None:
    t = template(name, **kw)
    meta = {"name": name, **t["metadata"]}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods",
                {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": t["spec"]})


def pdb_body(name: str, app: str, min_available: int) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}}}


def pdb_status(cluster: Cluster, namespace: str, name: str, allowed: int) -> dict:
    """The PDB once the disruption controller has judged its current spec: ``allowed`` disruptions."""
    path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}"

    def judged() -> dict | None:
        pdb = cluster.api("GET", path)
        status = pdb.get("status", {})
        current = status.get("observedGeneration") == pdb["metadata"]["generation"]
        return pdb if current and status.get("disruptionsAllowed") == allowed else None

    return wait_until(judged, 90, interval=0.5, message=f"{namespace}/{name} judged by the disruption controller "
                                                        f"to allow {allowed}")


def verdict(agent: Agent) -> Verdict:
    return agent.state.snapshot().verdict(time.time())


def owner_name(pod: str) -> str:
    """A ReplicaSet's pod by its ReplicaSet's name, any other pod by its own."""
    return next((rs for rs in REPLICA_SETS if pod.startswith(f"{rs}-")), pod)


def blockers(agent: Agent) -> dict[str, str]:
    """Blocking pod (by owner_name) -> reason."""
    return {owner_name(b.name): b.reason for b in verdict(agent).blockers}


def follows(agent: Agent, expected: dict[str, str], what: str) -> Verdict:
    """The agent's verdict once its blockers are ``expected`` and it has read its Node: the blockers come from the pods
    alone, so a new agent can show them while its Node is still unread (state ``unknown``, as documented); waiting
    on the blockers only read that state once in a cold run."""
    def settled() -> bool:
        return blockers(agent) == expected and verdict(agent).state != NO_NODE

    try:
        wait_until(settled, 60, interval=0.25, message=f"{what}: blockers {expected}, its Node read")
    except AssertionError as error:
        raise AssertionError(f"{error}; last seen: {blockers(agent)}, state {verdict(agent).state}") from None
    return verdict(agent)


#: The blockers once every pod is Running and no PDB exists: the autoscaler's first rule that holds, per pod.
INITIAL = {"bare": "not_replicated", "custom": "not_replicated", SYSTEM_RS: "unmovable_kube_system",
           "rs-hostpath": "local_storage", "rs-scratch": "local_storage", "rs-pinned": "not_safe_to_evict"}


@pytest.fixture(scope="module")
def populated(cluster: Cluster, namespace: str, agent: Agent) -> str:
    owner = cluster.api("POST", f"/api/v1/namespaces/{namespace}/configmaps",
                        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "custom-controller"}})
    bare_pod(cluster, namespace, "bare")
    bare_pod(cluster, namespace, "custom", owner={"apiVersion": "v1", "kind": "ConfigMap", "name": "custom-controller",
                                                  "uid": owner["metadata"]["uid"], "controller": True})
    bare_pod(cluster, namespace, "free", annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"})
    # A mirror pod as the kubelet makes it for a static pod (no controller, never blocks).
    bare_pod(cluster, namespace, "static", annotations={"kubernetes.io/config.mirror": "5f2c0e9d"})
    replica_set(cluster, SYSTEM, SYSTEM_RS)
    replica_set(cluster, namespace, "rs-hostpath", volumes=[{"name": "host", "hostPath": {"path": "/var/tmp"}}])
    replica_set(cluster, namespace, "rs-scratch", volumes=[{"name": "scratch", "emptyDir": {}}])
    replica_set(cluster, namespace, "rs-memory", volumes=[{"name": "scratch", "emptyDir": {"medium": "Memory"}}])
    replica_set(cluster, namespace, "rs-named", volumes=[{"name": "scratch", "emptyDir": {}}],
                annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes": "scratch"})
    replica_set(cluster, namespace, "rs-pinned", annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"})
    replica_set(cluster, namespace, "rs-guarded")
    daemon = template("ds", bound=False)
    daemon["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    cluster.api("POST", f"/apis/apps/v1/namespaces/{namespace}/daemonsets", {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds"},
        "spec": {"selector": {"matchLabels": {"app": "ds"}}, "template": daemon}})

    wanted = {"bare", "custom", "free", "static", "ds", *REPLICA_SETS}
    seen: dict[str, str] = {}

    def running() -> bool:
        pods = cluster.api("GET", f"/api/v1/pods?fieldSelector=spec.nodeName={NODE}")["items"]
        seen.clear()
        seen.update({owner_name(p["metadata"]["name"]) if not p["metadata"]["name"].startswith("ds-") else "ds":
                     p.get("status", {}).get("phase", "") for p in pods})
        return seen.keys() == wanted and set(seen.values()) == {"Running"}

    try:
        wait_until(running, 120, interval=0.5, message=f"{len(wanted)} pods on the node, every one Running (KWOK)")
    except AssertionError as error:
        raise AssertionError(f"{error}; last seen: {seen}") from None
    return namespace


def test_every_kind_of_pod_is_judged_by_the_autoscalers_rules(cluster: Cluster, agent: Agent, populated: str) -> None:
    seen = follows(agent, INITIAL, "every pod Running, no PDB")
    assert seen.pdbs_known is True and seen.release == "1.36" and seen.threshold == 0.6
    assert seen.state == UNDERUTILIZED
    # Utilization as the autoscaler sums it: the pods' requests over allocatable, the DaemonSet's pod taken out of
    # both (--ignore-daemonsets-utilization=true, from NRA_AUTOSCALER_ARGS).
    pods = [v for v in agent.state.pods() if v.reported]
    others = [v for v in pods if v.namespace not in (populated, SYSTEM)]  # pods no test of this module made
    daemon = [v for v in pods if v.name.startswith("ds-")]
    assert len(daemon) == 1
    cpu = sum(v.cpu for v in pods if v not in daemon) / (8 * NANO - daemon[0].cpu)
    assert seen.utilization.cpu == pytest.approx(cpu, rel=1e-9) and not others
    assert seen.utilization.resource == "cpu" and seen.utilization.value == seen.utilization.cpu


def test_a_pdb_allowing_no_disruption_blocks_and_one_allowing_one_does_not(cluster: Cluster, agent: Agent,
                                                                          populated: str) -> None:
    follows(agent, INITIAL, "before any PDB")
    cluster.api("POST", f"/apis/policy/v1/namespaces/{populated}/poddisruptionbudgets",
                pdb_body("guarded", "rs-guarded", 1))
    pdb_status(cluster, populated, "guarded", 0)
    follows(agent, {**INITIAL, "rs-guarded": "not_enough_pdb"}, "the PDB allows 0 disruptions")
    cluster.api("PATCH", f"/apis/policy/v1/namespaces/{populated}/poddisruptionbudgets/guarded",
                {"spec": {"minAvailable": 0}})
    pdb_status(cluster, populated, "guarded", 1)
    follows(agent, INITIAL, "the PDB allows 1 disruption")
    # A PDB for the kube-system pod, allowing a disruption: it no longer blocks.
    cluster.api("POST", f"/apis/policy/v1/namespaces/{SYSTEM}/poddisruptionbudgets",
                pdb_body(SYSTEM_RS, SYSTEM_RS, 0))
    pdb_status(cluster, SYSTEM, SYSTEM_RS, 1)
    without_system = {k: v for k, v in INITIAL.items() if k != SYSTEM_RS}
    follows(agent, without_system, "a PDB covers the kube-system pod")
    # Deleted, the kube-system pod blocks again.
    cluster.api("DELETE", f"/apis/policy/v1/namespaces/{SYSTEM}/poddisruptionbudgets/{SYSTEM_RS}")
    follows(agent, INITIAL, "the kube-system pod's PDB deleted")


def test_the_node_annotated_scale_down_disabled_and_back(cluster: Cluster, agent: Agent, populated: str) -> None:
    follows(agent, INITIAL, "before the annotation")
    cluster.api("PATCH", f"/api/v1/nodes/{NODE}", {"metadata": {"annotations": {DISABLED: "true"}}})
    wait_until(lambda: verdict(agent).state == SCALE_DOWN_DISABLED, 30, interval=0.25,
               message="scale_down_disabled after the Node's annotation")
    assert blockers(agent) == INITIAL  # blockers are reported whatever the state
    cluster.api("PATCH", f"/api/v1/nodes/{NODE}", {"metadata": {"annotations": {DISABLED: None}}})
    wait_until(lambda: verdict(agent).state == UNDERUTILIZED, 30, interval=0.25, message="underutilized again")


def test_without_the_pdb_watch_the_kube_system_pod_blocks_unless_a_pdb_covers_it(cluster: Cluster, agent: Agent,
                                                                                 populated: str) -> None:
    """A second agent for the same node with NRA_WATCH_PDBS=false and a threshold the node is above: the verdict
    says PDBs are unknown, the kube-system pod "blocks unless a PDB covers it", and no pod is blocked by a PDB."""
    cluster.api("POST", f"/apis/policy/v1/namespaces/{populated}/poddisruptionbudgets",
                pdb_body("held", "rs-memory", 1))
    pdb_status(cluster, populated, "held", 0)
    follows(agent, {**INITIAL, "rs-memory": "not_enough_pdb"}, "the watching agent sees the PDB")
    blind = start_agent(cluster, {"NRA_WATCH_PDBS": "false", "NRA_AUTOSCALER_ARGS": "--scale-down-utilization-threshold=0.01"})
    try:
        expected = {**INITIAL, SYSTEM_RS: "kube_system_pdb_unknown"}
        seen = follows(blind, expected, "the agent without the PDB watch")
        assert seen.pdbs_known is False and seen.state == NOT_UNDERUTILIZED and seen.threshold == 0.01
        assert blind.stats.snapshot().relists.get("poddisruptionbudgets") is None
    finally:
        blind.shutdown(final_export=False)
        cluster.api("DELETE", f"/apis/policy/v1/namespaces/{populated}/poddisruptionbudgets/held")


def test_an_annotation_added_to_a_running_pod_changes_its_verdict(cluster: Cluster, agent: Agent,
                                                                  populated: str) -> None:
    """Only the pod's eviction facts change (its value does not): the verdict still reads the newer pod."""
    follows(agent, INITIAL, "before the annotation")
    (memory_pod,) = [p["metadata"]["name"] for p in cluster.api(
        "GET", f"/api/v1/namespaces/{populated}/pods?labelSelector=app=rs-memory")["items"]]
    path = f"/api/v1/namespaces/{populated}/pods/{memory_pod}"
    key = "cluster-autoscaler.kubernetes.io/safe-to-evict"
    cluster.api("PATCH", path, {"metadata": {"annotations": {key: "false"}}})
    follows(agent, {**INITIAL, "rs-memory": "not_safe_to_evict"}, "safe-to-evict \"false\" added")
    cluster.api("PATCH", path, {"metadata": {"annotations": {key: None}}})
    follows(agent, INITIAL, "the annotation removed")
