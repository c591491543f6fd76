"""The vectors of tests/model/vectors/, asked of the cluster-autoscaler's own code (the oracle).

The vectors were transcribed from the autoscaler's tests or computed by hand; tests/model/ checks the agent against
them. Here the autoscaler itself checks the vectors: where the oracle disagrees with one, the vector is wrong.

* drainability.json: the whole default chain's outcome for each pod (``expect``), under 1.36.1;
* utilization.json: simulator/utilization.Calculate (within the file's epsilon, as upstream's InEpsilon), 1.36.1;
  upstream builds the NodeInfo from its pod objects directly, so pods here are bound to the vector's node and given
  distinct names (two of upstream's pods share the name p1; a pod lister keys them by namespace/name);
* pdb_tracker.json: ``can_disrupt`` (no pod blocked by a PDB) under 1.36.1 (``in_parallel`` is the tracker's
  CanRemovePods across pods, which the oracle does not ask);
* neon.json: the requests each release counts, read off a probe node whose allocatable is 1m cpu and 1m memory (the
  utilization is then the pods' summed MilliValue, exactly), for the builds the oracle has (neon, 1.36); and the
  system-pod timeout per release;
* found_by_oracle.json: the disagreements the differential test found, per release.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agent.model.quantity import parse_quantity
from testkit.autoscaler_oracle import (AGENT_REASONS, ORACLE_RELEASES, AutoscalerOracle, NodeJudgement, OracleError,
                                       exact)

pytestmark = pytest.mark.autoscaler

VECTORS = Path(__file__).parents[1] / "model" / "vectors"
DRAIN = json.loads((VECTORS / "drainability.json").read_text())
UTIL = json.loads((VECTORS / "utilization.json").read_text())
TRACKER = json.loads((VECTORS / "pdb_tracker.json").read_text())
NEON = json.loads((VECTORS / "neon.json").read_text())
FOUND = json.loads((VECTORS / "found_by_oracle.json").read_text())
# The agent's release names -> the oracle's builds.
BUILDS = {release: build for build, release in ORACLE_RELEASES.items()}


def listing(*objects: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": list(objects)}


def on_node(node: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods bound to ``node``, each with a distinct name (the NodeInfo upstream's tests build directly)."""
    out = []
    for i, p in enumerate(pods):
        p = json.loads(json.dumps(p))
        p["spec"]["nodeName"] = node["metadata"]["name"]
        p["metadata"]["name"] = f"{p['metadata']['name']}-{i}"
        out.append(p)
    return out


def blocked(n: NodeJudgement) -> list[str]:
    return [AGENT_REASONS[p.blocking_reason] for p in n.pods if p.blocks]


# A label value as the API server validates it (k8s.io/apimachinery IsValidLabelValue).
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def refused_by_the_api_server(pdbs: list[dict[str, Any]]) -> bool:
    """A PDB whose selector holds a label value the API server refuses (upstream's system rule test builds one)."""
    return any(len(v) > 63 or not LABEL_VALUE.fullmatch(v) for pdb in pdbs
               for v in (pdb.get("spec", {}).get("selector") or {}).get("matchLabels", {}).values())


@pytest.mark.parametrize("case", DRAIN["cases"], ids=lambda c: f"{c['rule']}: {c['upstream']}")
def test_drainability_vectors(oracles: dict[str, AutoscalerOracle], case):
    if refused_by_the_api_server(case["pdbs"]):
        # The running autoscaler's SetPdbs fails on it and its whole loop with it (initializeRemainingPdbTracker:
        # InternalError): no verdict on any node. Upstream's rule test ignores that error; no cluster holds such a PDB.
        with pytest.raises(OracleError, match="pdb tracker"):
            oracles["1.36.1"].ask(listing(DRAIN["node"], case["pod"], *case["pdbs"]), flags=case["args"],
                                  now=DRAIN["now"])
        return
    answer = oracles["1.36.1"].ask(listing(DRAIN["node"], case["pod"], *case["pdbs"]), flags=case["args"],
                                   now=DRAIN["now"])
    assert blocked(answer.node(DRAIN["node"]["metadata"]["name"])) == ([case["expect"]] if case["expect"] else [])


@pytest.mark.parametrize("case", UTIL["cases"], ids=lambda c: c["upstream"])
def test_utilization_vectors(oracles: dict[str, AutoscalerOracle], case):
    node = case["node"]
    flags = [*case["args"], "--gpu-label=cloud.google.com/gke-accelerator"]  # the label upstream's provider has
    got = oracles["1.36.1"].ask(listing(node, *on_node(node, case["pods"])), flags=flags, now=UTIL["now"])
    n, want = got.node(node["metadata"]["name"]), case["expect"]
    if want["value"] is None:
        assert n.utilization is None and n.utilization_error
        return
    assert n.utilization is not None
    assert exact(n.utilization.value) == pytest.approx(want["value"], rel=UTIL["epsilon"])
    if "cpu" in want:
        assert exact(n.utilization.cpu) == pytest.approx(want["cpu"], rel=UTIL["epsilon"] / 2)
    if "resource" in want:
        assert n.utilization.resource == want["resource"]


@pytest.mark.parametrize("case", TRACKER["cases"], ids=lambda c: c["upstream"])
def test_pdb_tracker_vectors(oracles: dict[str, AutoscalerOracle], case):
    got = oracles["1.36.1"].ask(listing(TRACKER["node"], *case["pods"], *case["pdbs"]), now=TRACKER["now"])
    assert ("not_enough_pdb" not in blocked(got.node(TRACKER["node"]["metadata"]["name"]))) is case["can_disrupt"]


PROBE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node"},
         "status": {"allocatable": {"cpu": "1m", "memory": "1m", "pods": "110"}}}


def counted(oracle: AutoscalerOracle, pod: dict[str, Any], now: str) -> tuple[int, int]:
    """The pod's cpu and memory as the release counts them, in nano-units (the probe node's ratios are the summed
    MilliValue of each, exact below 2**53)."""
    n = oracle.ask(listing(PROBE, *on_node(PROBE, [pod])), now=now).node("node")
    assert n.utilization is not None
    return int(exact(n.utilization.cpu)) * 10**6, int(exact(n.utilization.memory)) * 10**6


@pytest.mark.parametrize("case", NEON["requests"], ids=lambda c: c["name"])
def test_requests_by_release(oracles: dict[str, AutoscalerOracle], case):
    asked = {r: v for r, v in case["releases"].items() if r in BUILDS}
    assert asked, "a vector no oracle can check"
    for release, (cpu, memory) in asked.items():
        got = counted(oracles[BUILDS[release]], case["pod"], NEON["now"])
        assert got == (parse_quantity(cpu), parse_quantity(memory)), release


@pytest.mark.parametrize("case", NEON["system_pod_timeout"], ids=lambda c: c["name"])
def test_system_pod_timeout_by_release(oracles: dict[str, AutoscalerOracle], case):
    p = {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "coredns", "namespace": "kube-system", "uid": "u", "creationTimestamp": case["created"],
                      "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                           "controller": True}]},
         "spec": {"nodeName": "node", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}}
    for release, blocks in case["blocks"].items():
        if release in BUILDS:
            got = oracles[BUILDS[release]].ask(listing(PROBE, p), now=NEON["now"]).node("node")
            assert blocked(got) == (["unmovable_kube_system"] if blocks else []), release


@pytest.mark.parametrize("case", FOUND["cases"], ids=lambda c: f"{c['release']}: {c['name']}")
def test_found_by_oracle_vectors(oracles: dict[str, AutoscalerOracle], case):
    """Each disagreement the differential test found, as the autoscaler computes it (tests/model checks the agent)."""
    got = oracles[BUILDS[case["release"]]].ask(case["dump"], flags=case["args"], now=FOUND["now"])
    n, want = got.node(case["node"]), case["expect"]
    assert n.gpu is not None if want["gpu_node"] else n.gpu is None
    assert n.threshold == want["threshold"]
    if want["value"] is None:  # the autoscaler's function errs (e.g. an allocatable whose MilliValue() is 0)
        assert n.utilization is None and n.utilization_error and want["state"] == "allocatable_unusable"
        return
    assert n.utilization is not None and exact(n.utilization.value) == want["value"]
    assert n.utilization.resource == want["resource"]
    assert ("underutilized" if n.underutilized else "not_underutilized") == want["state"]


# -- the oracle's own contract -------------------------------------------------------------

def _pod(name: str, **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": name, **metadata},
            "spec": {"nodeName": "node", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"}}


def test_a_zero_overcommit_factor_is_a_panic_of_neons_patch_named_for_its_pod(oracles):
    vm = _pod("vm", annotations={"vm.neon.tech/usage": '{"cpu": "1", "memory": "1Gi"}',
                                 "vm.neon.tech/overcommit": '{"cpu": "0"}'})
    neon = oracles["neon"].ask(listing(PROBE, vm, _pod("other")), now=NEON["now"]).node("node")
    assert "divide by zero" in neon.panic["default/vm"] and [p.name for p in neon.pods] == ["other"]
    upstream = oracles["1.36.1"].ask(listing(PROBE, vm), now=NEON["now"]).node("node")
    assert not upstream.panic and [p.name for p in upstream.pods] == ["vm"]


def test_controllers_are_looked_up_only_when_the_dump_holds_some(oracles):
    """No controller object in the dump: no listers (as the agent in its pod); one, whichever: the ReplicaSet the pod
    names is looked up and, missing, blocks as ControllerNotFound."""
    owned = _pod("web", ownerReferences=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "gone",
                                          "uid": "u", "controller": True}])
    other = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "other", "namespace": "default"}}
    for build in ORACLE_RELEASES:
        assert blocked(oracles[build].ask(listing(PROBE, owned), now=NEON["now"]).node("node")) == []
        with_listers = oracles[build].ask(listing(PROBE, owned, other), now=NEON["now"]).node("node")
        assert blocked(with_listers) == ["controller_not_found"], build
