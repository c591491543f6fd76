"""Replays a recorded pod list and watch stream as if from the API server.

PodDisruptionBudgets in the capture (``kubectl get pdb -A -o json``, or a List mixing them with pods) are handed on
as the PDB watch's events; a capture without any leaves the PDBs unknown, as an agent without the watch has them.

The demo runs the real pipeline on the bundled synthetic sample this way, and
users reproduce a field problem from a capture such as::

    kubectl get pods -A --field-selector spec.nodeName=$NODE -o json > capture.json
    kubectl get pods -A --field-selector spec.nodeName=$NODE --watch-only \\
        --output-watch-events -o json >> capture.json

Documents are read by ``documents.changes`` and objects by the decode reader,
as ``explain`` reads a dump; the field selector the live source would have
applied is applied here, and each change becomes its event, by the same
``watched`` resources the reflectors use.
"""

from __future__ import annotations

import logging
import threading
from importlib import resources
from pathlib import Path

from agent.decode.reader import NODE, PDB, POD, Skipped
from agent.model.node import NodeRecord
from agent.model.pdb import PdbRecord
from agent.model.pod import PODS, PodRecord
from agent.pipeline.events import ADDED, BOOKMARK, DELETED, MODIFIED, Event
from agent.pipeline.interfaces import UNDECODABLE, Emit, SourceMetrics, source_loop
from agent.source.documents import LISTED, Change, DumpError, changes, decode_text, read_documents
from agent.source.watched import NodeObject, PdbsOfCluster, PodsOfNode

__all__ = ["ReplaySource", "load_capture", "SAMPLE"]

log = logging.getLogger(__name__)

SAMPLE = "sample"


def load_capture(path: str) -> str:
    """Text of the capture at ``path``; ``sample`` is the bundled synthetic sample node; ``-`` standard input.
    A file that cannot be read, or is not text, is a DumpError whose one line says why (the caller names the file)."""
    if path == SAMPLE:
        return resources.files("agent").joinpath("samples/sample-node.json").read_text(encoding="utf-8")
    try:
        if path == "-":
            import sys

            data = sys.stdin.buffer.read()
        else:
            data = Path(path).read_bytes()
    except OSError as exc:
        raise DumpError(exc.strerror or str(exc)) from None
    return decode_text(data)


class ReplaySource:
    def __init__(self, *, text: str, node_name: str, emit: Emit, metrics: SourceMetrics,
                 max_pdbs: int | None = None) -> None:
        """A capture that is not Kubernetes objects is a DumpError here, before the agent starts: replayed, it
        would only log an error while the agent ran on, exporting nothing."""
        self._changes = list(changes(read_documents(text)))
        self._node = node_name
        self._pods_watched = PodsOfNode(node_name=node_name)
        self._node_watched = NodeObject(node_name=node_name)
        self._pdbs_watched = PdbsOfCluster(limit=max_pdbs)
        self._emit = emit
        self._stats = metrics
        self.finished = threading.Event()
        self._matched = 0
        self._other_nodes: set[str] = set()

    def _skip(self, skipped: list[Skipped]) -> None:
        for s in skipped:
            self._stats.skipped(UNDECODABLE, s.resource)
            log.warning("skipping unidentifiable object in capture: %s", s)

    def _pods(self, change: Change) -> list[PodRecord]:
        pods, skipped = POD.decode_all(change.pods)
        self._skip(skipped)
        mine = []
        for pod in pods:
            if self._pods_watched.accept(pod):
                mine.append(pod)
            else:
                self._other_nodes.add(pod.node_name or "(unscheduled)")
        self._matched += len(mine)
        return mine

    def _node_in(self, change: Change) -> NodeRecord | None:
        nodes, skipped = NODE.decode_all(change.nodes)
        self._skip(skipped)
        return next((n for n in nodes if self._node_watched.accept(n)), None)

    def _pdbs(self, change: Change) -> list[PdbRecord]:
        pdbs, skipped = PDB.decode_all(change.pdbs)
        self._skip(skipped)
        return pdbs

    def _relist_pdbs(self, change: Change) -> None:
        """A List of PDBs, kept up to the limit as the live source keeps them."""
        pdbs, limit = self._pdbs(change), self._pdbs_watched.limit
        kept = pdbs if limit is None else pdbs[:limit]
        self._emit(self._pdbs_watched.listed(tuple(kept), change.resource_version, len(pdbs) - len(kept)))

    def _put(self, event: Event) -> None:
        self._emit(event)
        self._stats.progressed(PODS)

    def _relist(self, pods: tuple[PodRecord, ...] = (), node: NodeRecord | None = None, rv: str = "") -> None:
        """What the live source's two LISTs hand on: exactly these pods, and the Node (or none)."""
        self._put(self._pods_watched.listed(pods, rv))
        self._put(self._node_watched.listed(() if node is None else (node,), ""))
        self._stats.relisted(None, PODS)

    def _replay(self, change: Change) -> None:
        changed = change.type in (ADDED, MODIFIED, DELETED)
        if changed:
            for pdb in self._pdbs(change):
                self._emit(self._pdbs_watched.changed(change.type, pdb))
        node = self._node_in(change)
        if node is not None:
            if changed:
                self._put(self._node_watched.changed(change.type, node))
            return
        if change.type == BOOKMARK:
            return
        if not changed:
            log.warning("skipping %s event in capture", change.type)
            return
        for pod in self._pods(change):
            self._put(self._pods_watched.changed(change.type, pod))

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
            for change in self._changes:
                if stop.is_set():
                    return
                if change.type == LISTED:
                    if change.pdbs or change.pdbs_only:
                        self._relist_pdbs(change)
                    if change.pdbs_only:
                        continue
                    self._relist(tuple(self._pods(change)), self._node_in(change), change.resource_version)
                    listed = True
                    continue
                if not listed:  # a capture that starts with watch events: start from empty
                    self._relist()
                    listed = True
                self._replay(change)
            if not listed:
                self._relist()
            if not self._matched:
                self._warn_empty()
        finally:
            self.finished.set()
        # A finished replay is not a stuck source: keep reporting alive.
        while not stop.wait(1.0):
            self._stats.heartbeat(source_loop())
