"""What the Kubernetes source hands to the handler, through the event queue."""

from __future__ import annotations

from typing import NamedTuple

from agent.model.node import NodeRecord
from agent.model.node_summary import Usage
from agent.model.pod import PodRecord
from agent.model.rules import KubernetesVersion

__all__ = ["Event", "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "RELIST", "SAMPLE", "VERSION"]

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
BOOKMARK = "BOOKMARK"
# A full LIST result: the handler replaces its view with exactly these pods,
# which is how pods deleted while the watch was down disappear (no ghosts).
RELIST = "RELIST"
# A fresh reading of the host's usage (kind "usage").
SAMPLE = "SAMPLE"
# The API server's version as /version reported it (kind "version").
VERSION = "VERSION"


class Event(NamedTuple):  # one per watch event: a named tuple is the cheapest immutable record to build
    type: str
    pod: PodRecord | None = None
    # Only for RELIST.
    pods: tuple[PodRecord, ...] = ()
    resource_version: str = ""
    # "pod"; "node" for the agent's own Node (then ``node`` is set, and a
    # RELIST with node None means the Node does not exist); "usage" for a
    # host reading (``usage`` None: /proc could not be read); "version" for
    # the API server's version (``version``).
    kind: str = "pod"
    node: NodeRecord | None = None
    usage: Usage | None = None
    version: KubernetesVersion | None = None
