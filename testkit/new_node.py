"""A new node joining the cluster of node_cluster.py, its agent's image pulled from a real registry (issue 30).

``node_registry``: ``crane registry serve`` on the first node's address, the agent's image and the pause image
pushed into it, and the first node's containerd told (``hosts.toml``) that it speaks plain HTTP. ``agent_overlay``:
the DaemonSet as shipped with only its image renamed into that registry, by kustomize's ``images:`` as an operator
would. ``join_and_follow``: a second real kubelet with an empty containerd joins (node_cluster.join_node; it pulls
even the sandbox image), and each step from its Node turning Ready to its agent's first numbers in Prometheus is
recorded as it is first seen (polling every 0.1 s), the first accepted export from the agent's own record of it.
The node test asserts what happened; bench/new_node.py prints how long it took.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from testkit.node_cluster import NODE_IP, Node, join_node, leave_node
from testkit.node_rollout import AGENT_NS, AGENT_SELECTOR, SHIPPED_DAEMONSET
from testkit.registry import Registry, hosts_toml
from testkit.repo import REPO

__all__ = ["NewNode", "agent_overlay", "join_and_follow", "node_registry"]

_CONTAINER = SHIPPED_DAEMONSET["spec"]["template"]["spec"]["containers"][0]
AGENT_REPOSITORY, _, AGENT_TAG = _CONTAINER["image"].partition(":")
DEBUG_PORT = next(p["containerPort"] for p in _CONTAINER["ports"] if p["name"] == "debug")
#: The kubelet's Pulled event: "Successfully pulled image "X" in 3.2s (3.2s including waiting). Image size: N bytes."
_PULLED = re.compile(r'Successfully pulled image "(?P<image>[^"]+)" in (?P<took>[0-9.]+m?s)')


def trust_registry(node: Node, registry: Registry) -> None:
    """The node's containerd pulls from ``registry`` over plain HTTP (read per pull: no restart)."""
    folder = node.registry_hosts / registry.address
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hosts.toml").write_text(hosts_toml(registry))


@contextmanager
def node_registry(node: Node, workdir: Path) -> Iterator[Registry]:
    """The registry on the first node's address with the agent's image and the pause image in it."""
    from components.image import AGENT_IMAGE, PAUSE_IMAGE, agent_image, tiny_image

    registry = Registry(NODE_IP, workdir).start()
    try:
        registry.push(agent_image().archive, AGENT_IMAGE)
        registry.push(tiny_image(PAUSE_IMAGE).archive, PAUSE_IMAGE)
        trust_registry(node, registry)
        yield registry
    finally:
        registry.stop()


def agent_overlay(registry: Registry, workdir: Path) -> Path:
    """daemonset/ as shipped, its image named in ``registry`` (kustomize ``images:``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "kustomization.yaml").write_text(json.dumps({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(REPO / "daemonset", workdir)],
        "images": [{"name": AGENT_REPOSITORY, "newName": f"{registry.address}/{AGENT_REPOSITORY}"}]}, indent=1))
    return workdir


@dataclass
class NewNode:
    """What ``join_and_follow`` saw. ``seen``: step -> seconds after the kubelet started (monotonic, as first seen
    by polling); ``node``: the joined node (``leave_node`` it); the rest: what the steps left behind."""

    node: Node
    seen: dict[str, float] = field(default_factory=dict)
    pod: dict = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)
    pulled_in: str = ""  # the kubelet's own figure for the agent image's pull, from its Pulled event
    first_export_wall: float | None = None  # the agent's own record of its first successful export (unix time)
    first_sample_wall: float | None = None  # the timestamp of the node's first pod_or_vm sample in Prometheus
    wall_at_start: float = 0.0  # unix time when the kubelet started (seen's zero)

    def since_ready(self) -> dict[str, float]:
        """Each step in seconds after the Node was first seen Ready, the two wall-clock ones converted."""
        ready = self.seen["node_ready"]
        steps = {k: v - ready for k, v in self.seen.items() if k != "kubelet_start"}
        if self.first_export_wall is not None:
            steps["first_accepted_export"] = self.first_export_wall - self.wall_at_start - ready
        return dict(sorted(steps.items(), key=lambda kv: kv[1]))


def _agent_pod(node: Node) -> dict | None:
    pods = [p for p in node.cluster.api("GET", f"/api/v1/namespaces/{AGENT_NS}/pods?labelSelector={AGENT_SELECTOR}"
                                        f"&fieldSelector=spec.nodeName={node.name}")["items"]
            if not p["metadata"].get("deletionTimestamp")]
    return pods[0] if pods else None


def _readyz(pod: dict) -> bool:
    ip = pod.get("status", {}).get("podIP")
    if not ip:
        return False
    try:
        with urllib.request.urlopen(f"http://{ip}:{DEBUG_PORT}/readyz", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def join_and_follow(first: Node, registry: Registry, prometheus, index: int, workdir: Path,
                    timeout: float = 240.0, export_record: bool = True) -> NewNode:
    """Join node ``index`` and follow it to its agent's first sample in Prometheus (and, with ``export_record``, to
    the agent's own record of its first accepted export, which rides on its second export). Raises AssertionError
    naming the step that did not come within ``timeout``, after removing the node (``leave_node``); on success the
    caller removes it."""
    from components.image import PAUSE_IMAGE

    started = time.monotonic()
    wall = time.time()
    node = join_node(first, index, workdir, pause_image=f"{registry.address}/{PAUSE_IMAGE}",
                     labels=f"nra-test=joined-{index}", prepare=lambda joining: trust_registry(joining, registry))
    try:
        return _follow(NewNode(node, wall_at_start=wall), registry, prometheus, started, timeout, export_record)
    except BaseException:
        leave_node(node)
        raise


def _follow(result: NewNode, registry: Registry, prometheus, started: float, timeout: float,
            export_record: bool) -> NewNode:
    node = result.node
    result.seen["kubelet_start"] = 0.0
    series = f'pod_or_vm_cpu_requests{{k8s_node_name="{node.name}"}}'
    exported = f'{{__name__=~".*last_export_success_timestamp_seconds", k8s_node_name="{node.name}"}}'

    def at(step: str, reached: Callable[[], object]) -> bool:
        if step not in result.seen and reached():
            result.seen[step] = time.monotonic() - started
        return step in result.seen

    steps = ["node_registered", "node_ready", "pod_scheduled", "image_pulled", "container_started", "agent_readyz",
             "first_sample_in_prometheus"] + (["first_export_recorded"] if export_record else [])
    deadline = started + timeout
    while True:
        node._alive_or_raise()
        pod = _agent_pod(node) or {}
        result.pod = pod or result.pod
        status = next((s for s in pod.get("status", {}).get("containerStatuses", []) if s["name"] == "agent"), {})
        at("node_registered", lambda: node.cluster.exists(f"/api/v1/nodes/{node.name}"))
        at("node_ready", lambda: "node_registered" in result.seen and node._node_ready())
        at("pod_scheduled", lambda: bool(pod))
        at("image_pulled", lambda: pod and _pulled(node, pod, result))
        at("container_started", lambda: "running" in status.get("state", {}))
        at("agent_readyz", lambda: "container_started" in result.seen and _readyz(pod))
        at("first_sample_in_prometheus", lambda: "agent_readyz" in result.seen and prometheus.query(series))
        if export_record:
            at("first_export_recorded", lambda: "first_sample_in_prometheus" in result.seen
               and prometheus.query(exported))
        if all(s in result.seen for s in steps):
            break
        if time.monotonic() > deadline:
            missing = [s for s in steps if s not in result.seen]
            raise AssertionError(f"new node {node.name}: {missing[0]} not seen within {timeout:g} s "
                                 f"(seen: {result.seen})")
        time.sleep(0.1)
    samples = prometheus.query(f"{series}[15m]")
    result.first_sample_wall = min(float(v[0]) for row in samples for v in row["values"])
    if export_record:
        # The agent's gauge holds the time of its last successful export; its earliest sample was collected for
        # the second export, so it is the first one's time.
        rows = prometheus.query(f"{exported}[15m]")
        result.first_export_wall = min(float(v[1]) for row in rows for v in row["values"])
    return result


def _pulled(node: Node, pod: dict, result: NewNode) -> bool:
    """The kubelet reported the agent's image pulled (its Pulled event for this pod)."""
    name = pod["metadata"]["name"]
    result.events = node.cluster.events_of(AGENT_NS, name)
    for event in result.events:
        match = _PULLED.search(event.get("message", "")) if event.get("reason") == "Pulled" else None
        if match and AGENT_REPOSITORY in match["image"]:
            result.pulled_in = match["took"]
            return True
    return False
