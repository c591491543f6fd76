"""What a source watches, and which pipeline event each change of it is.

The one place that turns a decoded object into the typed event and applies
the node filter: the reflector uses it on the API server's answers, replay on
a capture's documents, ``explain --live`` for the path and field selector. So
a captured change and a live one become the same event.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

import msgspec

from agent.decode.reader import NODE, PDB, POD, ObjectKind
from agent.model.node import NodeRecord
from agent.model.pdb import PdbRecord
from agent.model.pod import PodRecord
from agent.pipeline.events import (
    ADDED,
    DELETED,
    MODIFIED,
    NodeChanged,
    NodeDeleted,
    NodeListed,
    ObjectEvent,
    PdbChanged,
    PdbDeleted,
    PdbsListed,
    PodChanged,
    PodDeleted,
    PodsListed,
)
from agent.pipeline.interfaces import LABELS_OVER_BOUND, SELECTOR_OVER_BOUND

__all__ = ["Watched", "PodsOfNode", "NodeObject", "PdbsOfCluster"]

R = TypeVar("R")


class Watched(Protocol[R]):
    """What one reflector lists and watches, and which event each change of it is."""

    # Read-only members (properties): the records that implement it are frozen.
    @property
    def kind(self) -> ObjectKind[R]: ...

    @property
    def path(self) -> str: ...

    @property
    def limit(self) -> int | None:
        """The most objects kept from one LIST (the rest are counted, not kept); None: no limit. For what any tenant
        of the cluster can create, where the node's own scope does not bound it."""

    @property
    def field_selector(self) -> str: ...

    def accept(self, record: R) -> bool:
        """The field selector, checked again on our side."""

    def over_bound(self, record: R) -> str:
        """Why a part of ``record`` was not kept (a bounded reason, counted with the skipped objects); "" if none."""

    def changed(self, type: str, record: R) -> ObjectEvent:
        """The event of one ADDED, MODIFIED or DELETED object."""

    def listed(self, records: tuple[R, ...], resource_version: str, more: int = 0) -> ObjectEvent:
        """The event of a whole LIST; ``more``: objects it held beyond ``limit``, not kept."""


class PodsOfNode(msgspec.Struct, frozen=True, kw_only=True):
    """The pods bound to ``node_name`` (spec.nodeName is indexed in the watch cache); None: every pod."""

    node_name: str | None
    kind: ObjectKind[PodRecord] = POD
    path: str = "/api/v1/pods"
    limit: None = None  # bounded by the node's pod capacity

    @property
    def field_selector(self) -> str:
        return "" if self.node_name is None else f"spec.nodeName={self.node_name}"

    def accept(self, record: PodRecord) -> bool:
        return self.node_name is None or record.node_name == self.node_name

    def over_bound(self, record: PodRecord) -> str:
        return LABELS_OVER_BOUND if record.eviction.labels_over_bound else ""

    def changed(self, type: str, record: PodRecord) -> ObjectEvent:
        if type == DELETED:
            return PodDeleted(pod=record, resource_version=record.resource_version)
        return PodChanged(type=ADDED if type == ADDED else MODIFIED, pod=record,
                          resource_version=record.resource_version)

    def listed(self, records: tuple[PodRecord, ...], resource_version: str, more: int = 0) -> ObjectEvent:
        return PodsListed(pods=records, resource_version=resource_version)


class NodeObject(msgspec.Struct, frozen=True, kw_only=True):
    """The agent's own Node object; None: every Node."""

    node_name: str | None
    kind: ObjectKind[NodeRecord] = NODE
    path: str = "/api/v1/nodes"
    limit: None = None

    @property
    def field_selector(self) -> str:
        return "" if self.node_name is None else f"metadata.name={self.node_name}"

    def accept(self, record: NodeRecord) -> bool:
        return self.node_name is None or record.name == self.node_name

    def over_bound(self, record: NodeRecord) -> str:
        return ""

    def changed(self, type: str, record: NodeRecord) -> ObjectEvent:
        if type == DELETED:
            return NodeDeleted(node=record, resource_version=record.resource_version)
        return NodeChanged(type=ADDED if type == ADDED else MODIFIED, node=record,
                           resource_version=record.resource_version)

    def listed(self, records: tuple[NodeRecord, ...], resource_version: str, more: int = 0) -> ObjectEvent:
        return NodeListed(node=records[0] if records else None, resource_version=resource_version)


class PdbsOfCluster(msgspec.Struct, frozen=True, kw_only=True):
    """Every PodDisruptionBudget of the cluster, from the API server's watch cache: the one input of the
    autoscaler's verdict not scoped to the node (a PDB covers pods by label, wherever they run).

    Any tenant who may create PDBs grows this set, so at most ``limit`` are kept (docs/operations.md).
    """

    limit: int | None = None
    kind: ObjectKind[PdbRecord] = PDB
    path: str = "/apis/policy/v1/poddisruptionbudgets"

    @property
    def field_selector(self) -> str:
        return ""

    def accept(self, record: PdbRecord) -> bool:
        return True

    def over_bound(self, record: PdbRecord) -> str:
        return SELECTOR_OVER_BOUND if record.selector_over_bound else ""

    def changed(self, type: str, record: PdbRecord) -> ObjectEvent:
        if type == DELETED:
            return PdbDeleted(pdb=record, resource_version=record.resource_version)
        return PdbChanged(type=ADDED if type == ADDED else MODIFIED, pdb=record,
                          resource_version=record.resource_version)

    def listed(self, records: tuple[PdbRecord, ...], resource_version: str, more: int = 0) -> ObjectEvent:
        return PdbsListed(pdbs=records, resource_version=resource_version, more=more)
