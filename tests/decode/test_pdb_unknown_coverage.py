"""Where a PDB's coverage of a pod is unknown (its selector or the pod's labels over the agent's bounds), the verdict
says "PDB unknown" exactly where the coverage would change the autoscaler's answer (issue 38's review, findings 1-5).

The autoscaler's pdb rule (simulator/drainability/rules/pdb/rule.go, 1.31.1 and 1.36.1) blocks only for a covering
PDB with DisruptionsAllowed < 1, and its system rule (rules/system/rule.go) asks only whether any PDB covers a
kube-system pod: so an unknown PDB that allows disruptions changes nothing for a pod outside kube-system, a
selector ``{}`` covers every pod whatever its labels, and no selector covers none.
"""

from __future__ import annotations

import json
import sys

from agent.decode.reader import PDB, POD
from agent.explain.view import explain_view, verdicts
from agent.model.autoscaler_settings import DEFAULT_AUTOSCALER
from agent.model.drainability import NOT_ENOUGH_PDB, NOT_SAFE_TO_EVICT, PDB_UNKNOWN, UNMOVABLE_KUBE_SYSTEM
from agent.model.pdb import (
    MAX_SELECTORS_BYTES,
    NAMESPACE_SELECTORS_BYTES,
    SMALL_SELECTOR_BYTES,
    PdbRecord,
    over_bound,
)
from agent.model.rules import NEWEST
from agent.model.scale_down import MAX_PDB_PROBLEMS, MAX_PDB_RISKS, scale_down_verdict
from agent.model.valuation import evaluate
from agent.pipeline.state import NodeState
from testkit.factory import pdb, pod

OWNER = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}]
NOW = 1_800_000_000.0
OLD = "2020-01-01T00:00:00Z"  # a kube-system pod past the autoscaler's one-hour timeout at NOW
YOUNG = "2027-01-15T07:50:00Z"  # NOW - 10 minutes


def record(obj: dict) -> PdbRecord:
    return PDB.record(json.dumps(obj).encode())


def values(*pods: dict):
    return [evaluate(POD.record(json.dumps(p).encode()), NEWEST) for p in pods]


def judge(pods: list[dict], pdbs: list[PdbRecord]):
    return scale_down_verdict(node_name="node-a", node=None, pods=values(*pods), pdbs=pdbs,
                              settings=DEFAULT_AUTOSCALER, now=NOW)


def reasons(verdict) -> dict[str, str]:
    return {b.name: b.reason for b in verdict.blockers}


def unknown(obj: dict) -> PdbRecord:
    """``obj`` as the node state keeps it once the total bound is taken: selector not kept, coverage unknown."""
    return over_bound(record(obj), 20_000, "a bound")


def many_labels() -> dict[str, str]:
    return {f"l{i:05d}": f"v{i:05d}" for i in range(30_000)} | {"app": "web"}


def test_an_unknown_pdb_that_allows_disruptions_blocks_no_pod():
    allows = unknown(pdb("web", namespace="tenant", match_labels={"app": "web"}, disruptions_allowed=3))
    web = pod("web", namespace="tenant", labels={"app": "web"}, owner_references=OWNER)
    api = pod("api", namespace="tenant", labels={"app": "api"}, owner_references=OWNER)
    assert judge([web, api], [allows]).blockers == ()
    # One that allows none may block either: unknown, never free.
    strict = unknown(pdb("web", namespace="tenant", match_labels={"app": "web"}, disruptions_allowed=0))
    got = judge([web, api], [strict])
    assert reasons(got) == {"web": PDB_UNKNOWN, "api": PDB_UNKNOWN}
    assert "tenant/web may cover it" in got.blockers[0].detail


def test_a_pod_whose_labels_are_over_the_bound_knows_the_pdbs_that_read_no_labels():
    labelled = pod("many", namespace="tenant", labels=many_labels(), owner_references=OWNER)
    every = record(pdb("every", namespace="tenant", match_labels={}, disruptions_allowed=0))
    assert every.selector is not None and not every.selector.match_labels
    assert reasons(judge([labelled], [every])) == {"many": NOT_ENOUGH_PDB}
    nothing = record(pdb("nothing", namespace="tenant", selector=False, disruptions_allowed=0))
    assert judge([labelled], [nothing]).blockers == ()
    reading = record(pdb("reading", namespace="tenant", match_labels={"app": "db"}, disruptions_allowed=0))
    assert reasons(judge([labelled], [reading])) == {"many": PDB_UNKNOWN}
    allowing = record(pdb("allowing", namespace="tenant", match_labels={"app": "db"}, disruptions_allowed=1))
    assert judge([labelled], [allowing]).blockers == ()


def kube_system(name: str, created: str, **kw) -> dict:
    obj = pod(name, namespace="kube-system", labels={"app": name}, owner_references=OWNER, **kw)
    obj["metadata"]["creationTimestamp"] = created
    return obj


def test_a_kube_system_pod_with_an_unknown_pdb_is_unknown_only_where_coverage_decides():
    allows = unknown(pdb("dns", namespace="kube-system", match_labels={"app": "dns"}, disruptions_allowed=1))
    strict = unknown(pdb("dns", namespace="kube-system", match_labels={"app": "dns"}, disruptions_allowed=0))
    old, young = kube_system("old", OLD), kube_system("young", YOUNG)
    # Past the timeout: not covered -> DrainOk; covered by one that allows -> moved: the same either way.
    assert judge([old], [allows]).blockers == ()
    # Covered by one that allows none -> blocked; not covered -> DrainOk: unknown.
    assert reasons(judge([old], [strict])) == {"old": PDB_UNKNOWN}
    # Before the timeout: not covered -> UnmovableKubeSystemPod; covered by one that allows -> moved: unknown.
    assert reasons(judge([young], [allows])) == {"young": PDB_UNKNOWN}
    # Blocked either way, for different reasons: blocks, and the detail names the other.
    unsafe = kube_system("unsafe", YOUNG, annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"})
    got = judge([unsafe], [allows])
    assert reasons(got) == {"unsafe": UNMOVABLE_KUBE_SYSTEM}
    assert NOT_SAFE_TO_EVICT in got.blockers[0].detail and "may cover it" in got.blockers[0].detail
    # A known covering PDB decides whatever the unknown one would.
    known = record(pdb("known", namespace="kube-system", match_labels={"app": "young"}, disruptions_allowed=1))
    assert judge([young], [allows, known]).blockers == ()


def test_pdb_risk_counts_the_pods_an_unknown_pdb_may_cover_apart():
    allows = unknown(pdb("web", namespace="tenant", match_labels={"app": "web"}, disruptions_allowed=1))
    known = record(pdb("known", namespace="tenant", match_labels={"app": "web"}, disruptions_allowed=1))
    pods = [pod(f"web-{i}", namespace="tenant", labels={"app": "web"}, owner_references=OWNER) for i in range(3)]
    got = judge(pods, [allows, known])
    assert [(r.name, r.pods, r.unknown) for r in got.pdb_risks] == [("known", 3, 0), ("web", 0, 3)]
    # Within the allowance even if it covers them all: no risk said.
    roomy = unknown(pdb("web", namespace="tenant", match_labels={"app": "web"}, disruptions_allowed=3))
    assert judge(pods, [roomy]).pdb_risks == ()


def test_the_risks_a_verdict_holds_are_capped_and_the_rest_counted():
    count = MAX_PDB_RISKS + 7
    pdbs = [record(pdb(f"p{i:03d}", namespace="tenant", match_labels={}, disruptions_allowed=1))
            for i in range(count)]
    pods = [pod(f"web-{i}", namespace="tenant", owner_references=OWNER) for i in range(2)]
    got = judge(pods, pdbs)
    assert len(got.pdb_risks) == MAX_PDB_RISKS and got.pdb_risks_more == 7
    assert [r.name for r in got.pdb_risks] == [f"p{i:03d}" for i in range(MAX_PDB_RISKS)]


def large(name: str, namespace: str, size: int) -> dict:
    """A PDB whose selector's JSON is about ``size`` bytes (``app In`` 8-character values, as json.dumps spaces them)."""
    return pdb(name, namespace=namespace, match_expressions=[
        {"key": "app", "operator": "In", "values": [f"{name[:3]}{j:05d}" for j in range(size // 13)]}],
        disruptions_allowed=0)


def test_a_tenants_large_selectors_take_its_namespaces_share_and_never_an_honest_pdb():
    """128 tenant PDBs of ~16 KiB filled the 2 MiB total, and every later PDB of any namespace was unknown."""
    flood = [record(large(f"t{i:03d}", "tenant", 16_000)) for i in range(128)]
    other = [record(large(f"o{i:03d}", f"other-{i}", 16_000)) for i in range(3)]
    honest = record(pdb("web", namespace="honest", match_labels={"app": "web"}, disruptions_allowed=0))
    state = NodeState("node-a")
    state.replace_pdbs([*flood, honest, *other])
    kept = {p.name: p for p in state.pdbs() or ()}
    tenant_kept = sum(not kept[p.name].selector_over_bound for p in flood)
    assert tenant_kept == NAMESPACE_SELECTORS_BYTES // flood[0].selector_bytes
    assert not kept["web"].selector_over_bound and all(not kept[p.name].selector_over_bound for p in other)
    assert "its namespace's share" in kept["t127"].problems[-1]
    state.replace(values(pod("web", namespace="honest", labels={"app": "web"}, owner_references=OWNER),
                         pod("app", namespace="tenant", labels={"app": "x"}, owner_references=OWNER)))
    got = state.snapshot().verdict(NOW)
    assert reasons(got) == {"web": NOT_ENOUGH_PDB, "app": PDB_UNKNOWN}
    # One line per over-bound PDB of the node's namespaces was added: at most MAX_PDB_PROBLEMS and a count.
    pdb_lines = [p for p in got.problems if p.startswith("PodDisruptionBudget ") or p.startswith("... and ")]
    assert len(pdb_lines) == MAX_PDB_PROBLEMS + 1 and pdb_lines[-1].startswith("... and ")


def test_small_selectors_never_count_against_the_total():
    state = NodeState("node-a", max_selector_bytes=1)
    sizes = (record(pdb("web", namespace="a", match_expressions=[
        {"key": "app", "operator": "In", "values": [f"v{j:03d}" for j in range(n)]}])) for n in range(1, 100))
    small = max((r for r in sizes if r.selector_bytes <= SMALL_SELECTOR_BYTES), key=lambda r: r.selector_bytes)
    assert small.selector_bytes > SMALL_SELECTOR_BYTES - 10
    state.replace_pdbs([small])
    state.upsert_pdb(record(pdb("api", namespace="a", match_labels={"app": "api"})), added=True)
    assert not any(p.selector_over_bound for p in state.pdbs() or ())
    assert MAX_SELECTORS_BYTES // NAMESPACE_SELECTORS_BYTES == 32


def test_explain_keeps_the_pdbs_as_the_agent_does():
    flood = [record(large(f"t{i:03d}", "tenant", 16_000)) for i in range(8)]
    pods = values(pod("app", namespace="tenant", labels={"app": "x"}, owner_references=OWNER))
    view = explain_view([v.record for v in pods if v.record is not None], [], NEWEST)
    explained = verdicts(view, flood, DEFAULT_AUTOSCALER, NOW)["node-a"]
    state = NodeState("node-a")
    state.replace_pdbs(flood)
    state.replace(pods)
    live = state.snapshot().verdict(NOW)
    assert reasons(explained) == reasons(live) == {"app": PDB_UNKNOWN}
    assert explained.problems == live.problems
    # Over --max-pdbs: the PDBs are unknown, as the agent says.
    over = verdicts(view, flood, DEFAULT_AUTOSCALER, NOW, max_pdbs=5)["node-a"]
    assert not over.pdbs_known and any("more than the agent keeps (--max-pdbs 5)" in p for p in over.problems)


def calls_while(action) -> int:
    """How many Python function calls ``action`` makes: a count of work, not a timing."""
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    return count


def test_a_pdb_event_costs_the_pods_it_reaches_not_the_pdbs_covering_them():
    """10,000 match-all PDBs made each PDB rewrite re-sort every pod's whole covering (~0.10 s of handler CPU); a
    pod's status update, which keeps its covering, must not walk it either."""
    def rewrite_cost(pdbs: int) -> int:
        state = NodeState("node-a")
        records = [record(pdb(f"p{i:05d}", namespace="tenant", match_labels={}, disruptions_allowed=1))
                   for i in range(pdbs)]
        state.replace_pdbs(records)
        state.replace(values(*(pod(f"web-{i}", namespace="tenant", owner_references=OWNER) for i in range(10))))
        middle = records[pdbs // 2]
        changed = PDB.record(json.dumps(pdb(middle.name, namespace="tenant", match_labels={},
                                            disruptions_allowed=0)).encode())
        narrowed = PDB.record(json.dumps(pdb(middle.name, namespace="tenant", match_labels={"app": "none"},
                                             disruptions_allowed=0)).encode())
        cost = calls_while(lambda: state.upsert_pdb(changed, added=False))
        cost += calls_while(lambda: state.upsert_pdb(narrowed, added=False))  # out of every covering
        cost += calls_while(lambda: state.upsert_pdb(changed, added=False))  # back into the middle of each
        again = values(pod("web-0", namespace="tenant", owner_references=OWNER, resource_version="999999"))[0]
        cost += calls_while(lambda: state.upsert(again))  # a status update keeps the pod's covering
        assert {b.reason for b in state.snapshot().verdict(NOW).blockers} == {NOT_ENOUGH_PDB}
        return cost

    small, big = rewrite_cost(100), rewrite_cost(2_000)
    assert big <= small * 1.2, (small, big)
