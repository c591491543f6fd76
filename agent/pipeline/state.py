"""What the agent knows about its node: every pod bound to it, evaluated, the Node and the host's usage.

Written only by the handler thread. Readers (exporters, the debug endpoint)
take ``snapshot()``, one immutable value, so an export never sees half an
update and no reader needs to know who wrote it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from agent.model.node import NodeRecord
from agent.model.node_summary import NodeSummary, Usage, summarize
from agent.model.rules import NEWEST, Rules
from agent.model.valuation import PodValue

__all__ = ["NodeState", "NodeSnapshot", "KubernetesInfo"]


@dataclass(frozen=True)
class KubernetesInfo:
    """Whose request arithmetic the values follow, and why."""

    rules: Rules
    # The API server's gitVersion; "" until read, and always with --kubernetes-version or a replay.
    server_version: str = ""
    # "apiserver" (read from /version), "flag" (--kubernetes-version) or "default" (the newest, nothing read yet).
    source: str = "default"
    # The one line said when the version is outside the supported releases.
    warning: str | None = None


DEFAULT_KUBERNETES = KubernetesInfo(NEWEST)


@dataclass(frozen=True)
class NodeSnapshot:
    node_name: str
    pods: tuple[PodValue, ...]
    node: NodeRecord | None
    usage: Usage | None
    # The initial LIST of pods, and of the Node, has been handled.
    synced: bool
    node_listed: bool
    # The newest pod resourceVersion handled (event, bookmark or LIST).
    resource_version: str = ""
    kubernetes: KubernetesInfo = DEFAULT_KUBERNETES

    def summary(self) -> NodeSummary:
        return summarize(self.node_name, self.node, self.pods, self.usage)


class NodeState:
    def __init__(self, node_name: str) -> None:
        self.node_name = node_name
        self._lock = threading.Lock()
        self._pods: dict[str, PodValue] = {}
        self._node: NodeRecord | None = None
        self._usage: Usage | None = None
        self._synced = False
        self._node_listed = False
        self._resource_version = ""
        self._kubernetes = DEFAULT_KUBERNETES

    def set_node(self, node: NodeRecord | None, listed: bool = False) -> None:
        """The Node object, or None when it does not exist (deleted, or not yet created)."""
        with self._lock:
            self._node = node
            self._node_listed = self._node_listed or listed

    def observed(self, resource_version: str) -> None:
        """The pod watch has been handled up to ``resource_version``."""
        if resource_version:
            with self._lock:
                self._resource_version = resource_version

    def set_kubernetes(self, info: KubernetesInfo) -> None:
        with self._lock:
            self._kubernetes = info

    def set_usage(self, usage: Usage | None) -> None:
        with self._lock:
            self._usage = usage

    def upsert(self, value: PodValue) -> PodValue | None:
        """Store ``value``; return the value it replaced."""
        with self._lock:
            previous = self._pods.get(value.uid)
            self._pods[value.uid] = value
            return previous

    def remove(self, uid: str) -> PodValue | None:
        with self._lock:
            return self._pods.pop(uid, None)

    def replace(self, values: Iterable[PodValue]) -> list[PodValue]:
        """Make the state exactly ``values``; return the pods it no longer holds."""
        fresh = {v.uid: v for v in values}
        with self._lock:
            previous = self._pods
            self._pods = fresh
            self._synced = True
        return [v for uid, v in previous.items() if uid not in fresh]

    def get(self, uid: str) -> PodValue | None:
        with self._lock:
            return self._pods.get(uid)

    def pods(self) -> tuple[PodValue, ...]:
        with self._lock:
            return tuple(self._pods.values())

    def snapshot(self) -> NodeSnapshot:
        with self._lock:
            return NodeSnapshot(self.node_name, tuple(self._pods.values()), self._node, self._usage,
                                self._synced, self._node_listed, self._resource_version, self._kubernetes)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)

    @property
    def node(self) -> NodeRecord | None:
        with self._lock:
            return self._node

    @property
    def synced(self) -> bool:
        with self._lock:
            return self._synced

    @property
    def kubernetes(self) -> KubernetesInfo:
        with self._lock:
            return self._kubernetes

    @property
    def node_listed(self) -> bool:
        with self._lock:
            return self._node_listed
