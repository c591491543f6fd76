"""The verdict off (issue 39): what the node state, the exported points and the views make of autoscaler settings
the agent was given but cannot use. No claim about the node: state unknown, no threshold or utilization point, and
the one line wherever the verdict is read."""

from __future__ import annotations

import math

from agent.export.metrics import AUTOSCALER_STATE, AUTOSCALER_THRESHOLD, verdict_points
from agent.model.scale_down import NO_NODE, verdict_off
from agent.pipeline.state import NodeState
from agent.report.verdict_view import verdict_view
from agent.report.views import verdict_report

WHY = "NRA_AUTOSCALER_RELEASE: unknown cluster-autoscaler release '1.40'"


def test_the_off_verdict_claims_nothing_and_says_why():
    verdict = verdict_off(node_name="n", why=WHY)
    assert (verdict.state, verdict.off, verdict.problems) == (NO_NODE, WHY, (WHY,))
    assert math.isnan(verdict.threshold) and verdict.utilization.value is None
    assert not verdict.candidate and not verdict.removable and not verdict.blockers
    points = list(verdict_points(verdict))
    assert not [p for p in points if p.metric == AUTOSCALER_THRESHOLD]
    assert {p.attributes["state"]: p.value for p in points if p.metric == AUTOSCALER_STATE}[NO_NODE] == 1
    view = verdict_view(verdict)
    assert view.headline == f"unknown: the verdict is off: {WHY}" and view.threshold_text == "-"
    report = verdict_report(view)
    assert report["threshold"] is None and report["headline"] == view.headline and report["problems"] == [WHY]


def test_the_node_state_serves_the_off_verdict_and_otherwise_computes_one():
    off = NodeState("n", verdict_off=WHY).snapshot()
    assert off.verdict(0.0).off == WHY
    on = NodeState("n").snapshot().verdict(0.0)
    assert on.off == "" and on.threshold == 0.5 and on.state == NO_NODE  # no Node yet, but a verdict with a threshold
