"""Golden exposition tables (kube-state-metrics' habit): a fixed node state in, the exact points and /metrics text out.

The golden files under tests/golden/ were checked by hand against the rules
in README (the mixed node of test_summary: init/sidecar peaks, overhead, a
live migration pair, a broken annotation, terminal pods). Any change to names,
attributes, units or values shows up as a diff. Regenerate deliberately with
``NRA_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py`` and review it.
"""

from __future__ import annotations

import os
from pathlib import Path

from agent.export.metrics import state_points
from agent.export.prometheus.exposition import render_metrics
from agent.model.node import decode_node
from agent.model.node_summary import Usage
from agent.model.pod import decode_pod
from agent.model.quantity import NANO
from agent.model.rules import NEWEST
from agent.model.valuation import evaluate
from agent.pipeline.events import ADDED, RELIST
from agent.pipeline.state import NodeSnapshot
from agent.pipeline.stats import RuntimeStats
from tests.support.factory import GI, mixed_pods, summary_node
from tests.support.virtual_time import VirtualClock

GOLDEN = Path(__file__).parent / "golden"


def snapshot() -> NodeSnapshot:
    pods = tuple(sorted((evaluate(decode_pod(p), NEWEST) for p in mixed_pods()), key=lambda v: v.name))
    return NodeSnapshot("node-a", pods, decode_node(summary_node()), Usage(cpu=3 * NANO, memory=10 * GI * NANO),
                        synced=True, node_listed=True, resource_version="42")


def stats() -> RuntimeStats:
    clock = VirtualClock()
    s = RuntimeStats(clock=clock, wall=lambda: 1_700_000_000.0)
    for kind, wait, work in ((RELIST, 0.0002, 0.004), (ADDED, 0.00003, 0.00005)):
        s.event_added(kind)
        clock.advance(wait)
        s.event_taken(wait)
        s.event_handled(work)
    s.relisted(0.12)
    s.watch_started("initial")
    s.request_failed("http_500")
    s.pod_problem("usage", "invalid_json")
    s.export_finished(True, 0.003)
    clock.advance(1.0)
    return s


def compare(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("NRA_UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from the golden file; review and regenerate if intended"


def test_state_points_golden():
    s = snapshot()
    lines = sorted(f"{p.metric}{{{','.join(f'{k}={v!r}' for k, v in sorted(p.attributes.items()))}}} {p.value!r}"
                   for p in state_points(s.pods, s.summary()))
    compare("state_points.txt", "\n".join(lines) + "\n")


def test_metrics_exposition_golden():
    text = render_metrics(snapshot(), stats().snapshot()).decode()
    compare("metrics.txt", text)


def test_golden_points_hold_the_rules():
    """Spot checks of the golden state against README's rules, so the golden file itself cannot drift silently."""
    s = snapshot()
    points = {(p.metric, p.attributes.get("k8s.pod.name"), p.attributes.get("quantity")): p.value
              for p in state_points(s.pods, s.summary())}
    assert points[("pod_or_vm_cpu_requests", "batch", None)] == 2.2
    assert points[("pod_or_vm_cpu_requests", "vm1-src", None)] == 1.0  # 2 cores / overcommit 2
    assert points[("vm_cpu_usage", "vm1-src", None)] == 2.0
    assert ("pod_or_vm_cpu_requests", "finished", None) not in points
    assert points[("node_requests_node_cpu_cores", None, "used")] == 3.0
