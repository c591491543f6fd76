"""The per-pod value: NeonVM usage rules, fallbacks, and total robustness."""

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.model.fields import DecodeError
from agent.decode.reader import POD
from agent.model.quantity import NANO
from agent.model.pod_requests import pod_requests
from agent.model.rules import NEWEST, SUPPORTED
from agent.model.valuation import evaluate
from testkit.factory import GI, pod, vm_pod
from testkit.strategies import json_values, messy_pods



class Exact:
    """A PodValue (or VmUsage) with cpu and memory as exact cores and bytes."""

    def __init__(self, v):
        self._v = v
        self.cpu, self.memory = Fraction(v.cpu, NANO), Fraction(v.memory, NANO)
        if getattr(v, "vm", None) is not None:
            self.vm = Exact(v.vm)
        elif hasattr(v, "vm"):
            self.vm = None

    def __getattr__(self, name):
        return getattr(self._v, name)


def up_to_nano(x) -> Fraction:
    return Fraction(math.ceil(Fraction(x) * NANO), NANO)


def value(p):
    return Exact(evaluate(POD.record(p), NEWEST))


def test_vm_usage_replaces_the_runner_requests():
    v = value(vm_pod("r", "vm1", "250m", "1Gi"))
    assert (v.source, v.cpu, v.memory) == ("vm_usage", Fraction(1, 4), GI)
    assert (v.vm.name, v.vm.cpu, v.vm.memory, v.vm.migration_role) == ("vm1", Fraction(1, 4), GI, "")


def test_overcommit_divides_the_usage_but_not_the_raw_vm_values():
    v = value(vm_pod("r", "vm1", "2", "3000000000", overcommit={"cpu": "2500m", "memory": "1500m"}))
    assert v.cpu == Fraction(4, 5) and v.memory == 2_000_000_000
    assert v.vm.cpu == 2 and v.vm.memory == 3_000_000_000


@pytest.mark.parametrize("overcommit,cpu,memory", [
    ({"cpu": "2"}, Fraction(1, 2), 4 * GI),            # neon's patch: a missing factor leaves that dimension undivided
    ({"memory": "2"}, 1, 2 * GI),
    ({"cpu": None, "memory": "4"}, 1, GI),             # JSON null is a nil pointer there too
    ({}, 1, 4 * GI),
    ({"cpu": "2500m", "memory": "1500m", "note": "x"}, Fraction(2, 5), Fraction(8, 3) * GI),
])
def test_each_overcommit_factor_is_optional(overcommit, cpu, memory):
    v = value(vm_pod("r", "vm1", "1", "4Gi", overcommit=overcommit))
    assert (v.source, v.problems) == ("vm_usage", ())
    # Divided exactly, then rounded up to the next nano-unit as a Kubernetes quantity is.
    assert (v.cpu, v.memory) == (up_to_nano(cpu), up_to_nano(memory))
    assert (v.vm.cpu, v.vm.memory) == (1, 4 * GI)  # the raw usage is never divided


@pytest.mark.parametrize("overcommit,reason", [
    ('{"cpu": 2}', "wrong_shape"),
    ('{"memory": "0"}', "zero_factor"),
    ('{"cpu": "-2"}', "negative_quantity"),
    ('{"cpu": "fast"}', "invalid_quantity"),
    ('"2"', "wrong_shape"),
])
def test_a_present_but_bad_factor_still_disables_the_usage(overcommit, reason):
    p = vm_pod("r", "vm1", "1", "4Gi")
    p["metadata"]["annotations"]["vm.neon.tech/overcommit"] = overcommit
    v = value(p)
    assert v.source == "pod_requests"
    assert [(pr.subject, pr.reason) for pr in v.problems] == [("overcommit", reason)]


def test_invalid_overcommit_disables_the_usage():
    p = vm_pod("r", "vm1", "2", "2Gi")
    p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    p["metadata"]["annotations"]["vm.neon.tech/overcommit"] = "2.5x"
    v = value(p)
    assert (v.source, v.cpu, v.memory) == ("pod_requests", Fraction(1, 10), 64 * 2**20)
    assert [(pr.subject, pr.reason) for pr in v.problems] == [("overcommit", "invalid_json")]
    assert v.vm is not None and v.vm.cpu == 2  # the raw usage is still the VM's


def test_the_rest_of_the_pod_is_computed_as_kubernetes_does():
    # neon's patched autoscaler replaces container[0]'s requests and keeps overhead and init rules.
    p = vm_pod("r", "vm1", "1", "1Gi", overhead={"cpu": "100m", "memory": "64Mi"})
    v = value(p)
    assert v.cpu == Fraction(11, 10) and v.memory == GI + 64 * 2**20


@pytest.mark.parametrize("role", ["source", "target"])
def test_migration_role_comes_from_the_migration_owner_reference(role):
    assert value(vm_pod("r", "vm1", "1", "1Gi", role=role)).vm.migration_role == role


@pytest.mark.parametrize("annotation,reason", [
    ("{cpu: 1}", "invalid_json"),
    ("", "invalid_json"),
    ("[1, 2]", "wrong_shape"),
    ('{"cpu": 1, "memory": "1Gi"}', "wrong_shape"),
    ('{"cpu": "1"}', "missing_field"),
    ('{"cpu": "1", "memory": "lots"}', "invalid_quantity"),
    ('{"cpu": "-1", "memory": "1Gi"}', "negative_quantity"),
    ('{"cpu": "1e400", "memory": "1Gi"}', "out_of_range"),
    ('{"cpu": "1", "memory": "99999999999Ei"}', "out_of_range"),
    ('{"cpu": "1", "memory": "1Gi", "pad": "' + "x" * 5000 + '"}', "out_of_range"),
    ("[" * 3000, "invalid_json"),  # nesting deeper than the parser recurses
])
def test_bad_usage_falls_back_to_pod_requests_with_a_problem(annotation, reason):
    p = vm_pod("r", "vm1", "1", "1Gi")
    p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "300m", "memory": "256Mi"}}
    p["metadata"]["annotations"]["vm.neon.tech/usage"] = annotation
    v = value(p)
    assert v.reported and v.source == "pod_requests"
    assert (v.cpu, v.memory) == (Fraction(3, 10), 256 * 2**20)
    assert [(pr.subject, pr.reason) for pr in v.problems] == [("usage", reason)]
    assert v.vm is None


def test_zero_overcommit_factor_is_rejected_not_divided_by():
    v = value(vm_pod("r", "vm1", "1", "1Gi", overcommit={"cpu": "0", "memory": "1"}))
    assert v.source == "pod_requests"
    assert [pr.reason for pr in v.problems] == ["zero_factor"]


@pytest.mark.parametrize("phase,reported", [("Pending", True), ("Running", True), ("Unknown", True), ("", True),
                                            ("Succeeded", False), ("Failed", False)])
def test_terminal_pods_are_not_reported(phase, reported):
    assert value(pod("p", phase=phase)).reported is reported


def test_wrong_types_in_the_pod_are_problems_not_crashes():
    p = pod("odd")
    p["spec"]["containers"] = {"not": "a list"}
    p["metadata"]["annotations"] = {"vm.neon.tech/usage": {"cpu": "1"}}
    v = value(p)
    assert v.reported and v.cpu == 0
    assert {pr.subject for pr in v.problems} >= {"pod"}


def test_unidentifiable_objects_are_refused_clearly():
    with pytest.raises(DecodeError):
        POD.record({"metadata": {}})
    with pytest.raises(DecodeError):
        POD.record(["not", "a", "pod"])


def test_yaml_numbers_are_read_as_quantities():
    p = pod("yaml", containers=[{"name": "a", "resources": {"requests": {"cpu": 2, "memory": 1073741824}}}])
    v = value(p)
    assert (v.cpu, v.memory) == (2, GI)


@settings(max_examples=400, deadline=None)
@given(messy_pods())
def test_arbitrary_pods_never_raise_and_are_always_valued(p):
    try:
        record = POD.record(p)
    except DecodeError:
        assert not (isinstance(p.get("metadata"), dict) and (p["metadata"].get("uid") or p["metadata"].get("name")))
        return
    for rules in SUPPORTED:
        v = evaluate(record, rules)
        assert v.cpu >= 0 and v.memory >= 0 and v.spec_cpu >= 0 and v.spec_memory >= 0
        assert v.reported == (record.phase not in ("Succeeded", "Failed"))
        assert v.source in ("vm_usage", "pod_requests")
        assert v.rules is rules


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_json_value_as_a_pod(obj):
    try:
        record = POD.record(obj)
        for rules in SUPPORTED:
            evaluate(record, rules)
    except DecodeError:
        pass


@settings(max_examples=400, deadline=None)
@given(messy_pods(), st.lists(st.tuples(st.sampled_from(["c0", "c1", "i0", "i1", "x"]),
                                        st.sampled_from([None, {}, {"cpu": "1"}, {"cpu": "250m", "memory": "1Gi"}]),
                                        st.booleans(),
                                        st.sampled_from([None, {}, {"cpu": "1"}, {"cpu": "250m", "memory": "1Gi"}])),
                              max_size=4),
       st.booleans(), st.sampled_from(SUPPORTED))
def test_the_spec_only_sum_is_always_the_spec_only_pass(p, statuses, infeasible, rules):
    """evaluate() takes the spec-only sum from the one pass (no second one); it must be the spec-only pass's."""
    from agent.model.pod import StatusRequests

    try:
        record = POD.record(p)
    except DecodeError:
        return
    record = record._replace(statuses=tuple(StatusRequests(*s) for s in statuses), resize_infeasible=infeasible)
    spec_only = pod_requests(record, rules, use_status=False)
    v = evaluate(record, rules)
    # A NeonVM's usage replaces its first container's requests for the value, never for the spec-only sum.
    assert (v.spec_cpu, v.spec_memory) == (spec_only.cpu, spec_only.memory)
    assert (spec_only.spec_cpu, spec_only.spec_memory) == (spec_only.cpu, spec_only.memory)


def test_a_vms_annotations_are_read_as_they_now_are_at_every_evaluation():
    """The annotations' parse is kept per distinct text: a changed usage or overcommit is read anew, a change back
    reads the earlier value again, and a bad annotation is a problem of every evaluation that meets it."""
    def runner(cpu: str, overcommit: dict | None = None, usage: str | None = None):
        p = vm_pod("r", "vm1", cpu, "1Gi", overcommit=overcommit)
        if usage is not None:
            p["metadata"]["annotations"]["vm.neon.tech/usage"] = usage
        return value(p)

    assert [runner(cpu).cpu for cpu in ("1", "2", "1", "2")] == [1, 2, 1, 2]
    assert runner("2", {"cpu": "2"}).cpu == 1 and runner("2").cpu == 2 and runner("2", {"cpu": "4"}).cpu == Fraction(1, 2)
    for _ in range(2):
        bad = runner("1", usage="{broken")
        assert bad.source == "pod_requests" and [p.reason for p in bad.problems] == ["invalid_json"]
        zero = runner("1", {"cpu": "0"})
        assert zero.source == "pod_requests" and [p.reason for p in zero.problems] == ["zero_factor"]
        assert zero.vm is not None and zero.vm.cpu == 1  # the raw usage is still the VM's
