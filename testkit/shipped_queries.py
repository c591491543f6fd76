"""The PromQL this repository ships: rules.yaml's recording rules and alerts, and the Grafana dashboard.

One reader for every test that runs them (VictoriaMetrics in the fast suite,
the real Prometheus in the collector suite), so a query added to either file
is checked everywhere at once.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

import yaml

from testkit.repo import REPO

__all__ = ["RULES", "DASHBOARD", "Variable", "alerts", "dashboard_queries", "dashboard_variables", "left_side",
           "recording_rules"]

RULES = REPO / "otel-config" / "prometheus" / "rules.yaml"
DASHBOARD = REPO / "otel-config" / "grafana" / "node-requests-agent.json"


class Variable(NamedTuple):
    """A dashboard variable ``label_values(metric, label)``."""

    name: str
    metric: str
    label: str


def _rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def recording_rules() -> dict[str, str]:
    """Recorded series name -> expression."""
    return {r["record"]: r["expr"] for r in _rules() if "record" in r}


def alerts() -> dict[str, dict]:
    """Alert name -> the rule (expr, for, labels, annotations)."""
    return {r["alert"]: r for r in _rules() if "alert" in r}


def left_side(expr: str) -> str:
    """An alert's operand before its top-level comparison or ``unless``: what has data while nothing is wrong."""
    return re.split(r"\s(?:[<>]=?|unless)\s", expr, maxsplit=1)[0].strip()


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_queries(node: str = ".*") -> list[tuple[str, str]]:
    """(panel title, expression) for every panel target, ``$node`` set to ``node`` (a regex, as Grafana's All is)."""
    return [(panel["title"], target["expr"].replace("$node", node))
            for panel in _dashboard()["panels"] for target in panel["targets"]]


def dashboard_variables() -> list[Variable]:
    out = []
    for var in _dashboard()["templating"]["list"]:
        if var["type"] == "query":
            m = re.fullmatch(r"label_values\((\w+), (\w+)\)", var["query"])
            assert m, f"unsupported variable query {var['query']!r}"
            out.append(Variable(var["name"], m.group(1), m.group(2)))
    return out
