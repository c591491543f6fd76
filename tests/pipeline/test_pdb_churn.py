"""PDB events re-match only the node's pods they can reach and keep the verdict where they change nothing it reads;
whatever the order of pod and PDB events, every pod's kept covering is what a scan of every PDB finds, and the
verdict what is computed from scratch. A rewrite over pods of many labels costs what those pods cost, not pods x
PDBs."""

from __future__ import annotations

import random
import time

import msgspec
import pytest

from agent.decode.reader import NODE, PDB, POD
from agent.model.pdb import PdbRecord, selects
from agent.pipeline.events import (
    ADDED,
    MODIFIED,
    NodeChanged,
    PdbChanged,
    PdbDeleted,
    PdbsListed,
    PodChanged,
    PodDeleted,
    PodsListed,
)
from agent.pipeline.handler import Handler
from agent.pipeline.state import NodeState
from agent.telemetry.stats import RuntimeStats
from testkit.factory import node, pdb, pod

NOW = 1_800_000_000.0


def owned(name: str, namespace: str = "default", labels: dict[str, str] | None = None) -> dict:
    return pod(name, namespace=namespace, labels=labels if labels is not None else {"app": name},
               owner_references=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-rs",
                                  "uid": f"u-{name}", "controller": True}])


def started(pods=(), pdbs=(), max_pdbs: int | None = None) -> tuple[NodeState, Handler]:
    state = NodeState("node-a", max_pdbs=max_pdbs)
    handler = Handler(state=state, metrics=RuntimeStats())
    handler.handle(NodeChanged(type=ADDED, node=NODE.record(node("node-a", cpu="4", memory="8Gi"))))
    handler.handle(PodsListed(pods=tuple(POD.record(p) for p in pods)))
    handler.handle(PdbsListed(pdbs=tuple(PDB.record(p) for p in pdbs)))
    return state, handler


def scanned(state: NodeState) -> dict[str, list[str]] | None:
    """Each pod's covering PDBs by name, found by scanning every PDB (what the verdict read before the index)."""
    s = state.snapshot()
    if s.pdbs is None:
        return None
    return {v.name: [p.name for p in s.pdbs or () if selects(p, v.namespace, v.record.eviction.label_map())]
            for v in s.pods}


def kept(state: NodeState) -> dict[str, list[str]] | None:
    s = state.snapshot()
    if s.covering is None:
        return None
    return {v.name: [p.name for p in s.covering[v.uid]] for v in s.pods}


def fresh(state: NodeState, now: float):
    return msgspec.structs.replace(state.snapshot(), verdicts=None, covering=None).verdict(now)


def blocked(state: NodeState) -> set[str]:
    return {b.name for b in state.snapshot().verdict(NOW).blockers}


def test_a_pdb_event_that_reaches_no_pod_of_the_node_keeps_the_verdict():
    state, handler = started([owned("web"), owned("db")], [pdb("web", match_labels={"app": "web"})])
    first = state.snapshot().verdict(NOW)
    assert {b.name for b in first.blockers} == {"web"}
    # Another namespace, and this namespace with a selector none of the node's pods passes: nothing it reads changed.
    handler.handle(PdbChanged(type=ADDED, pdb=PDB.record(pdb("other", namespace="tenant", match_labels={}))))
    handler.handle(PdbChanged(type=ADDED, pdb=PDB.record(pdb("cache", match_labels={"app": "cache"}))))
    handler.handle(PdbChanged(type=MODIFIED, pdb=PDB.record(pdb("cache", match_labels={"app": "queue"}))))
    handler.handle(PdbDeleted(pdb=PDB.record(pdb("cache", match_labels={"app": "queue"}))))
    assert state.snapshot().verdict(NOW) is first
    # One that covers a pod of the node: a new verdict.
    handler.handle(PdbChanged(type=MODIFIED, pdb=PDB.record(pdb("web", match_labels={"app": "web"},
                                                                disruptions_allowed=1))))
    after = state.snapshot().verdict(NOW)
    assert after is not first and not after.blockers


def test_a_pdb_moved_from_one_pod_to_another_changes_both():
    state, handler = started([owned("a"), owned("b")], [pdb("guard", match_labels={"app": "a"})])
    assert blocked(state) == {"a"} and kept(state) == {"a": ["guard"], "b": []}
    handler.handle(PdbChanged(type=MODIFIED, pdb=PDB.record(pdb("guard", match_labels={"app": "b"}))))
    assert blocked(state) == {"b"} and kept(state) == {"a": [], "b": ["guard"]}
    handler.handle(PdbDeleted(pdb=PDB.record(pdb("guard", match_labels={"app": "b"}))))
    assert blocked(state) == set() and kept(state) == {"a": [], "b": []}


def test_a_malformed_pdb_of_a_pods_namespace_is_said_though_it_covers_no_pod():
    state, handler = started([owned("a")])
    bad = pdb("bad", match_expressions=[{"key": "app", "operator": "Near", "values": ["a"]}])
    handler.handle(PdbChanged(type=ADDED, pdb=PDB.record(bad)))
    assert any("bad" in p for p in state.snapshot().verdict(NOW).problems)
    handler.handle(PdbDeleted(pdb=PDB.record(bad)))
    assert not any("bad" in p for p in state.snapshot().verdict(NOW).problems)


@pytest.mark.parametrize("max_pdbs", [None, 5])
def test_kept_coverings_equal_a_scan_of_every_pdb_through_random_events(max_pdbs):
    """With a maximum the PDBs also become unknown and known again (a LIST within it)."""
    rng = random.Random(38)
    state, handler = started(max_pdbs=max_pdbs)
    live: dict[str, dict] = {}
    written: dict[str, PdbRecord] = {}  # the PDBs as the cluster holds them
    unknown = 0  # steps with the PDBs over the maximum
    keys, values = ["app", "tier", "x"], ["a", "b", ""]
    for step in range(600):
        action, name = rng.random(), f"p{rng.randrange(10)}"
        if action < 0.35:
            labels = {rng.choice(keys): rng.choice(values) for _ in range(rng.randrange(4))}
            p = owned(name, namespace=rng.choice(["default", "tenant"]), labels=labels)
            handler.handle(PodChanged(type=MODIFIED if name in live else ADDED, pod=POD.record(p)))
            live[name] = p
        elif action < 0.4 and name in live:
            handler.handle(PodDeleted(pod=POD.record(live.pop(name))))
        elif action < 0.9:
            exprs = [{"key": rng.choice(keys), "operator": rng.choice(["In", "NotIn", "Exists", "DoesNotExist"]),
                      **({"values": rng.sample(values, 2)} if rng.random() < 0.6 else {})}
                     for _ in range(rng.randrange(2))]
            guard = pdb(f"g{rng.randrange(8)}", namespace=rng.choice(["default", "tenant"]),
                        match_labels={rng.choice(keys): rng.choice(values) for _ in range(rng.randrange(3))},
                        match_expressions=exprs, disruptions_allowed=rng.randrange(2), uid=f"g{rng.randrange(8)}")
            record = PDB.record(guard)
            if rng.random() < 0.8:
                handler.handle(PdbChanged(type=ADDED if record.uid not in written else MODIFIED, pdb=record))
                written[record.uid] = record
            else:
                handler.handle(PdbDeleted(pdb=record))
                written.pop(record.uid, None)
        else:
            if rng.random() < 0.5:  # some deleted while the watch was down
                written = {u: r for u, r in written.items() if rng.random() < 0.8}
            listed = tuple(written.values())
            more = max(0, len(listed) - max_pdbs) if max_pdbs is not None else 0
            handler.handle(PdbsListed(pdbs=listed[:max_pdbs] if more else listed, more=more))
        assert kept(state) == scanned(state), f"step {step}"
        unknown += state.snapshot().pdbs is None
        assert state.snapshot().verdict(NOW) == fresh(state, NOW), f"step {step}"
    assert (unknown > 0) == (max_pdbs is not None), unknown  # the maximum's path was taken where there is one


def test_a_pdb_rewrite_over_pods_of_many_labels_costs_those_pods_not_pods_times_pdbs():
    """10 pods of 5,000 labels, 500 PDBs of their namespace: the verdict after a PDB rewrite read every pod's labels
    once per PDB (5,000 splits of 5,000 labels, seconds); now the rewrite splits at most the 10 pods' labels."""
    many = {f"k{i:05d}": "v" for i in range(5000)}
    pods = [owned(f"t{i}", namespace="tenant", labels={**many, "app": f"t{i}"}) for i in range(10)]
    pdbs = [pdb(f"b{i}", namespace="tenant", match_labels={"app": f"t{i % 10}"}) for i in range(500)]
    state, handler = started(pods, pdbs)
    state.snapshot().verdict(NOW)
    took = []
    for i in range(5):
        started_at = time.perf_counter()
        handler.handle(PdbChanged(type=MODIFIED, pdb=PDB.record(
            pdb(f"b{i}", namespace="tenant", match_labels={"app": f"t{(i + 1) % 10}"}, disruptions_allowed=i % 2))))
        state.snapshot().verdict(NOW)
        took.append(time.perf_counter() - started_at)
    assert min(took) < 0.25, took
