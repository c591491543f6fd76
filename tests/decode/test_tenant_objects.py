"""A tenant's PDB selectors and pod labels cost the agent a bounded amount (issue 38, items 1 and 3).

The issue's attacks, as the API server admits them: one PDB whose selector is ``app In [210,000 four-letter
values]`` (1.47 MB; each agent kept ~14.5 MiB of it) and pods with 30,000 labels each (90 reached 168.6 MiB). Beyond
the bounds (agent.model.pdb.MAX_SELECTOR_BYTES, agent.model.pod.MAX_LABELS_BYTES) the part is never built as Python
objects, the record stays small, and the verdict of the pods the PDB may cover says "PDB unknown": never free,
never silently blocked. Whichever way the object arrives (a LIST item's bytes, a watch line, a parsed object, the
tolerant path), the record is the same.
"""

from __future__ import annotations

import json
import pickle
import tracemalloc

import pytest

from agent.decode.reader import PDB, POD
from agent.model.autoscaler_settings import DEFAULT_AUTOSCALER
from agent.model.drainability import NOT_ENOUGH_PDB, PDB_UNKNOWN
from agent.model.pdb import EVERY_POD, MAX_SELECTOR_BYTES, PdbRecord
from agent.model.pod import MAX_LABELS_BYTES, VM_NAME_LABEL
from agent.model.rules import NEWEST
from agent.model.scale_down import scale_down_verdict
from agent.model.valuation import evaluate
from agent.pipeline.state import NodeState
from testkit.factory import pdb, pod, vm_pod

OWNER = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}]
#: The issue's selector: 210,000 distinct four-letter values.
VALUES = [f"{chr(97 + i // 17576)}{chr(97 + i // 676 % 26)}{chr(97 + i // 26 % 26)}{chr(97 + i % 26)}"
          for i in range(210_000)]
#: What a record may weigh, whatever its object held (pickled: every string it keeps).
RECORD_BOUND = 8 * 1024


def size(obj) -> int:
    return len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def ways(kind, obj: dict):
    """The object as each reader meets it: LIST item bytes, a view of them, a watch line, parsed, tolerant."""
    data = json.dumps(obj, separators=(",", ":")).encode()
    yield "bytes", kind.record(data)
    yield "view", kind.record(kind.list_item(memoryview(bytearray(data))))
    line = kind.watch_line(json.dumps({"type": "ADDED", "object": obj}).encode())
    assert line is not None
    yield "watch", kind.record(line[1])
    yield "parsed", kind.record(json.loads(data))
    yield "tolerant", kind.tolerant(json.loads(data))


def huge_pdb(name: str = "huge", namespace: str = "tenant") -> dict:
    return pdb(name, namespace=namespace, match_expressions=[{"key": "app", "operator": "In", "values": VALUES}],
               disruptions_allowed=1)


def many_labels(count: int = 30_000) -> dict[str, str]:
    return {f"l{i:05d}": f"v{i:05d}" for i in range(count)}


def test_a_selector_over_the_bound_is_kept_as_a_small_record_read_as_covering_its_namespace():
    obj = huge_pdb()
    selector_bytes = len(json.dumps(obj["spec"]["selector"], separators=(",", ":")))
    assert selector_bytes > 1_400_000
    for way, record in ways(PDB, obj):
        assert size(record) < RECORD_BOUND, (way, size(record))
        assert record.selector == EVERY_POD and record.selector_bytes == 0, way
        assert record.selector_over_bound >= selector_bytes, way
        assert record.disruptions_allowed == 1 and record.namespace == "tenant", way
        assert any(f"over the agent's bound of {MAX_SELECTOR_BYTES:,}" in p for p in record.problems), way


def test_a_selector_within_the_bound_is_kept_whole():
    values = [f"value-{i:04d}" for i in range(100)]  # an honest long list: 100 values
    obj = pdb("long", match_expressions=[{"key": "app", "operator": "In", "values": values}])
    for way, record in ways(PDB, obj):
        assert not record.selector_over_bound and record.selector is not None, way
        assert record.selector.match_expressions[0].values == tuple(values), way
        assert 0 < record.selector_bytes < MAX_SELECTOR_BYTES, way


@pytest.mark.parametrize("path", ["bytes", "watch"])
def test_decoding_a_huge_selector_builds_none_of_it(path):
    """The transient peak too: the values are never Python strings (before: ~14.5 MiB held per PDB)."""
    data = json.dumps(huge_pdb(), separators=(",", ":")).encode()
    line = json.dumps({"type": "ADDED", "object": json.loads(data)}, separators=(",", ":")).encode()
    tracemalloc.start()
    try:
        if path == "bytes":
            record = PDB.record(data)
        else:
            typed = PDB.watch_line(line)
            assert typed is not None
            record = PDB.record(typed[1])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert record.selector_over_bound
    assert peak < 256 * 1024, f"{peak / 2**20:.1f} MiB allocated while decoding"


def test_labels_over_the_bound_are_not_kept_and_the_vm_name_is_still_read():
    labels = many_labels() | {VM_NAME_LABEL: "vm-1"}
    obj = vm_pod("vm-tenant", "vm-1", "1", "1Gi")
    obj["metadata"]["labels"] = labels
    obj["metadata"]["ownerReferences"] = OWNER
    for way, record in ways(POD, obj):
        assert size(record) < RECORD_BOUND, (way, size(record))
        assert record.eviction.labels == "" and record.eviction.labels_over_bound > MAX_LABELS_BYTES, way
        assert record.vm_name == "vm-1", way
        assert any("metadata.labels of" in p for p in record.problems), way


def test_labels_within_the_bound_are_kept():
    obj = pod("honest", labels=many_labels(300))  # ~6 KiB of labels
    for way, record in ways(POD, obj):
        assert not record.eviction.labels_over_bound, way
        assert len(record.eviction.label_map()) == 300, way


def verdict(pods: list[dict], pdbs: list[PdbRecord] | None):
    values = [evaluate(POD.record(json.dumps(p).encode()), NEWEST) for p in pods]
    return scale_down_verdict(node_name="node-a", node=None, pods=values, pdbs=pdbs, settings=DEFAULT_AUTOSCALER,
                              now=0.0)


def test_a_pod_that_a_pdb_over_the_bound_may_cover_reads_pdb_unknown_where_it_allows_no_disruption():
    allows = PDB.record(json.dumps(huge_pdb()).encode())
    strict = PDB.record(json.dumps(huge_pdb() | {"status": {"disruptionsAllowed": 0}}).encode())
    assert (allows.disruptions_allowed, strict.disruptions_allowed) == (1, 0)
    tenant = pod("web", namespace="tenant", labels={"app": "web"}, owner_references=OWNER)
    other = pod("api", namespace="other", labels={"app": "web"}, owner_references=OWNER)
    # The pdb rule blocks only for a covering PDB that allows no disruption: one that allows cannot block.
    assert verdict([tenant, other], [allows]).blockers == ()
    got = verdict([tenant, other], [strict])
    assert [(b.name, b.reason) for b in got.blockers] == [("web", PDB_UNKNOWN)]
    assert "over the agent's bound" in got.blockers[0].detail
    # A known PDB that allows nothing still says so first.
    blocking = PDB.record(json.dumps(pdb("strict", namespace="tenant", match_labels={"app": "web"},
                                         disruptions_allowed=0)).encode())
    assert [b.reason for b in verdict([tenant], [strict, blocking]).blockers] == [NOT_ENOUGH_PDB]


def test_a_pod_whose_labels_are_over_the_bound_reads_pdb_unknown_where_its_namespace_has_a_pdb():
    labelled = pod("many", namespace="tenant", labels=many_labels(), owner_references=OWNER)
    unrelated = PDB.record(json.dumps(pdb("db", namespace="tenant", match_labels={"app": "db"},
                                          disruptions_allowed=0)).encode())
    elsewhere = PDB.record(json.dumps(pdb("db", namespace="other", match_labels={"app": "db"})).encode())
    assert [b.reason for b in verdict([labelled], [unrelated]).blockers] == [PDB_UNKNOWN]
    assert verdict([labelled], [elsewhere]).blockers == ()  # no PDB of its namespace: none can cover it


def test_selectors_past_the_total_bound_are_kept_as_over_the_bound():
    records = [PDB.record(json.dumps(pdb(f"p{i}", match_expressions=[
        {"key": "app", "operator": "In", "values": [f"v{i}-{j:04d}" for j in range(500)]}])).encode())
        for i in range(5)]
    each = records[0].selector_bytes
    state = NodeState("node-a", max_selector_bytes=3 * each + 10)
    state.replace_pdbs(records)
    kept = {p.name: p for p in state.pdbs() or ()}
    assert [bool(kept[f"p{i}"].selector_over_bound) for i in range(5)] == [False, False, False, True, True]
    assert "bytes across PDBs" in kept["p3"].problems[-1]
    # Room again once one is gone: the next version of an over-bound PDB is kept.
    state.remove_pdb(records[0].uid)
    state.upsert_pdb(records[3], added=False)
    kept = {p.name: p for p in state.pdbs() or ()}
    assert not kept["p3"].selector_over_bound and kept["p3"].selector == records[3].selector
    state.upsert_pdb(records[0], added=True)
    assert {p.name: p for p in state.pdbs() or ()}["p0"].selector_over_bound


def test_a_pdb_over_the_bound_counts_the_pods_moved_anyway_as_ones_it_may_cover():
    """A pod drained before the pdb rule (safe-to-evict "true") still counts against its PDBs (CanRemovePods): one
    not known to cover it counts it apart, as a risk that is unknown, not certain."""
    huge = PDB.record(json.dumps(huge_pdb()).encode())
    safe = [pod(f"safe-{i}", namespace="tenant", annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"},
                owner_references=OWNER) for i in range(3)]
    got = verdict(safe, [huge])
    assert got.blockers == () and [(r.name, r.pods, r.unknown) for r in got.pdb_risks] == [("huge", 0, 3)]


def test_the_node_states_kept_coverings_read_pdb_unknown_too():
    """The node state matches pods to PDBs when either changes (its own index): both unknowns reach the verdict."""
    state = NodeState("node-a")
    state.replace_pdbs([PDB.record(json.dumps(pdb("db", namespace="labelled", match_labels={"app": "db"},
                                                  disruptions_allowed=0)).encode())])
    pods = [pod("web", namespace="tenant", labels={"app": "web"}, owner_references=OWNER),
            pod("many", namespace="labelled", labels=many_labels(), owner_references=OWNER),
            pod("few", namespace="labelled", labels={"app": "web"}, owner_references=OWNER)]
    state.replace([evaluate(POD.record(json.dumps(p).encode()), NEWEST) for p in pods])
    assert {b.name: b.reason for b in state.snapshot().verdict(0.0).blockers} == {"many": PDB_UNKNOWN}
    state.upsert_pdb(PDB.record(json.dumps(huge_pdb() | {"status": {"disruptionsAllowed": 0}}).encode()), added=True)
    assert {b.name: b.reason for b in state.snapshot().verdict(0.0).blockers} == {"many": PDB_UNKNOWN,
                                                                                 "web": PDB_UNKNOWN}
