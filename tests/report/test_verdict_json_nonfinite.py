"""A utilization Go computes as +Inf, -Inf or NaN: valid JSON (spelled as Prometheus does), readable text, and no
metric point (a gauge must not carry it as if it were a measurement)."""

from __future__ import annotations

import json

from agent.decode.reader import NODE, POD
from agent.export.metrics import AUTOSCALER_NODE_UTILIZATION, AUTOSCALER_UTILIZATION, verdict_points
from agent.model.autoscaler_settings import parse_autoscaler_args
from agent.model.rules import RULES_1_36
from agent.model.scale_down import scale_down_verdict
from agent.model.valuation import evaluate
from agent.report.autoscaler import verdict_lines
from agent.report.verdict_view import verdict_view
from agent.report.views import verdict_report
from testkit.factory import container, node, pod


def test_a_non_finite_utilization_is_valid_json_text_and_no_point():
    ds = pod("ds", containers=[container("a", "8", "1Gi")],
             owner_references=[{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "controller": True}])
    app = pod("app", containers=[container("a", "1", "1Gi")])
    values = [evaluate(POD.record(json.dumps(p).encode()), RULES_1_36) for p in (ds, app)]
    v = scale_down_verdict(node_name="n", node=NODE.record(json.dumps(node("n")).encode()), pods=values, pdbs=[],
                           settings=parse_autoscaler_args(["--ignore-daemonsets-utilization=true"]), now=0.0)
    view = verdict_view(v)
    report = json.loads(json.dumps(verdict_report(view), allow_nan=False))
    assert report["utilization"]["cpu"] == "+Inf" == report["utilization"]["value"]
    assert isinstance(report["utilization"]["memory"], float)
    assert "cpu +Inf" in "\n".join(verdict_lines(view, None, "full"))
    points = [p for p in verdict_points(v) if p.metric in (AUTOSCALER_UTILIZATION, AUTOSCALER_NODE_UTILIZATION)]
    assert [(p.metric, p.attributes) for p in points] == [(AUTOSCALER_UTILIZATION, {"resource": "memory"})]
