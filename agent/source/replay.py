"""Replays a recorded pod list and watch stream as if from the API server.

The demo runs the real pipeline on the bundled sample this way, and users
reproduce a field problem from a capture such as::

    kubectl get pods -A --field-selector spec.nodeName=$NODE -o json > capture.json
    kubectl get pods -A --field-selector spec.nodeName=$NODE --watch-only \\
        --output-watch-events -o json >> capture.json
"""

from __future__ import annotations

import logging
import threading
from importlib import resources
from pathlib import Path
from typing import Any

from agent.source.documents import DumpError, nodes_of, pods_of, read_documents
from agent.pipeline.events import ADDED, BOOKMARK, DELETED, MODIFIED, RELIST, Event
from agent.model.node import NodeRecord
from agent.model.fields import DecodeError
from agent.model.pod import PodRecord
from agent.pipeline.queue import EventQueue
from agent.pipeline.stats import UNDECODABLE, RuntimeStats, source_loop
from agent.source.typed_decode import node_record, pod_record

__all__ = ["ReplaySource", "load_capture", "SAMPLE"]

log = logging.getLogger(__name__)

SAMPLE = "sample"


def load_capture(path: str) -> str:
    """Text of the capture at ``path``; ``sample`` is the bundled sample node."""
    if path == SAMPLE:
        return resources.files("agent").joinpath("samples/sample-node.json").read_text(encoding="utf-8")
    if path == "-":
        import sys

        return sys.stdin.read()
    return Path(path).read_text(encoding="utf-8")


class ReplaySource:
    def __init__(self, text: str, node_name: str, queue: EventQueue, stats: RuntimeStats) -> None:
        self._docs = read_documents(text)
        self._node = node_name
        self._queue = queue
        self._stats = stats
        self.finished = threading.Event()
        self._matched = 0
        self._other_nodes: set[str] = set()

    def _decode(self, obj: Any) -> PodRecord | None:
        try:
            pod = pod_record(obj)
        except DecodeError as exc:
            self._stats.skipped(UNDECODABLE)
            log.warning("skipping unidentifiable object in capture: %s", exc)
            return None
        # The field selector the live source would have applied.
        if pod.node_name != self._node:
            self._other_nodes.add(pod.node_name or "(unscheduled)")
            return None
        self._matched += 1
        return pod

    def _node_in(self, doc: Any) -> NodeRecord | None:
        for obj in nodes_of(doc):
            try:
                node = node_record(obj)
            except DecodeError as exc:
                self._stats.skipped(UNDECODABLE)
                log.warning("skipping unidentifiable node in capture: %s", exc)
                continue
            if node.name == self._node:
                return node
        return None

    def _replay_event(self, doc: Any) -> None:
        kind = doc.get("type", ADDED) if isinstance(doc, dict) and "object" in doc else ADDED
        node = self._node_in(doc)
        if node is not None:
            if kind in (ADDED, MODIFIED, DELETED):
                self._put(Event(kind, kind="node", node=node, resource_version=node.resource_version))
            return
        if kind == BOOKMARK:
            return
        if kind not in (ADDED, MODIFIED, DELETED):
            log.warning("skipping %s event in capture", kind)
            return
        for obj in pods_of(doc):
            pod = self._decode(obj)
            if pod is not None:
                self._put(Event(kind, pod=pod, resource_version=pod.resource_version))

    def _put(self, event: Event) -> None:
        self._queue.put(event)
        self._stats.progressed()

    def _relist(self, pods: tuple[PodRecord, ...] = (), node: NodeRecord | None = None, rv: str = "") -> None:
        """What the live source's two LISTs hand on: exactly these pods, and the Node (or none)."""
        self._put(Event(RELIST, pods=pods, resource_version=rv))
        self._put(Event(RELIST, kind="node", node=node))
        self._stats.relisted()

    def _warn_empty(self) -> None:
        """Once: a capture of another node's pods would otherwise export nothing, silently."""
        if self._other_nodes:
            log.warning("the capture has no pod bound to node %s; its pods are bound to %s: pass one of them as "
                        "--node-name", self._node, ", ".join(sorted(self._other_nodes)))
        else:
            log.warning("the capture has no pod at all (node %s); capture one with kubectl get pods -A "
                        "--field-selector spec.nodeName=%s -o json", self._node, self._node)

    def run(self, stop: threading.Event) -> None:
        self._stats.heartbeat(source_loop())
        try:
            listed = False
            for doc in self._docs:
                if stop.is_set():
                    return
                if isinstance(doc, dict) and isinstance(doc.get("items"), list):
                    pods = tuple(p for p in map(self._decode, pods_of(doc)) if p is not None)
                    self._relist(pods, self._node_in(doc), str((doc.get("metadata") or {}).get("resourceVersion") or ""))
                    listed = True
                    continue
                if not listed:  # a capture that starts with watch events: start from empty
                    self._relist()
                    listed = True
                self._replay_event(doc)
            if not listed:
                self._relist()
            if not self._matched:
                self._warn_empty()
        except DumpError as exc:
            log.error("capture is unusable: %s", exc)
        finally:
            self.finished.set()
        # A finished replay is not a stuck source: keep reporting alive.
        while not stop.wait(1.0):
            self._stats.heartbeat(source_loop())
