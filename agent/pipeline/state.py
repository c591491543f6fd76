"""What the agent knows about its node: every pod bound to it, evaluated.

Written only by the handler thread; read by exporters through ``pods()``,
which returns an immutable snapshot so an export never sees half an update.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from agent.model.node import NodeRecord
from agent.model.valuation import PodValue

__all__ = ["NodeState"]


class NodeState:
    def __init__(self, node_name: str) -> None:
        self.node_name = node_name
        self._lock = threading.Lock()
        self._pods: dict[str, PodValue] = {}
        self._synced = threading.Event()
        self._node: NodeRecord | None = None
        self._node_listed = threading.Event()

    def set_node(self, node: NodeRecord | None, listed: bool = False) -> None:
        """The Node object, or None when it does not exist (deleted, or not yet created)."""
        with self._lock:
            self._node = node
        if listed:
            self._node_listed.set()

    @property
    def node(self) -> NodeRecord | None:
        with self._lock:
            return self._node

    @property
    def node_listed(self) -> bool:
        return self._node_listed.is_set()

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
        removed = [v for uid, v in previous.items() if uid not in fresh]
        self._synced.set()
        return removed

    def get(self, uid: str) -> PodValue | None:
        with self._lock:
            return self._pods.get(uid)

    def pods(self) -> tuple[PodValue, ...]:
        with self._lock:
            return tuple(self._pods.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)
