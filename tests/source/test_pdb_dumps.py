"""PodDisruptionBudgets in dumps and captures: read as the live watch has them, so replay and ``explain`` can answer
the verdict; a dump without any leaves them unknown (never an empty set that would clear kube-system pods)."""

from __future__ import annotations

import json

from agent.explain.view import read_dump
from agent.run.agent import Agent
from agent.source.documents import changes, pdbs_of, pods_of, read_documents
from testkit.agents import agent_config
from testkit.factory import node, pdb, pod


def api_list(kind: str, api_version: str, *objects: dict) -> dict:
    """A typed List as the API server sends it: items without their kind and apiVersion."""
    items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in objects]
    return {"kind": f"{kind}List", "apiVersion": api_version, "metadata": {"resourceVersion": "7"}, "items": items}


def test_a_typed_pdb_list_is_read_as_pdbs_and_never_as_pods():
    document = api_list("PodDisruptionBudget", "policy/v1", pdb("a"), pdb("b"))
    assert [p["metadata"]["name"] for p in pdbs_of(document)] == ["a", "b"] and pods_of(document) == []
    # A PodList's items lack their kind too, and stay pods.
    pods = api_list("Pod", "v1", pod("web"))
    assert len(pods_of(pods)) == 1 and pdbs_of(pods) == []
    (change,) = changes([document])
    assert change.pdbs_only and len(change.pdbs) == 2


def test_kubectl_get_nodes_pods_pdb_is_one_list_of_three_kinds():
    document = {"kind": "List", "apiVersion": "v1", "items": [node("node-a"), pod("web"), pdb("web")]}
    (change,) = changes([document])
    assert (len(change.nodes), len(change.pods), len(change.pdbs), change.pdbs_only) == (1, 1, 1, False)


def test_a_dump_without_pdbs_leaves_them_unknown_and_with_them_applies_their_events():
    assert read_dump([{"kind": "List", "items": [pod("web")]}]).pdbs is None
    assert read_dump([{"kind": "List", "items": [pod("web")]},
                      api_list("PodDisruptionBudget", "policy/v1")]).pdbs == []  # listed, none
    documents = [{"kind": "List", "items": [pod("web"), pdb("a"), pdb("b")]},
                 {"type": "DELETED", "object": pdb("a")},
                 {"type": "MODIFIED", "object": pdb("b", disruptions_allowed=2)}]
    (b,) = read_dump(documents).pdbs
    assert b.name == "b" and b.disruptions_allowed == 2


def replayed(tmp_path, documents: list[dict], **config) -> Agent:
    capture = tmp_path / "capture.json"
    capture.write_text("\n".join(json.dumps(d) for d in documents))
    agent = Agent(agent_config(node_name="node-a", replay=str(capture), exporter="none", once=True, **config)).start()
    assert agent.drain()
    agent.shutdown(final_export=False)
    return agent


def test_replay_hands_on_a_pdb_list_and_its_watch_events_without_touching_the_pods(tmp_path):
    agent = replayed(tmp_path, [
        {"kind": "List", "metadata": {"resourceVersion": "5"}, "items": [node("node-a"), pod("web")]},
        # kubectl get pdb -A -o json, after the pods: PDBs only, so the pods stay.
        {"kind": "List", "metadata": {"resourceVersion": "6"}, "items": [pdb("a"), pdb("gone")]},
        {"type": "DELETED", "object": pdb("gone")},
        {"type": "ADDED", "object": pdb("new", namespace="kube-system")},
    ])
    snapshot = agent.state.snapshot()
    assert {p.name for p in snapshot.pods} == {"web"} and snapshot.node is not None
    assert {p.name for p in snapshot.pdbs} == {"a", "new"}


def test_replay_without_pdbs_leaves_them_unknown_and_over_the_maximum_says_so(tmp_path):
    agent = replayed(tmp_path, [{"kind": "List", "items": [pod("web")]}])
    assert agent.state.snapshot().pdbs is None
    over = replayed(tmp_path, [{"kind": "List", "items": [pod("web")]},
                               api_list("PodDisruptionBudget", "policy/v1", *(pdb(f"p{i}") for i in range(4)))],
                    max_pdbs=3)
    assert over.state.snapshot().pdbs is None and "holds 4 PodDisruptionBudgets" in over.state.snapshot().pdbs_problem


def test_read_documents_takes_yaml_pdbs_too():
    import yaml

    text = yaml.safe_dump_all([pod("web"), pdb("web", match_labels={"app": "web"})])
    (pdb_record,) = read_dump(read_documents(text)).pdbs
    assert pdb_record.selector.match_labels == {"app": "web"}
