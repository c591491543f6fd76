"""The cluster's PodDisruptionBudgets in the node state: a relist replaces them exactly, events follow them, and
beyond the agent's maximum they are dropped and reported as unknown, never kept partially."""

from __future__ import annotations

import logging

from agent.decode.reader import PDB
from agent.pipeline.events import ADDED, MODIFIED, PdbChanged, PdbDeleted, PdbsListed
from agent.pipeline.handler import Handler
from agent.pipeline.state import NodeState
from agent.telemetry.stats import RuntimeStats
from testkit.factory import pdb


def handler_for(state: NodeState) -> Handler:
    return Handler(state=state, metrics=RuntimeStats())


def names(state: NodeState) -> set[str]:
    pdbs = state.snapshot().pdbs
    assert pdbs is not None
    return {p.name for p in pdbs}


def test_unknown_until_listed_then_a_relist_replaces_them_exactly():
    state = NodeState("node-a")
    handler = handler_for(state)
    assert state.snapshot().pdbs is None and state.snapshot().pdbs_problem == ""
    handler.handle(PdbsListed(pdbs=(PDB.record(pdb("a")), PDB.record(pdb("b", namespace="kube-system")))))
    assert names(state) == {"a", "b"}
    handler.handle(PdbsListed(pdbs=(PDB.record(pdb("b", namespace="kube-system")), PDB.record(pdb("c")))))
    assert names(state) == {"b", "c"}  # a, deleted while the watch was down, is gone
    handler.handle(PdbsListed(pdbs=()))
    assert state.snapshot().pdbs == ()  # listed and empty: known, none (not unknown)


def test_events_add_modify_and_delete():
    state = NodeState("node-a")
    handler = handler_for(state)
    handler.handle(PdbsListed(pdbs=()))
    guard = pdb("guard", match_labels={"app": "db"}, disruptions_allowed=0)
    handler.handle(PdbChanged(type=ADDED, pdb=PDB.record(guard)))
    guard["status"]["disruptionsAllowed"] = 1
    handler.handle(PdbChanged(type=MODIFIED, pdb=PDB.record(guard)))
    (stored,) = state.snapshot().pdbs
    assert stored.disruptions_allowed == 1 and stored.selector.match_labels == {"app": "db"}
    handler.handle(PdbDeleted(pdb=PDB.record(guard)))
    assert state.snapshot().pdbs == ()


def test_snapshots_share_one_tuple_until_a_pdb_changes():
    """PDB changes are rare and exports frequent: a snapshot does not copy 10,000 PDBs each time."""
    state = NodeState("node-a")
    handler = handler_for(state)
    handler.handle(PdbsListed(pdbs=tuple(PDB.record(pdb(f"p{i}")) for i in range(50))))
    first = state.snapshot().pdbs
    assert state.snapshot().pdbs is first
    handler.handle(PdbChanged(type=ADDED, pdb=PDB.record(pdb("new"))))
    assert state.snapshot().pdbs is not first and len(state.snapshot().pdbs) == 51


def test_a_list_beyond_the_maximum_is_unknown_with_a_problem_until_a_list_within_it(caplog):
    state = NodeState("node-a", max_pdbs=3)
    handler = handler_for(state)
    with caplog.at_level(logging.WARNING, logger="agent.pipeline.handler"):
        handler.handle(PdbsListed(pdbs=tuple(PDB.record(pdb(f"p{i}")) for i in range(3)), more=2))
    snapshot = state.snapshot()
    assert snapshot.pdbs is None
    assert "holds 5 PodDisruptionBudgets" in snapshot.pdbs_problem and "--max-pdbs 3" in snapshot.pdbs_problem
    assert [r.getMessage() for r in caplog.records if "more than the 3" in r.getMessage()]
    # Events while over the limit keep the count, not the records.
    handler.handle(PdbChanged(type=ADDED, pdb=PDB.record(pdb("p5"))))
    handler.handle(PdbChanged(type=MODIFIED, pdb=PDB.record(pdb("p5"))))
    assert "holds 6 " in state.snapshot().pdbs_problem and state.snapshot().pdbs is None
    for i in range(3):
        handler.handle(PdbDeleted(pdb=PDB.record(pdb(f"p{i}"))))
    # Three remain, but which three is not known here: unknown until the source lists them again.
    assert state.snapshot().pdbs is None and "holds 3 " in state.snapshot().pdbs_problem
    handler.handle(PdbsListed(pdbs=tuple(PDB.record(pdb(f"p{i}")) for i in (3, 4, 5))))
    assert names(state) == {"p3", "p4", "p5"} and state.snapshot().pdbs_problem == ""


def test_the_watch_growing_past_the_maximum_drops_every_record():
    state = NodeState("node-a", max_pdbs=2)
    handler = handler_for(state)
    handler.handle(PdbsListed(pdbs=(PDB.record(pdb("a")),)))
    handler.handle(PdbChanged(type=ADDED, pdb=PDB.record(pdb("b"))))
    assert names(state) == {"a", "b"}
    handler.handle(PdbChanged(type=ADDED, pdb=PDB.record(pdb("c"))))
    assert state.snapshot().pdbs is None and state.pdbs_over_limit == 3
    assert "holds 3 " in state.snapshot().pdbs_problem


def test_a_malformed_pdb_is_kept_and_said_once_per_change(caplog):
    state = NodeState("node-a")
    handler = handler_for(state)
    bad = pdb("bad", namespace="team", match_expressions=[{"key": "app", "operator": "Equals", "values": ["x"]}])
    with caplog.at_level(logging.WARNING, logger="agent.pipeline.handler"):
        handler.handle(PdbsListed(pdbs=(PDB.record(bad), PDB.record(pdb("fine")))))
        bad["status"]["disruptionsAllowed"] = 1  # status churn, same problem
        handler.handle(PdbChanged(type=MODIFIED, pdb=PDB.record(bad)))
        handler.handle(PdbsListed(pdbs=(PDB.record(bad), PDB.record(pdb("fine")))))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "team/bad" in lines[0] and "unknown operator 'Equals'" in lines[0]
    assert names(state) == {"bad", "fine"}  # kept: the rest of the node is still reported


# -- the verdict the snapshot gives (model.scale_down on what the state holds) ----------------------------------

NOW = 1_800_000_000.0


def owned(name: str, namespace: str, labels: dict[str, str], kind: str = "ReplicaSet") -> dict:
    from testkit.factory import pod

    p = pod(name, namespace=namespace, labels=labels,
            owner_references=[{"apiVersion": "apps/v1", "kind": kind, "name": f"{name}-owner", "uid": f"u-{name}",
                               "controller": True}])
    p["metadata"]["creationTimestamp"] = "2027-01-15T08:00:00Z"  # 1,800,000,000 s is 2027-01-15T08:00:00Z
    return p


def verdict_of(state: NodeState):
    return state.snapshot().verdict(NOW + 60)


def reasons(verdict) -> dict[str, str]:
    return {b.name: b.reason for b in verdict.blockers}


def node_state(**kwargs) -> tuple[NodeState, Handler]:
    from agent.decode.reader import NODE, POD
    from agent.pipeline.events import NodeListed, PodsListed
    from testkit.factory import node

    state = NodeState("node-a", **kwargs)
    handler = handler_for(state)
    handler.handle(NodeListed(node=NODE.record(node("node-a"))))
    handler.handle(PodsListed(pods=(POD.record(owned("dns", "kube-system", {"k8s-app": "kube-dns"})),
                                    POD.record(owned("db", "team", {"app": "db"})))))
    return state, handler


def test_without_listed_pdbs_a_kube_system_pod_blocks_unless_a_pdb_covers_it():
    state, _ = node_state()
    verdict = verdict_of(state)
    assert verdict.pdbs_known is False
    assert reasons(verdict) == {"dns": "kube_system_pdb_unknown"}


def test_the_verdict_follows_the_pdbs_of_the_pods_namespaces():
    state, handler = node_state()
    # A PDB elsewhere with the same labels covers nothing here.
    handler.handle(PdbsListed(pdbs=(PDB.record(pdb("dns", namespace="other", match_labels={"k8s-app": "kube-dns"},
                                                   disruptions_allowed=0)),)))
    verdict = verdict_of(state)
    assert verdict.pdbs_known is True and reasons(verdict) == {"dns": "unmovable_kube_system"}
    handler.handle(PdbChanged(type=ADDED, pdb=PDB.record(pdb("dns", namespace="kube-system",
                                                             match_labels={"k8s-app": "kube-dns"},
                                                             disruptions_allowed=1))))
    handler.handle(PdbChanged(type=ADDED, pdb=PDB.record(pdb("db", namespace="team", match_labels={"app": "db"},
                                                             disruptions_allowed=0))))
    assert reasons(verdict_of(state)) == {"db": "not_enough_pdb"}
    handler.handle(PdbChanged(type=MODIFIED, pdb=PDB.record(pdb("db", namespace="team", match_labels={"app": "db"},
                                                              disruptions_allowed=1))))
    assert reasons(verdict_of(state)) == {}


def test_a_malformed_pdb_is_a_problem_of_the_verdict_and_the_rest_of_the_node_is_reported():
    state, handler = node_state()
    bad = pdb("db", namespace="team", match_expressions=[{"key": "app", "operator": "Equals", "values": ["db"]}])
    handler.handle(PdbsListed(pdbs=(PDB.record(bad), PDB.record(pdb("unrelated", namespace="elsewhere",
                                                                    match_expressions=[{"key": "x", "operator": "Bad"}])))))
    verdict = verdict_of(state)
    assert reasons(verdict) == {"dns": "unmovable_kube_system"}  # the bad selector covers no pod
    (said,) = [p for p in verdict.problems if "PodDisruptionBudget" in p]
    assert "team/db" in said and "unknown operator 'Equals'" in said  # the other namespace's is not this node's
    assert verdict.state == "underutilized" and verdict.utilization.value is not None


def test_over_the_maximum_the_verdict_says_the_pdbs_are_unknown_and_why():
    state, handler = node_state(max_pdbs=1)
    handler.handle(PdbsListed(pdbs=(PDB.record(pdb("a")),), more=4))
    verdict = verdict_of(state)
    assert verdict.pdbs_known is False and reasons(verdict) == {"dns": "kube_system_pdb_unknown"}
    assert any("holds 5 PodDisruptionBudgets" in p and "--max-pdbs 1" in p for p in verdict.problems)


def test_the_verdict_follows_the_autoscalers_settings_of_the_state():
    from agent.model.autoscaler_settings import parse_autoscaler_args

    settings = parse_autoscaler_args(["--skip-nodes-with-system-pods=false", "--scale-down-utilization-threshold=0"],
                                     release="1.31")
    state, _ = node_state(autoscaler=settings)
    verdict = verdict_of(state)
    assert verdict.release == "1.31" and verdict.threshold == 0.0
    assert reasons(verdict) == {} and verdict.state == "not_underutilized"
