"""KWOK's controller against a test cluster: simulated nodes the real control plane schedules onto.

KWOK (sigs.k8s.io/kwok, built by ``components.gotools``) is the Kubernetes community's way to simulate nodes: it
manages the Nodes that carry ``KWOK_NODE_ANNOTATION`` (Ready conditions, heartbeat Lease) and moves the pods bound
to them through the upstream fast Stages (Running with init containers completed and sidecars running, Job pods
completed, deleted pods removed). Pods annotated with ``CUSTOM_STATUS_ANNOTATION`` are left to the test, which
writes their status itself with ``set_custom_status`` (in-place resize status, crash loops, terminal phases:
what KWOK's stages do not write) and would finish their deletion itself (KWOK ignores them entirely).

No container runs on a KWOK node: the agent processes of the many-node tests are started by the kubelet
stand-in (testkit/kubelet.py), the real kubelet runs only in the ``node`` suite.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.gotools import tool_home
from testkit.cluster import ApiError, Cluster, Component, free_ports, rfc3339
from testkit.component import served
from testkit.waiting import wait_until

__all__ = ["CUSTOM_STATUS_ANNOTATION", "KWOK_NODE_ANNOTATION", "KWOK_NODE_TAINT", "NUDGE_ANNOTATION", "NUDGE_SECONDS",
           "Kwok", "custom_status", "kwok", "pod_story", "ready_condition", "set_custom_status", "wait_running"]

KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
#: KWOK's documented taint for simulated nodes: only pods that tolerate it (a DaemonSet tolerating every taint,
#: or a test's own pods) land there, never a real workload that needs a container to run.
KWOK_NODE_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
CUSTOM_STATUS_ANNOTATION = ("kwok.x-k8s.io/status", "custom")
#: Every node's address and so every pod's hostIP: anything that ever dialled a "kubelet" stays on loopback.
KWOK_NODE_IP = "127.0.0.1"


class Kwok:
    """One ``kwok`` process managing the annotated Nodes of ``cluster`` (start, add nodes, stop).

    ``lease_seconds``: KWOK renews each node's Lease every quarter of it (kubelet's rule), so the default 20 gives
    a renewal every 5 s, six per the test cluster's node-monitor grace period (testkit/cluster.py): margin
    for a loaded machine and for an API server restart. The kubelet's own default is 40.

    ``group``: the value of the node annotation this process selects. A second Kwok with a group of its own
    manages only its own Nodes, so stopping it kills exactly those (KWOK never lets go of a Node whose annotation
    is removed: its informer drops the update).
    """

    def __init__(self, cluster: Cluster, *, workdir: Path, lease_seconds: int = 20,
                 group: str = KWOK_NODE_ANNOTATION[1]) -> None:
        self.cluster = cluster
        self.workdir = Path(workdir)
        self.lease_seconds = lease_seconds
        self.annotation = (KWOK_NODE_ANNOTATION[0], group)
        self.component: Component | None = None
        self.port = 0

    def __enter__(self) -> Kwok:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Kwok:
        home = tool_home("kwok")
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.port,) = free_ports(1)
        stages = [f"--config={path}" for path in sorted((home / "stages").glob("*/*.yaml"))]
        self.component = Component("kwok", [
            str(home / "bin" / "kwok"), f"--kubeconfig={self.cluster.admin_kubeconfig}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector={}={}".format(*self.annotation),
            # Deprecated in favour of Stage selectors, still honoured by v0.8.0 for every stage (pod-delete too).
            "--disregard-status-with-annotation-selector={}={}".format(*CUSTOM_STATUS_ANNOTATION),
            f"--node-lease-duration-seconds={self.lease_seconds}", f"--node-ip={KWOK_NODE_IP}",
            f"--server-address=127.0.0.1:{self.port}", *stages,
        ], self.workdir / "kwok.log")
        self.component.start()
        try:
            wait_until(self._healthy, timeout=60, interval=0.2, message="kwok /healthz")
        except (AssertionError, RuntimeError) as error:
            self.stop()
            raise RuntimeError(f"kwok did not start: {error}\n{self.component.tail(40)}") from error
        return self

    def _healthy(self) -> bool:
        if not self.component.alive():
            raise RuntimeError(f"kwok exited ({self.component.proc.returncode})")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop()

    def tail(self, lines: int = 40) -> str:
        return self.component.tail(lines) if self.component is not None else ""

    def add_node(self, name: str, *, cpu: str, memory: str, pods: int = 110,
                 labels: dict[str, str] | None = None, taints: list[dict] | None = None) -> dict:
        """A Node KWOK manages: capacity = allocatable as given (kept by KWOK's node-initialize stage), Ready once
        KWOK has seen it (``wait_ready``); ``taints`` keep off it the pods that do not tolerate them. Returns the
        Node as stored."""
        resources = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": "100Gi"}
        body = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": dict([self.annotation]),
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "type": "kwok", **(labels or {})}},
            "spec": {"taints": taints or []},
            # Nodes keep the status they are created with; KWOK's stage keeps allocatable and capacity as given.
            "status": {"capacity": resources, "allocatable": resources},
        }
        try:
            return self.cluster.api("POST", "/api/v1/nodes", body)
        except ApiError as error:
            raise RuntimeError(f"could not create KWOK node {name}: {error}") from error

    def wait_ready(self, names: list[str], timeout: float = 120.0) -> None:
        """Every named Node reported Ready by KWOK."""
        wanted = set(names)

        def ready() -> bool:
            if not self.component.alive():
                raise RuntimeError(f"kwok exited ({self.component.proc.returncode}):\n{self.tail()}")
            nodes = self.cluster.api("GET", "/api/v1/nodes")["items"]
            done = {n["metadata"]["name"] for n in nodes if ready_condition(n) == "True"}
            return wanted <= done

        wait_until(ready, timeout=timeout, interval=0.5, message=f"{len(wanted)} KWOK nodes Ready")


def ready_condition(node: dict) -> str | None:
    """The status of a Node's Ready condition ("True", "False", "Unknown"), None before anyone wrote one."""
    return next((c["status"] for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"), None)


def custom_status(manifest: dict) -> dict:
    """``manifest`` annotated so KWOK leaves the pod alone: its status and final deletion are the test's."""
    manifest.setdefault("metadata", {}).setdefault("annotations", {}).update(dict([CUSTOM_STATUS_ANNOTATION]))
    return manifest


def set_custom_status(cluster: Cluster, namespace: str, name: str, phase: str, container_statuses: list[dict],
                      **status: object) -> dict:
    """Write a custom-status pod's status as its kubelet would: ``phase``, the given container statuses, conditions
    to match, host and pod IPs, and any other ``status`` field (``initContainerStatuses``, pod-level
    ``allocatedResources``/``resources``...). Refused for a pod KWOK manages: its stages would race the write."""
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    pod = cluster.api("GET", path)
    key, value = CUSTOM_STATUS_ANNOTATION
    if pod["metadata"].get("annotations", {}).get(key) != value:
        raise ValueError(f"{namespace}/{name} lacks {key}={value} (see custom_status): KWOK writes its status")
    ready = "True" if phase == "Running" and all(c.get("ready") for c in container_statuses) else "False"
    now = rfc3339()
    conditions = [{"type": t, "status": "True" if t in ("PodScheduled", "Initialized") else ready,
                   "lastTransitionTime": now} for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
    body = {"phase": phase, "containerStatuses": container_statuses, "conditions": conditions,
            "hostIP": KWOK_NODE_IP, "hostIPs": [{"ip": KWOK_NODE_IP}],
            "startTime": pod.get("status", {}).get("startTime") or now, **status}
    if phase == "Running":
        body.setdefault("podIP", "10.244.0.10")
        body.setdefault("podIPs", [{"ip": body["podIP"]}])
    return cluster.api("PATCH", path + "/status", {"status": body})


#: How long a pod may stay un-started by KWOK before ``wait_running`` touches it (see there).
NUDGE_SECONDS = 15.0
NUDGE_ANNOTATION = "testkit.node-requests-agent/kwok-nudge"


def wait_running(cluster: Cluster, namespace: str, name: str, timeout: float = 60.0,
                 nudge_after: float = NUDGE_SECONDS) -> dict:
    """The pod once KWOK's pod-ready stage reported it Running (container statuses, hostIP, podIP written).

    KWOK v0.8.0 plays a pod's stage only on an event for it, and drops the event while the pod's node is "read
    only" to it (pod_controller.go: ``readOnly`` is "this KWOK's Lease for the node is not in its informer cache
    yet"). The one replay it does when it takes a node over (``podsOnNodeSyncWorker``) races its own Lease watch:
    a pod bound before the Lease reached the cache can be skipped and then never gets another event, and sits
    Pending for good (seen once in CI: a DaemonSet pod Pending past 60 s). So a pod still Pending after each
    ``nudge_after`` seconds gets an annotation of the test's own, the event KWOK waits for; nothing of the agent's reads
    it. A pod that stays Pending anyway fails with its status and events in the message."""
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    started = time.monotonic()
    nudges = 0

    def running() -> dict | None:
        nonlocal nudges
        pod = cluster.api("GET", path)
        status = pod.get("status", {})
        if status.get("phase") == "Running" and status.get("hostIP"):
            return pod
        if time.monotonic() - started >= nudge_after * (nudges + 1) and not pod["metadata"].get("deletionTimestamp"):
            nudges += 1
            cluster.api("PATCH", path, {"metadata": {"annotations": {NUDGE_ANNOTATION: str(nudges)}}})
        return None

    try:
        return wait_until(running, timeout, interval=0.25, message=f"{namespace}/{name} Running (written by KWOK)")
    except AssertionError as error:
        raise AssertionError(f"{error}; after {nudges} nudges: {pod_story(cluster, namespace, name)}") from None


def pod_story(cluster: Cluster, namespace: str, name: str) -> str:
    """A pod's phase, node, conditions and events on one line: what a failed wait needs to say."""
    pod = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    status = pod.get("status", {})
    conditions = ", ".join(f"{c['type']}={c['status']}" for c in status.get("conditions", []))
    said = "; ".join(f"{e.get('reason')}: {e.get('message')}" for e in cluster.events_of(namespace, name)[-5:])
    return (f"phase {status.get('phase')} on {pod['spec'].get('nodeName')}, conditions [{conditions}], "
            f"events [{said or 'none'}]")


@pytest.fixture(scope="module")
def kwok(request: pytest.FixtureRequest, cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kwok]:
    """KWOK for the module's control plane: its nodes are the ones the module's tests add."""
    with served(request, Kwok(cluster, workdir=tmp_path_factory.mktemp("kwok")).start, what="kwok log",
                logs=Kwok.tail, stop=Kwok.stop) as runner:
        yield runner
