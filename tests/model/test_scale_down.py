"""The cluster-autoscaler's verdict on a node, against the autoscaler's own test cases.

tests/model/vectors/ holds the upstream cases as data, each pod and PDB as the API server serves it, so every
vector runs through the decode path (the fast msgspec path and the tolerant one) and then scale_down_verdict:

* drainability.json: the cases of cluster-autoscaler's simulator/drainability/rules/*/rule_test.go (repo and
  commit per file in the file's "source"), each with the rule's own outcome (``upstream_outcome``) and the outcome
  of the whole default chain (``expect``), which is the rule's where the rule decides;
* utilization.json: simulator/utilization/info_test.go's TestCalculate and the non-DRA cases of
  TestCalculateWithDynamicResources;
* pdb_tracker.json: core/scaledown/pdb/basic_test.go's TestBasicCanRemovePods, the PDB allowance counted across the
  pods of one node (a PDB allowing no disruption blocks; one allowing fewer than it covers makes the node risky);
* neon.json: neon's patched autoscaler on its pre-1.33 base, and the release-dependent parts (which requests each
  release computes, the system-pod timeout), computed by hand from the helpers each release vendors.

What the vectors could not express is listed in each file's ``not_expressed``.
"""

from __future__ import annotations

import calendar
import json
import time
from fractions import Fraction
from pathlib import Path

import pytest

from agent.decode.reader import NODE, PDB, POD
from agent.model.autoscaler_requests import requests_of_release
from agent.model.autoscaler_rules import rules_of_release
from agent.model.autoscaler_settings import (
    AutoscalerArgError,
    AutoscalerSettings,
    parse_autoscaler_args,
    parse_go_duration,
)
from agent.model.controllers import ControllerRecord, controller_index
from agent.model.drainability import CONTROLLER_NOT_FOUND, MIN_REPLICAS_REACHED, ON_COMPLETION, Clock, DrainPod
from agent.model.node import NodeRecord
from agent.model.pdb import LabelSelector, PdbRecord, Requirement, selects
from agent.model.quantity import NANO, parse_quantity
from agent.model.rules import RULES_1_36
from agent.model.scale_down import (
    ALLOCATABLE_UNUSABLE,
    KUBE_SYSTEM_PDB_UNKNOWN,
    LOCAL_STORAGE,
    NO_NODE,
    NOT_ENOUGH_PDB,
    NOT_REPLICATED,
    NOT_SAFE_TO_EVICT,
    NOT_UNDERUTILIZED,
    REASONS,
    SCALE_DOWN_DISABLED,
    UNDERUTILIZED,
    UNMOVABLE_KUBE_SYSTEM,
    scale_down_verdict,
)
from agent.model.valuation import evaluate
from testkit.factory import container, node, pod

VECTORS = Path(__file__).parent / "vectors"
DRAIN = json.loads((VECTORS / "drainability.json").read_text())
UTIL = json.loads((VECTORS / "utilization.json").read_text())
NEON = json.loads((VECTORS / "neon.json").read_text())
TRACKER = json.loads((VECTORS / "pdb_tracker.json").read_text())

# Upstream's drain.BlockingPodReason names -> the agent's reasons.
UPSTREAM_REASONS = {"NotReplicated": NOT_REPLICATED, "UnmovableKubeSystemPod": UNMOVABLE_KUBE_SYSTEM,
                    "NotSafeToEvictAnnotation": NOT_SAFE_TO_EVICT, "LocalStorageRequested": LOCAL_STORAGE,
                    "NotEnoughPdb": "not_enough_pdb"}


def epoch(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


def both_paths(kind, obj):
    """The record by the fast path and by the tolerant one; they must agree."""
    fast, tolerant = kind.record(json.dumps(obj).encode()), kind.tolerant(obj)
    assert fast == tolerant
    return fast


def verdict(pods, node_obj, *, pdbs=(), args=(), release=None, now, controllers=None):
    values = [evaluate(both_paths(POD, p), RULES_1_36) for p in pods]
    records = None if pdbs is None else [both_paths(PDB, d) for d in pdbs]
    settings = parse_autoscaler_args(args, release=release)
    node_record = None if node_obj is None else both_paths(NODE, node_obj)
    return scale_down_verdict(node_name="node", node=node_record, pods=values, pdbs=records, settings=settings,
                              now=now, controllers=controllers)


@pytest.mark.parametrize("case", DRAIN["cases"], ids=lambda c: f"{c['rule']}: {c['upstream']}")
def test_upstream_drainability_rules(case):
    outcome = case["upstream_outcome"]
    if outcome.startswith("blocked:"):  # where the rule itself blocks, the chain reports its reason
        assert case["expect"] == UPSTREAM_REASONS[outcome.split(":", 1)[1]]
    elif outcome in ("drainable", "skip"):
        assert case["expect"] is None
    got = verdict([case["pod"]], DRAIN["node"], pdbs=case["pdbs"], args=case["args"], now=epoch(DRAIN["now"]))
    assert [b.reason for b in got.blockers] == ([case["expect"]] if case["expect"] else [])
    # The one documented reading upstream's cases exercise: a local-volumes list naming no volume of the pod.
    assert all("safe-to-evict-local-volumes names" in problem for problem in got.problems)


def test_the_drainability_vectors_name_their_source():
    assert DRAIN["source"]["repo"] == "kubernetes/autoscaler" and len(DRAIN["source"]["commits"]) == 10
    assert len(DRAIN["cases"]) == 49



@pytest.mark.parametrize("case", TRACKER["cases"], ids=lambda c: c["upstream"])
def test_upstream_pdb_allowance_across_the_node(case):
    """CanRemovePods on the node's pods: cannot disrupt <=> a pod blocked by a PDB allowing none (the PDB rule);
    not in parallel <=> a PDB covering more of the node's pods to move than it allows (the node stays removable)."""
    got = verdict(case["pods"], TRACKER["node"], pdbs=case["pdbs"], now=epoch(TRACKER["now"]))
    assert (NOT_ENOUGH_PDB not in {b.reason for b in got.blockers}) is case["can_disrupt"]
    assert {b.reason for b in got.blockers} <= {NOT_ENOUGH_PDB}
    assert (not got.pdb_risks) is case["in_parallel"]


def test_two_pods_of_a_pdb_allowing_one_do_not_block_the_node_but_make_it_risky():
    pods = [pod(f"web-{i}", namespace="ns", labels={"app": "web"}, owner_references=rs()) for i in range(3)]
    one = {"metadata": {"name": "web", "namespace": "ns", "uid": "p"},
           "spec": {"selector": {"matchLabels": {"app": "web"}}}, "status": {"disruptionsAllowed": 1}}
    got = verdict(pods, node("node"), pdbs=[one], now=NOW)
    assert not got.blockers and got.candidate
    assert [(r.name, r.disruptions_allowed, r.pods) for r in got.pdb_risks] == [("web", 1, 3)]
    one["status"]["disruptionsAllowed"] = 3
    assert not verdict(pods, node("node"), pdbs=[one], now=NOW).pdb_risks


def test_the_pdb_tracker_vectors_name_their_source():
    source = TRACKER["source"]
    assert source["path"].endswith("core/scaledown/pdb/basic_test.go") and len(source["commit"]) == 40
    assert len(TRACKER["cases"]) == 6

@pytest.mark.parametrize("case", UTIL["cases"], ids=lambda c: c["upstream"])
def test_upstream_utilization(case):
    got = verdict(case["pods"], case["node"], args=case["args"], now=epoch(UTIL["now"]))
    want = case["expect"]
    if want["value"] is None:
        assert got.utilization.value is None and got.state == ALLOCATABLE_UNUSABLE and got.problems
        return
    assert got.utilization.value == pytest.approx(want["value"], rel=UTIL["epsilon"])
    if "cpu" in want:
        assert got.utilization.cpu == pytest.approx(want["cpu"], rel=UTIL["epsilon"] / 2)
    if "resource" in want:
        assert got.utilization.resource == want["resource"]


def test_the_utilization_vectors_name_their_source():
    assert UTIL["source"]["commit"] == "74cfb83fae94a8ed67ca4c66da49802a002ea0f4" and len(UTIL["cases"]) == 16


@pytest.mark.parametrize("case", NEON["requests"], ids=lambda c: c["name"])
def test_requests_by_autoscaler_release(case):
    exported = evaluate(both_paths(POD, case["pod"]), RULES_1_36)
    for release, (cpu, memory) in case["releases"].items():
        got = scale_down_verdict(node_name="node", node=both_paths(NODE, node("node")), pods=[exported], pdbs=[],
                                 settings=AutoscalerSettings(release=release), now=epoch(NEON["now"]))
        differing = {d.uid: d for d in got.differing}
        if release in case["differs"]:
            d = differing[exported.uid]
            assert (d.cpu, d.memory) == (parse_quantity(cpu), parse_quantity(memory)), release
            assert (d.scheduler_cpu, d.scheduler_memory) == (exported.cpu, exported.memory)
            assert d.why.startswith(f"cluster-autoscaler {release} (")
        else:
            assert not differing, release
            assert (exported.cpu, exported.memory) == (parse_quantity(cpu), parse_quantity(memory)), release


@pytest.mark.parametrize("case", NEON["system_pod_timeout"], ids=lambda c: c["name"])
def test_system_pod_timeout_by_release(case):
    p = pod("coredns", namespace="kube-system",
            owner_references=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": True}])
    p["metadata"]["creationTimestamp"] = case["created"]
    for release, blocks in case["blocks"].items():
        got = verdict([p], node("node"), release=release, now=epoch(NEON["now"]))
        assert [b.reason for b in got.blockers] == ([UNMOVABLE_KUBE_SYSTEM] if blocks else []), release


def test_release_mapping():
    assert (requests_of_release("neon").use_status, requests_of_release("neon").pod_level) == (False, False)
    assert (requests_of_release("1.33").use_status, requests_of_release("1.33").pod_level) == (True, False)
    assert str(requests_of_release("1.37").rules) == "1.37" and str(requests_of_release("1.36").rules) == "1.36"
    with pytest.raises(ValueError):
        requests_of_release("1.27")


# -- the verdict around the vectors ------------------------------------------------------

def rs(name="rs"):
    return [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "controller": True}]


NOW = epoch("2026-12-01T12:00:00Z")


def test_without_pdbs_a_kube_system_pod_is_reported_as_unknown_never_free():
    p = pod("dns", namespace="kube-system", owner_references=rs())
    p["metadata"]["creationTimestamp"] = "2026-12-01T11:59:00Z"
    got = verdict([p], node("node"), pdbs=None, now=NOW)
    assert [b.reason for b in got.blockers] == [KUBE_SYSTEM_PDB_UNKNOWN] and not got.pdbs_known


def test_blockers_are_reported_whatever_the_utilization():
    busy = pod("busy", containers=[container("a", "7", "1Gi")])  # no owner: not replicated
    got = verdict([busy], node("node"), now=NOW)
    assert got.state == NOT_UNDERUTILIZED and [b.reason for b in got.blockers] == [NOT_REPLICATED]


def test_scale_down_disabled_annotation_only_as_exactly_true():
    n = node("node")
    n["metadata"]["annotations"] = {"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}
    assert verdict([], n, now=NOW).state == SCALE_DOWN_DISABLED
    n["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/scale-down-disabled"] = "yes"
    got = verdict([], n, now=NOW)
    assert got.state == UNDERUTILIZED and "not \"true\"" in got.problems[0]


def test_threshold_boundary_by_release():
    """At or below the threshold (isNodeAtOrBelowUtilizationThreshold, kubernetes/autoscaler #8975): in master from
    2026-01 (so 1.36 and later) and cherry-picked to release-1.32, 1.33 and 1.34; strictly below before 1.32 (and in
    neon's 1.31.1)."""
    half = pod("half", containers=[container("a", "4", "1Gi")], owner_references=rs())
    for release in ("1.28", "1.31", "neon"):
        assert verdict([half], node("node"), release=release, now=NOW).state == NOT_UNDERUTILIZED, release
    for release in ("1.32", "1.34", "1.36", "1.37"):
        assert verdict([half], node("node"), release=release, now=NOW).state == UNDERUTILIZED, release


def test_no_node():
    got = verdict([pod("a", owner_references=rs())], None, now=NOW)
    assert got.state == NO_NODE and got.utilization.cpu is None and got.utilization.memory is None


def test_an_unusable_allocatable_is_its_own_state_not_an_unknown_node():
    got = verdict([pod("a", owner_references=rs())], node("node", allocatable_cpu="0"), now=NOW)
    assert got.state == ALLOCATABLE_UNUSABLE != NO_NODE and got.utilization.value is None
    assert got.problems == ("node allocatable cpu missing or zero: the autoscaler cannot compute the utilization",)


def test_a_kube_system_pod_without_creation_time_has_no_age_and_blocks():
    """system/rule.go's isBspPassedDisruptionTimeout checks CreationTimestamp.IsZero() first: no creation time is
    no age, so the pod blocks whatever the timeout (its rule_test "default namespace PDB with matching labels
    kube-system pod" has none and blocks under a one-minute timeout)."""
    p = pod("dns", namespace="kube-system", owner_references=rs())
    for release in ("1.32", "1.33", "1.36"):
        got = verdict([p], node("node"), release=release, now=NOW)
        assert [b.reason for b in got.blockers] == [UNMOVABLE_KUBE_SYSTEM] and got.holds_until is None, release


def test_a_kube_system_pod_past_its_timeout_is_drainable_and_ends_the_chain():
    """From 1.33 the system rule returns Drainable for a kube-system pod past the timeout, so the rules after it
    (not-safe-to-evict, local storage) never see it; before 1.33 it blocks as unmovable."""
    p = pod("dns", namespace="kube-system", owner_references=rs(),
            annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"})
    p["metadata"]["creationTimestamp"] = "2026-12-01T10:00:00Z"  # 2 h old, the timeout 1 h
    p["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    for release in ("1.33", "1.36", "1.38"):
        assert verdict([p], node("node"), release=release, now=NOW).blockers == (), release
    for release in ("1.28", "1.32", "neon"):
        got = verdict([p], node("node"), release=release, now=NOW)
        assert [b.reason for b in got.blockers] == [UNMOVABLE_KUBE_SYSTEM], release


def test_local_storage_before_not_safe_to_evict_only_in_1_28():
    p = pod("both", owner_references=rs(), annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"})
    p["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    assert [b.reason for b in verdict([p], node("node"), release="1.28", now=NOW).blockers] == [LOCAL_STORAGE]
    for release in ("1.29", "1.31", "neon", "1.36"):
        got = verdict([p], node("node"), release=release, now=NOW)
        assert [b.reason for b in got.blockers] == [NOT_SAFE_TO_EVICT], release


def test_terminal_pods_are_out_of_the_sum_and_never_block():
    done = pod("done", phase="Succeeded", containers=[container("a", "8", "1Gi")])
    got = verdict([done], node("node"), now=NOW)
    assert got.utilization.cpu == 0 and not got.blockers


def test_long_terminating_cutoff_is_strict():
    p = pod("going", containers=[container("a", "4", "1Gi")], owner_references=rs())
    p["metadata"]["deletionTimestamp"] = "2026-12-01T11:59:00Z"  # 60 s ago; grace 30 + 30 = 60: not yet strictly past
    assert verdict([p], node("node"), now=NOW).utilization.cpu == 0.5
    assert verdict([p], node("node"), now=NOW + 0.001).utilization.cpu == 0


def test_a_grace_period_past_what_go_s_duration_holds_wraps_as_the_autoscaler_computes_it():
    """IsPodLongTerminating multiplies time.Duration(grace) by time.Second in int64 nanoseconds: 10^10 s wraps to
    about -267 years, so a pod deleted just now is already long-terminating (left out, never blocks); 9223372036 s
    (the largest that fits) is 292 years ahead (found by the differential test, 1.36.1 and neon)."""
    def going(grace):
        p = pod("going", containers=[container("a", "3", "1Gi")])
        p["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:00Z"
        p["spec"]["terminationGracePeriodSeconds"] = grace
        return p
    wrapped = verdict([going(10**10)], node("node"), now=NOW)
    assert wrapped.utilization.cpu == 0 and not wrapped.blockers
    fits = verdict([going(9223372036)], node("node"), now=NOW)
    assert fits.utilization.cpu == 0.375 and [b.reason for b in fits.blockers] == ["not_replicated"]


def test_the_verdict_says_until_when_it_holds():
    """holds_until is the earliest threshold still ahead (a grace period, a kube-system pod's timeout): the verdict
    is the same at every moment up to it and differs just after; None when time alone never changes it."""
    going = pod("going", containers=[container("a", "4", "1Gi")], owner_references=rs())
    going["metadata"]["deletionTimestamp"] = "2026-12-01T11:59:30Z"  # long-terminating after 12:00:30
    dns = pod("dns", namespace="kube-system", owner_references=rs())
    dns["metadata"]["creationTimestamp"] = "2026-12-01T11:30:00Z"  # stops blocking after 12:30 (1.33 and later)
    got = verdict([going, dns], node("node"), now=NOW)
    assert got.holds_until == NOW + 30
    assert verdict([going, dns], node("node"), now=NOW + 30) == got
    after = verdict([going, dns], node("node"), now=NOW + 30.5)
    assert after.utilization.cpu < got.utilization.cpu and after.holds_until == NOW + 1800
    assert [b.reason for b in after.blockers] == [UNMOVABLE_KUBE_SYSTEM]
    later = verdict([going, dns], node("node"), now=NOW + 1800.5)
    assert not later.blockers and later.holds_until is None
    assert verdict([pod("a", owner_references=rs())], node("node"), now=NOW).holds_until is None
    assert verdict([dns], node("node"), release="1.32", now=NOW).holds_until is None  # no timeout before 1.33


# -- malformed annotations: the documented reading, and a problem line -------------------

def test_safe_to_evict_maybe_counts_as_absent_with_a_problem():
    p = pod("odd", annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "maybe"})
    got = verdict([p], node("node"), now=NOW)
    assert [b.reason for b in got.blockers] == [NOT_REPLICATED]  # neither "true" (drainable) nor "false"
    assert len(got.problems) == 1 and "'maybe'" in got.problems[0]


def test_local_volumes_list_naming_no_volume_is_ignored_with_a_problem():
    p = pod("scratchy", owner_references=rs(),
            annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes": "nope, scratch"})
    p["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}, {"name": "shm", "emptyDir": {"medium": "Memory"}},
                            {"name": "token", "projected": {"sources": []}}]
    got = verdict([p], node("node"), now=NOW)
    assert [(b.reason, b.detail) for b in got.blockers] == [(LOCAL_STORAGE, "local storage: scratch (not in "
                                                             "safe-to-evict-local-volumes)")]  # " scratch" not trimmed
    assert len(got.problems) == 1 and "'nope'" in got.problems[0] and "' scratch'" in got.problems[0]


def test_malformed_timestamps_are_problems_not_crashes():
    p = pod("t", owner_references=rs())
    p["metadata"]["deletionTimestamp"] = "yesterday"
    record = both_paths(POD, p)
    assert record.eviction.deleted is None and any("deletionTimestamp" in x for x in record.problems)


def test_a_pdb_with_an_unknown_operator_is_a_problem_and_covers_nothing():
    d = {"metadata": {"name": "x", "namespace": "default"},
         "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Like", "values": ["a"]}]}}}
    record = both_paths(PDB, d)
    assert record.problems and not selects(record, "default", {"app": "a"})


# -- label selectors ---------------------------------------------------------------------

def pdb_of(selector):
    return PdbRecord(uid="u", namespace="ns", name="p", selector=selector)


@pytest.mark.parametrize("selector, labels, matches", [
    (None, {"a": "1"}, False),
    (LabelSelector(), {}, True),
    (LabelSelector(match_labels={"a": "1"}), {"a": "1", "b": "2"}, True),
    (LabelSelector(match_labels={"a": "1"}), {"a": "2"}, False),
    (LabelSelector(match_expressions=(Requirement(key="a", operator="In", values=("1", "2")),)), {"a": "2"}, True),
    (LabelSelector(match_expressions=(Requirement(key="a", operator="In", values=("1",)),)), {}, False),
    (LabelSelector(match_expressions=(Requirement(key="a", operator="NotIn", values=("1",)),)), {}, True),
    (LabelSelector(match_expressions=(Requirement(key="a", operator="NotIn", values=("1",)),)), {"a": "1"}, False),
    (LabelSelector(match_expressions=(Requirement(key="a", operator="Exists"),)), {"a": ""}, True),
    (LabelSelector(match_expressions=(Requirement(key="a", operator="DoesNotExist"),)), {}, True),
    (LabelSelector(match_expressions=(Requirement(key="a", operator="DoesNotExist"),)), {"a": "x"}, False),
    (LabelSelector(match_labels={"a": "1"}, match_expressions=(Requirement(key="b", operator="Exists"),)),
     {"a": "1"}, False),
    (LabelSelector(match_expressions=(Requirement(key="a", operator="Bogus"),)), {"a": "1"}, False),
])
def test_selects(selector, labels, matches):
    assert selects(pdb_of(selector), "ns", labels) is matches
    assert not selects(pdb_of(selector), "other", labels)


# -- the autoscaler's flags --------------------------------------------------------------

def test_parse_reads_the_operators_args():
    s = parse_autoscaler_args(["--scale-down-utilization-threshold=0.6", "--ignore-daemonsets-utilization",
                               "--skip-nodes-with-local-storage=False", "--cloud-provider", "aws",
                               "--blocking-system-pod-distruption-timeout", "1h30m", "-v=4", "--expander=least-waste"],
                              release="neon")
    assert (s.scale_down_utilization_threshold, s.ignore_daemonsets_utilization, s.skip_nodes_with_local_storage,
            s.blocking_system_pod_distruption_timeout, s.release) == (0.6, True, False, 5400.0, "neon")


@pytest.mark.parametrize("args, release, flag", [
    (["--scale-down-utilization-threshold=1.5"], None, "--scale-down-utilization-threshold"),
    (["--scale-down-gpu-utilization-threshold=-0.1"], None, "--scale-down-gpu-utilization-threshold"),
    (["--scale-down-utilization-threshold=nan"], None, "--scale-down-utilization-threshold"),
    (["--scale-down-utilization-threshold=half"], None, "--scale-down-utilization-threshold"),
    (["--skip-nodes-with-system-pods=maybe"], None, "--skip-nodes-with-system-pods"),
    (["--blocking-system-pod-distruption-timeout=1x"], None, "--blocking-system-pod-distruption-timeout"),
    (["--blocking-system-pod-distruption-timeout"], None, "--blocking-system-pod-distruption-timeout"),
    (["scale-down-utilization-threshold=0.5"], None, "not a flag"),
    (["--ignore-daemonsets-utilization", "false"], None, "not a flag"),
    ([], "1.27", "release"),
    ([], "2.0", "release"),
])
def test_parse_refuses_bad_input_in_one_line_naming_the_flag(args, release, flag):
    with pytest.raises(AutoscalerArgError) as caught:
        parse_autoscaler_args(args, release=release)
    message = str(caught.value)
    assert flag in message and "\n" not in message


@pytest.mark.parametrize("text, seconds", [("1h", 3600), ("30m", 1800), ("90s", 90), ("1h30m", 5400), ("1.5h", 5400),
                                           ("0", 0), ("500ms", 0.5), ("2h0m0s", 7200)])
def test_go_durations(text, seconds):
    assert parse_go_duration(text) == seconds


@pytest.mark.parametrize("spelling, value", [(s, True) for s in ("1", "t", "T", "TRUE", "true", "True")]
                         + [(s, False) for s in ("0", "f", "F", "FALSE", "false", "False")])
def test_go_bool_spellings(spelling, value):
    assert parse_autoscaler_args([f"--skip-nodes-with-system-pods={spelling}"]).skip_nodes_with_system_pods is value


def test_reasons_are_bounded_words():
    assert len(set(REASONS)) == len(REASONS) and all(r.replace("_", "").isalpha() for r in REASONS)


def test_gpu_requests_sum_with_the_kep_753_formula():
    gpu_pod = pod("g", owner_references=rs(), containers=[container("a", "1", "1Gi")])
    gpu_pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
    gpu_pod["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"nvidia.com/gpu": "3"}}}]
    n = node("node")
    n["status"]["allocatable"]["nvidia.com/gpu"] = "4"
    got = verdict([gpu_pod], n, now=NOW)
    assert got.utilization.gpu == Fraction(3, 4) and got.utilization.resource == "nvidia.com/gpu"
    assert NodeRecord._fields[-3:] == ("scale_down_disabled", "gpu_label", "gpu_allocatable")
    assert got.utilization.cpu is None and NANO


def test_a_change_of_eviction_facts_alone_reaches_the_verdict():
    """reevaluate reuses the value when only the status moved, but must carry the newer eviction facts: a pod
    annotated safe-to-evict (nothing its value depends on) stops blocking."""
    from agent.model.valuation import reevaluate

    before = pod("naked", resource_version="1")
    after = pod("naked", resource_version="2", annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"})
    first = evaluate(both_paths(POD, before), RULES_1_36)
    second = reevaluate(both_paths(POD, after), first, RULES_1_36)
    n = both_paths(NODE, node("node"))
    blocked = scale_down_verdict(node_name="node", node=n, pods=[first], pdbs=[], settings=AutoscalerSettings(), now=NOW)
    freed = scale_down_verdict(node_name="node", node=n, pods=[second], pdbs=[], settings=AutoscalerSettings(), now=NOW)
    assert [b.reason for b in blocked.blockers] == [NOT_REPLICATED] and not freed.blockers
    assert (second.cpu, second.memory) == (first.cpu, first.memory)


# -- DaemonSet/mirror pods at or over the allocatable (simulator/utilization/info.go) -----------

def ds(name, cpu, memory):
    return pod(name, containers=[container("a", cpu, memory)],
               owner_references=[{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "controller": True}])


def test_daemonset_pods_over_the_allocatable_give_the_ratio_go_computes():
    """CalculateUtilizationOfResource divides float64(pods) by float64(allocatable - DaemonSet/mirror pods) as it
    falls: negative below zero, +Inf over zero; the larger by ``cpu > mem`` decides."""
    app = pod("app", containers=[container("a", "1", "1Gi")], owner_references=rs())
    args = ["--ignore-daemonsets-utilization=true"]
    over = verdict([app, ds("ds", "10", "1Gi")], node("node"), args=args, now=NOW)  # 1000m / (8000m - 10000m)
    assert over.utilization.cpu == -0.5 and over.utilization.resource == "memory"
    assert over.utilization.value == over.utilization.memory == 1 / 31 and over.state == UNDERUTILIZED
    assert any("divides 1000m by -2000m: -0.5" in p for p in over.problems)
    full = verdict([app, ds("ds", "8", "1Gi")], node("node"), args=args, now=NOW)  # 1000m / 0
    assert full.utilization.cpu == float("inf") and full.utilization.value == float("inf")
    assert full.utilization.resource == "cpu" and full.state == NOT_UNDERUTILIZED


def test_nothing_over_nothing_is_nan_and_underutilized_as_the_autoscaler_compares():
    """0 / 0 is NaN in Go; ``cpu > mem`` is then false (memory reported) and the eligibility check, !(u > t) from
    1.32 and !(u >= t) before, counts a NaN as underutilized in every release."""
    args = ["--ignore-daemonsets-utilization=true"]
    pods = [ds("ds", "8", "32Gi")]
    for release in ("1.31", "neon", "1.36"):
        got = verdict(pods, node("node"), args=args, release=release, now=NOW)
        u = got.utilization
        assert u.cpu != u.cpu and u.memory != u.memory and u.value != u.value and u.resource == "memory"
        assert got.state == UNDERUTILIZED, release


# -- controllers that are gone (rules/replicacount), and on-completion pods (rules/oncompletion) ------------

def owned(name, kind, api_version="apps/v1", **kwargs):
    return pod(name, owner_references=[{"apiVersion": api_version, "kind": kind, "name": "owner",
                                        "controller": True}], **kwargs)


def listed(*keys):
    """The autoscaler's listers as the input holds them: (kind, namespace, name) -> spec.replicas."""
    return controller_index(ControllerRecord(kind=k, namespace="default", name=n, replicas=r) for k, n, r in keys)


def test_a_pod_whose_controller_is_gone_blocks_before_anything_else_decides():
    """replicacount runs before daemonset and safetoevict: a ReplicaSet gone blocks even with safe-to-evict "true";
    its reason is its own (ControllerNotFound), for every kind it has a lister for."""
    safe = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}
    pods = [owned("rs-pod", "ReplicaSet", annotations=safe), owned("job-pod", "Job", "batch/v1"),
            owned("rc-pod", "ReplicationController", "v1"), owned("sts-pod", "StatefulSet"),
            owned("ds-pod", "DaemonSet")]
    for release in ("1.31", "neon", "1.36"):
        got = verdict(pods, node("node"), release=release, now=NOW, controllers=listed())
        assert [(b.name, b.reason) for b in got.blockers] == [(p["metadata"]["name"], CONTROLLER_NOT_FOUND)
                                                              for p in pods], release
        assert got.controllers_known
        present = listed(("ReplicaSet", "owner", 3), ("Job", "owner", None), ("ReplicationController", "owner", 1),
                         ("StatefulSet", "owner", 1), ("DaemonSet", "owner", None))
        assert not verdict(pods, node("node"), release=release, now=NOW, controllers=present).blockers, release


def test_without_controllers_the_rule_cannot_run_and_the_verdict_says_it_does_not_know():
    got = verdict([owned("rs-pod", "ReplicaSet")], node("node"), now=NOW)
    assert not got.blockers and not got.controllers_known
    off = verdict([owned("rs-pod", "ReplicaSet")], node("node"),
                  args=["--skip-nodes-with-custom-controller-pods=false"], now=NOW, controllers=listed())
    assert not off.blockers  # rules.Default skips replicacount with the flag off


def test_what_the_replicacount_rule_leaves_alone():
    """A daemonset-pod annotation with another owner kind, a DaemonSet of another group, a malformed apiVersion
    (ParseGroupVersion fails), and from 1.33 a StatefulSet of another group (#8011): not looked up."""
    ds_annotated = owned("annotated", "ReplicaSet",
                         annotations={"cluster-autoscaler.kubernetes.io/daemonset-pod": "true"})
    other_ds = owned("other-ds", "DaemonSet", "example.com/v1")
    bad_group = owned("bad", "ReplicaSet", "a/b/c")
    kruise = owned("kruise", "StatefulSet", "apps.kruise.io/v1beta1")
    got = verdict([ds_annotated, other_ds, bad_group], node("node"), now=NOW, controllers=listed())
    assert not got.blockers  # each then passes the replicated rule (a trusted kind, or a DaemonSet pod)
    assert not verdict([kruise], node("node"), release="1.36", now=NOW, controllers=listed()).blockers
    assert [b.reason for b in verdict([kruise], node("node"), release="neon", now=NOW,
                                      controllers=listed()).blockers] == [CONTROLLER_NOT_FOUND]


def test_min_replica_count_blocks_a_replicaset_or_replication_controller_below_it():
    rules = rules_of_release("1.36")
    context = rules.context(AutoscalerSettings(), Clock(NOW), [], listed(("ReplicaSet", "owner", 1)))._replace(
        min_replica_count=2)
    replica_count = next(r for r in rules.drain if r.name == "replicacount")
    facts = both_paths(POD, owned("rs-pod", "ReplicaSet")).eviction
    outcome = replica_count.check(DrainPod("default", "rs-pod", facts, []), context)
    assert outcome.blocks and outcome.reason == MIN_REPLICAS_REACHED
    assert replica_count.check(DrainPod("default", "rs-pod", facts, []), context._replace(min_replica_count=1)) is None


def test_safe_to_evict_on_completion_holds_the_node_from_1_36():
    """oncompletion (1.36.1's rules.go; not in 1.31.1's): the pod is waited for, so the node is not removed
    (BlockedByOnCompletionPod); in older releases the value is neither "true" nor "false" and ignored."""
    p = owned("batch", "Job", "batch/v1",
              annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "on-completion"})
    got = verdict([p], node("node"), release="1.36", now=NOW)
    assert [b.reason for b in got.blockers] == [ON_COMPLETION] and not got.removable and not got.problems
    for release in ("1.35", "neon"):
        older = verdict([p], node("node"), release=release, now=NOW)
        assert not older.blockers and "'on-completion'" in older.problems[0], release
