"""The agent's own Node object, reduced to what the comparisons need."""

from __future__ import annotations

from typing import NamedTuple


__all__ = ["NodeRecord", "NODES"]

# The watched resource's name, as the agent's own metrics label it.
NODES = "nodes"


class NodeRecord(NamedTuple):
    name: str
    uid: str
    resource_version: str
    # Raw quantity strings for cpu, memory and pods, as status reports them.
    capacity: dict[str, str]
    allocatable: dict[str, str]
    problems: tuple[str, ...] = ()
