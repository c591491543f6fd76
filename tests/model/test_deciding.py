"""Which term of the formula decided a pod's value (the explain table's DECIDED BY)."""

from __future__ import annotations

import pytest

from agent.model.deciding import deciding_terms, describe_terms
from agent.decode.reader import POD
from agent.model.rules import NEWEST
from agent.model.valuation import evaluate
from testkit.factory import container, pod, vm_pod


def terms(obj) -> dict[str, str]:
    return deciding_terms(evaluate(POD.record(obj), NEWEST))


@pytest.mark.parametrize("obj,expected", [
    (pod("p", containers=[container("a", "1", "1Gi")]), {"cpu": "containers", "memory": "containers"}),
    # KEP-753: init 5; sidecars 1, 2, 3; app 1 -> app + sidecars = 7 beats the init peak 5
    (pod("p", init_containers=[container("i", "5"), container("s1", "1", restart_policy="Always"),
                               container("s2", "2", restart_policy="Always"), container("s3", "3", restart_policy="Always")],
         containers=[container("a", "1")]), {"cpu": "containers + sidecars", "memory": "nothing requested"}),
    # sidecar 10, init 200, app 100 -> the init peak 210 (200 + the sidecar before it)
    (pod("p", init_containers=[container("s", "10", restart_policy="Always"), container("setup", "200", "1Gi")],
         containers=[container("a", "100", "2Gi")]), {"cpu": "init setup peak", "memory": "containers"}),
    (pod("p", containers=[container("a", "1", "1Gi")], pod_requests={"cpu": "3"}, overhead={"memory": "64Mi"}),
     {"cpu": "pod-level", "memory": "containers + overhead"}),
    (vm_pod("vm", "vm-1", "2", "4Gi"), {"cpu": "vm usage", "memory": "vm usage"}),
    (pod("p", containers=[container("a")], overhead={"cpu": "250m"}), {"cpu": "overhead", "memory": "nothing requested"}),
])
def test_the_winning_term_is_named(obj, expected):
    assert terms(obj) == expected


def test_one_phrase_for_the_table():
    same = evaluate(POD.record(pod("p", containers=[container("a", "1", "1Gi")])), NEWEST)
    assert describe_terms(same) == "containers"
    done = evaluate(POD.record(pod("p", phase="Succeeded")), NEWEST)
    assert describe_terms(done) == "not reported"
