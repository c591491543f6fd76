"""The run's sizes and fixed settings: the issue's by default, each overridable by an ``NRA_SCALE_*`` variable
(``NRA_SCALE_QUICK=1``: a small run that checks the setup in minutes)."""

from __future__ import annotations

import os

from bench.common import ROOT

QUICK = os.environ.get("NRA_SCALE_QUICK") == "1"


def _env(name: str, full: float, quick: float) -> float:
    return float(os.environ.get(name, quick if QUICK else full))


NODES = int(_env("NRA_SCALE_NODES", 1000, 20))
PODS_PER_NODE = int(_env("NRA_SCALE_PODS", 30, 30))
AGENTS = min(NODES, int(_env("NRA_SCALE_AGENTS", 50, 10)))
STEADY_SECONDS = _env("NRA_SCALE_STEADY_SECONDS", 660, 90)
DOWN_SECONDS = _env("NRA_SCALE_DOWN_SECONDS", 5, 5)
CHURN_RATE = _env("NRA_SCALE_CHURN_RATE", 100, 20)
CHURN_SECONDS = _env("NRA_SCALE_CHURN_SECONDS", 120, 40)
CHURN_LIFETIME = _env("NRA_SCALE_CHURN_LIFETIME", 45, 45)
CLIENT_QPS = int(_env("NRA_SCALE_CLIENT_QPS", 300, 300))
ANCHOR = os.environ.get("NRA_SCALE_ANCHOR", "1") == "1"
BASELINE_SECONDS = _env("NRA_SCALE_BASELINE_SECONDS", 180, 30)
SETTLE_LIMIT = _env("NRA_SCALE_SETTLE_LIMIT", 600, 90)
WRITERS = 16
CHURN_WORKERS = int(_env("NRA_SCALE_CHURN_WORKERS", 4, 2))
CHURN_KWOK = os.environ.get("NRA_SCALE_CHURN_KWOK", "0") == "1"
EXPORT_INTERVAL = 15.0  # the agent's default; the shipped DaemonSet does not change it
#: Every ServiceAccount outside kube-system falls into this API Priority and Fairness flow schema: the agents'
#: requests (and the anchor's, which uses their tokens) are its only ones; the controllers use kube-system
#: ServiceAccounts, KWOK and the benchmark the admin certificate (exempt).
AGENT_FLOW = "service-accounts"
ANCHOR_DIR = ROOT / "bench" / "reflector_anchor"
NODE_LEASE_SECONDS, NODE_GRACE_SECONDS = 40, 50  # kubelet's and kube-controller-manager's defaults
