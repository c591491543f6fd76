"""KWOK's controller against a test cluster: simulated nodes the real control plane schedules onto.

KWOK (sigs.k8s.io/kwok, built by ``components.kwok``) is the Kubernetes community's way to simulate nodes: it
manages the Nodes that carry ``KWOK_NODE_ANNOTATION`` (Ready conditions, heartbeat Lease) and moves the pods bound
to them through the upstream fast Stages (Running with init containers completed and sidecars running, Job pods
completed, deleted pods removed). Pods annotated with ``CUSTOM_STATUS_ANNOTATION`` are left to the test, which
writes their status itself (in-place resize status, crash loops: what KWOK's stages do not write).

No container runs on a KWOK node: the agent processes of the many-node tests are started by the kubelet
stand-in (tests/support/kubelet.py), the real kubelet runs only in the ``node`` suite.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

from components.kwok import kwok_home
from tests.support.cluster import ApiError, Cluster, Component, free_ports
from tests.support.waiting import wait_until

__all__ = ["CUSTOM_STATUS_ANNOTATION", "KWOK_NODE_ANNOTATION", "KWOK_NODE_TAINT", "Kwok"]

KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
#: KWOK's documented taint for simulated nodes: only pods that tolerate it (a DaemonSet tolerating every taint,
#: or a test's own pods) land there, never a real workload that needs a container to run.
KWOK_NODE_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
CUSTOM_STATUS_ANNOTATION = ("kwok.x-k8s.io/status", "custom")


class Kwok:
    """One ``kwok`` process managing the annotated Nodes of ``cluster`` (start, add nodes, stop)."""

    def __init__(self, cluster: Cluster, *, workdir: Path, lease_seconds: int = 40) -> None:
        self.cluster = cluster
        self.workdir = Path(workdir)
        self.lease_seconds = lease_seconds
        self.component: Component | None = None
        self.port = 0

    def start(self) -> Kwok:
        home = kwok_home()
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.port,) = free_ports(1)
        stages = [f"--config={path}" for path in sorted((home / "stages").glob("*/*.yaml"))]
        self.component = Component("kwok", [
            str(home / "bin" / "kwok"), f"--kubeconfig={self.cluster.admin_kubeconfig}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector={}={}".format(*KWOK_NODE_ANNOTATION),
            "--disregard-status-with-annotation-selector={}={}".format(*CUSTOM_STATUS_ANNOTATION),
            f"--node-lease-duration-seconds={self.lease_seconds}",
            f"--server-address=127.0.0.1:{self.port}", *stages,
        ], self.workdir / "kwok.log")
        self.component.start()
        try:
            wait_until(self._healthy, timeout=60, interval=0.2, message="kwok /healthz")
        except AssertionError as error:
            self.stop()
            raise RuntimeError(f"kwok did not start: {error}\n{self.component.tail(40)}") from error
        return self

    def _healthy(self) -> bool:
        if not self.component.alive():
            raise RuntimeError(f"kwok exited ({self.component.proc.returncode}):\n{self.component.tail(40)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop()

    def add_node(self, name: str, *, cpu: str, memory: str, pods: int = 110,
                 labels: dict[str, str] | None = None, taints: list[dict] | None = None) -> dict:
        """A Node KWOK manages: capacity = allocatable as given (kept by KWOK's node-initialize stage), Ready once
        KWOK has seen it; ``taints`` keep off it the pods that do not tolerate them. Returns the Node as stored."""
        resources = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": "100Gi"}
        body = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": dict([KWOK_NODE_ANNOTATION]),
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
            nodes = self.cluster.api("GET", "/api/v1/nodes")["items"]
            done = {n["metadata"]["name"] for n in nodes
                    if any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))}
            return wanted <= done

        wait_until(ready, timeout=timeout, interval=0.5, message=f"{len(wanted)} KWOK nodes Ready")
