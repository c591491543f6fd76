"""neon's patched autoscaler's reading of a NeonVM pod's annotations (agent.model.neon_patch), point by point against
its Go code (utils/kubernetes/listers.go) and k8s.io/apimachinery's quantity.go, and the verdict it gives the
``neon`` release."""

from __future__ import annotations

import json

import pytest

from agent.decode.reader import NODE, POD
from agent.model.autoscaler_settings import AutoscalerSettings
from agent.model.neon_patch import GoValueError, neon_patch, parse_go_quantity, scaled_value
from agent.model.rules import RULES_1_36
from agent.model.scale_down import AUTOSCALER_CRASH, UNDERUTILIZED, scale_down_verdict
from agent.model.valuation import evaluate
from testkit.factory import container, node, pod

M, G = 10**6, 10**9  # nano-units per milli-unit, per unit


@pytest.mark.parametrize("text, milli, value", [
    ("1", 1000, 1), ("0.5", 500, 1), ("1500m", 1500, 2), ("1Gi", 1073741824000, 1073741824), ("1e3", 10**6, 1000),
    ("+", 0, 0), ("-", 0, 0), (".", 0, 0), ("Ki", 0, 0), ("1.", 1000, 1), ("0.0001", 1, 1),
    ("-1.5m", -2, -1),  # int64Amount: negativeScaleInt64 rounds away from zero
    ("-1.5e-10", 1, 1),  # the big-decimal path: rounded to -1n, then scaledValue truncates to 0 and adds 1
    ("1e18", 0, 10**18),  # MilliValue overflows int64: AsScaledInt64 gives 0
])
def test_go_quantity_scaled_values(text, milli, value):
    q = parse_go_quantity(text)
    assert (scaled_value(q, -3), scaled_value(q, 0)) == (milli, value)


@pytest.mark.parametrize("text", ["", "1x", "true", "1 ", "1e", "1K", ".e-10", "--1"])
def test_go_quantity_refusals(text):
    with pytest.raises(GoValueError):
        parse_go_quantity(text)


@pytest.mark.parametrize("usage, overcommit, cpu, memory", [
    ('{"cpu": 0.5, "memory": "1Gi"}', None, 500 * M, 2**30 * G),  # a JSON number is a quantity
    ('{"cpu": "1"}', None, 1 * G, 0),  # a missing field is a zero quantity
    ('null', None, 0, 0),  # null decodes to nothing set: both zero, applied
    ('{"cpu": null, "memory": "1"}', None, 0, 1 * G),
    ('{"CPU": "3", "cpu": "2"}', None, 2 * G, 0),  # case-insensitive names, the last duplicate wins
    ('{"cpu": "2", "memory": "4Gi"}', '{"cpu": "3"}', 666 * M, 4 * 2**30 * G),  # truncated, memory undivided
    ('{"cpu": "2", "memory": "1Gi"}', '{"memory": "3", "cpu": null}', 2 * G, 357913941 * G),  # Value()*1000/3000
    ('{"cpu": "2", "memory": "1"}', 'null', 2 * G, 1 * G),  # no factor at all
    ('{"cpu": "2", "memory": "1"}', '{"cpu": "1500m", "x": "?"}', 1333 * M, 1 * G),  # unknown fields ignored
    ('{"cpu": "2", "memory": "1"}', '{"cpu": "0.0000001"}', 2000 * G, 1 * G),
])
def test_the_patch_applies(usage, overcommit, cpu, memory):
    """A factor is read with MilliValue(), rounded up: "0.0000001" is 1m, no panic (2 cpu over it is 2000 cores)."""
    got = neon_patch(usage, overcommit)
    assert got.requests == {"cpu": cpu, "memory": memory} and not got.crash


@pytest.mark.parametrize("usage, overcommit", [
    ('{"cpu": "2"', None), ('[1]', None), ('"2"', None), ('{"cpu": true}', None), ('{"cpu": {"v": 1}}', None),
    ('{"cpu": "1", "x": NaN}', None), ('{"cpu": "1\\u0030"}', None),  # escapes are not decoded for ParseQuantity
    ('{"cpu": true, "cpu": "1"}', None),  # the first duplicate's error ends the decode
    ('{"cpu": "2"}', '{"cpu": "x"}'), ('{"cpu": "2"}', '3'),  # overcommit unparsable: usage not applied
])
def test_the_patch_leaves_the_pod_alone(usage, overcommit):
    got = neon_patch(usage, overcommit)
    assert got.requests is None and not got.crash and "leaves the pod alone" in got.note


@pytest.mark.parametrize("overcommit", ['{"cpu": "0"}', '{"memory": "0"}', '{"cpu": "-0"}', '{"memory": 0e5}'])
def test_a_zero_factor_is_a_go_panic(overcommit):
    got = neon_patch('{"cpu": "2", "memory": "1Gi"}', overcommit)
    assert got.requests is None and "divide by zero" in got.crash


def _verdict(pods, release):
    values = [evaluate(POD.record(json.dumps(p).encode()), RULES_1_36) for p in pods]
    return scale_down_verdict(node_name="node", node=NODE.record(json.dumps(node("node")).encode()), pods=values,
                              pdbs=[], settings=AutoscalerSettings(release=release), now=0.0)


def vm(name, usage, overcommit=None):
    annotations = {"vm.neon.tech/usage": usage}
    if overcommit is not None:
        annotations["vm.neon.tech/overcommit"] = overcommit
    return pod(name, annotations=annotations, containers=[container("neonvm-runner", "250m", "256Mi")],
               owner_references=[{"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine", "name": name,
                                  "controller": True}])


def test_neon_verdict_uses_the_patch_and_says_where_it_differs_from_the_exported_value():
    got = _verdict([vm("a", '{"cpu": 0.5, "memory": "1Gi"}')], "neon")
    assert got.utilization.cpu == 500 / 8000 and got.state == UNDERUTILIZED
    [row] = got.differing
    assert (row.cpu, row.scheduler_cpu) == (500 * M, 250 * M) and "vm.neon.tech/usage applied" in row.why


def test_upstream_releases_do_not_read_the_usage():
    got = _verdict([vm("a", '{"cpu": "4", "memory": "1Gi"}')], "1.36")
    assert got.utilization.cpu == 250 / 8000
    [row] = got.differing
    assert (row.cpu, row.scheduler_cpu) == (250 * M, 4 * G) and "does not read vm.neon.tech/usage" in row.why


def test_a_zero_overcommit_factor_crashes_neons_autoscaler_and_the_verdict_says_so():
    bad = vm("bad", '{"cpu": "2", "memory": "1Gi"}', '{"cpu": "0"}')
    got = _verdict([bad], "neon")
    assert got.state == AUTOSCALER_CRASH and got.utilization.value is None
    assert any("default/bad" in p and "divide by zero" in p and "crash" in p for p in got.problems)
    assert [d.name for d in got.differing] == ["bad"]
    assert _verdict([bad], "1.36").state == UNDERUTILIZED  # upstream never reads the annotation
