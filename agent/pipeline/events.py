"""What the sources hand to the handler, through the event queue: one record type per kind of event.

The handler dispatches on the type. Each type names the bounded word the
queue counts it under (``type``: the Kubernetes watch event type where there
is one), so the agent's own metrics keep their vocabulary. Slotted, frozen
and keyword-only: built once per watch event, never changed, never built by
position.
"""

from __future__ import annotations

from typing import ClassVar, Final, Literal

import msgspec

from agent.model.node import NodeRecord
from agent.model.node_summary import Usage
from agent.model.pdb import PdbRecord
from agent.model.pod import PodRecord
from agent.model.rules import KubernetesVersion

__all__ = ["Event", "ObjectEvent", "PodChanged", "PodDeleted", "PodsListed", "NodeChanged", "NodeDeleted", "NodeListed",
           "PdbChanged", "PdbDeleted", "PdbsListed", "Bookmark",
           "UsageSampled", "VersionRead", "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "RELIST", "SAMPLE", "VERSION"]

# Final: each is its literal type, so ``type=ADDED`` type-checks against the events' ``Literal`` fields.
ADDED: Final = "ADDED"
MODIFIED: Final = "MODIFIED"
DELETED: Final = "DELETED"
BOOKMARK: Final = "BOOKMARK"
RELIST: Final = "RELIST"
SAMPLE: Final = "SAMPLE"
VERSION: Final = "VERSION"


class PodChanged(msgspec.Struct, frozen=True, kw_only=True):
    """A pod was added or modified (the watch's ADDED or MODIFIED)."""

    type: Literal["ADDED", "MODIFIED"]
    pod: PodRecord
    resource_version: str = ""


class PodDeleted(msgspec.Struct, frozen=True, kw_only=True):
    type: ClassVar[str] = DELETED
    pod: PodRecord
    resource_version: str = ""


class PodsListed(msgspec.Struct, frozen=True, kw_only=True):
    """A full LIST: the handler replaces its view with exactly these pods, so pods deleted while the watch was
    down disappear (no ghosts)."""

    type: ClassVar[str] = RELIST
    pods: tuple[PodRecord, ...]
    resource_version: str = ""


class NodeChanged(msgspec.Struct, frozen=True, kw_only=True):
    type: Literal["ADDED", "MODIFIED"]
    node: NodeRecord
    resource_version: str = ""


class NodeDeleted(msgspec.Struct, frozen=True, kw_only=True):
    type: ClassVar[str] = DELETED
    node: NodeRecord
    resource_version: str = ""


class NodeListed(msgspec.Struct, frozen=True, kw_only=True):
    """The agent's own Node as a LIST found it; None: the Node does not exist."""

    type: ClassVar[str] = RELIST
    node: NodeRecord | None
    resource_version: str = ""


class PdbChanged(msgspec.Struct, frozen=True, kw_only=True):
    """A PodDisruptionBudget somewhere in the cluster was added or modified."""

    type: Literal["ADDED", "MODIFIED"]
    pdb: PdbRecord
    resource_version: str = ""


class PdbDeleted(msgspec.Struct, frozen=True, kw_only=True):
    type: ClassVar[str] = DELETED
    pdb: PdbRecord
    resource_version: str = ""


class PdbsListed(msgspec.Struct, frozen=True, kw_only=True):
    """A full LIST of the cluster's PDBs: the handler replaces its PDBs with exactly these. ``more``: how many
    the LIST held beyond the agent's maximum, not kept (the PDBs are then unknown, and said so)."""

    type: ClassVar[str] = RELIST
    pdbs: tuple[PdbRecord, ...]
    resource_version: str = ""
    more: int = 0


class Bookmark(msgspec.Struct, frozen=True, kw_only=True):
    """The watch of ``resource`` progressed to ``resource_version`` with nothing to report."""

    type: ClassVar[str] = BOOKMARK
    resource: str
    resource_version: str


class UsageSampled(msgspec.Struct, frozen=True, kw_only=True):
    """A reading of what the host uses; None: /proc could not be read."""

    type: ClassVar[str] = SAMPLE
    usage: Usage | None


class VersionRead(msgspec.Struct, frozen=True, kw_only=True):
    """The API server's version, as /version reported it."""

    type: ClassVar[str] = VERSION
    version: KubernetesVersion


# What a watched resource's source emits: each carries the resource version it moves the watch to.
ObjectEvent = (PodChanged | PodDeleted | PodsListed | NodeChanged | NodeDeleted | NodeListed | PdbChanged | PdbDeleted
               | PdbsListed | Bookmark)
Event = ObjectEvent | UsageSampled | VersionRead
