"""What ``explain`` reads is one record whether it comes from a dump or from the live cluster's LISTs."""

from __future__ import annotations

import typing

from agent.explain.view import pods_dump, read_dump
from agent.source.cluster_list import list_cluster
from agent.source.documents import ClusterObjects
from testkit.factory import node, pod


def test_a_dump_and_the_live_lists_give_the_same_record():
    read = read_dump([{"kind": "List", "items": [node("node-a"), pod("web"), {"kind": "Pod", "metadata": {}}]}])
    assert type(read) is ClusterObjects
    assert [p.name for p in read.pods] == ["web"] and [n.name for n in read.nodes] == ["node-a"]
    assert len(read.skipped) == 1 and read.pdbs is None and read.pdbs_error == ""
    assert type(pods_dump([{"kind": "List", "items": [pod("web")]}])) is ClusterObjects
    assert typing.get_type_hints(list_cluster)["return"] is ClusterObjects
