"""Node comparisons against hand-computed expectations on a mixed node."""

from fractions import Fraction

import pytest

from agent.decode.reader import NODE, POD
from agent.model.quantity import NANO
from agent.model.node_summary import summarize
from agent.model.node_summary import Usage
from agent.model.rules import NEWEST
from agent.model.valuation import evaluate
from testkit.factory import GI, MI, mixed_pods, summary_node


def exact(n):
    return Fraction(n, NANO)


def test_sums_and_ratios_on_a_mixed_node():
    values = [evaluate(POD.record(p), NEWEST) for p in mixed_pods()]
    s = summarize("node-a", NODE.record(summary_node()), values, Usage(cpu=3 * NANO, memory=10 * GI * NANO))
    cpu, mem = s.cpu, s.memory
    assert exact(cpu.capacity) == 8 and exact(cpu.allocatable) == Fraction(15, 2)
    assert exact(mem.capacity) == 32 * GI and exact(mem.allocatable) == 30 * GI
    # scheduled: spec requests of non-terminal pods (VM runners request nothing): 0.75 + 2.2 + 1 + 0.25
    assert exact(cpu.scheduled) == Fraction(42, 10)
    assert exact(mem.scheduled) == (GI + 256 * MI) + (1152 * MI + 64 * MI) + 2 * GI + 256 * MI
    # pod_or_vm: scheduled plus the VMs as the autoscaler sees them: src 2/2 = 1, dst 2, vm2 0.5
    assert exact(cpu.pod_or_vm) == Fraction(42, 10) + 1 + 2 + Fraction(1, 2)
    assert exact(mem.pod_or_vm) == exact(mem.scheduled) + 4 * GI + 4 * GI + GI
    # vm_usage: raw annotations, a migrating VM once: vm1 2 + vm2 0.5
    assert exact(cpu.vm_usage) == Fraction(5, 2) and exact(mem.vm_usage) == 5 * GI
    assert exact(cpu.used) == 3 and exact(mem.used) == 10 * GI
    r = cpu.ratios()
    assert r["pod_or_vm_to_allocatable"] == pytest.approx(7.7 / 7.5)
    assert r["scheduled_to_allocatable"] == pytest.approx(4.2 / 7.5)
    assert r["used_to_allocatable"] == pytest.approx(3 / 7.5)
    assert r["used_to_pod_or_vm"] == pytest.approx(3 / 7.7)
    assert s.pods_by_phase == {"Running": 5, "Pending": 2, "Succeeded": 1, "Failed": 1}
    assert s.pods_by_source == {"pod_requests": 4, "vm_usage": 3}
    assert s.pod_slots == {"capacity": 110, "allocatable": 110}


def test_without_a_node_or_usage_those_quantities_are_absent_not_zero():
    values = [evaluate(POD.record(p), NEWEST) for p in mixed_pods()]
    s = summarize("node-a", None, values, None)
    assert set(s.cpu.quantities()) == {"scheduled", "pod_or_vm", "vm_usage"}
    assert s.cpu.ratios() == {} and not s.node_present and s.pod_slots == {}


def test_bad_node_quantities_are_problems():
    s = summarize("node-a", NODE.record(summary_node(allocatable_cpu="lots")), [], None)
    assert s.cpu.allocatable is None and s.cpu.capacity == 8 * NANO
    assert any("allocatable.cpu" in p for p in s.problems)
