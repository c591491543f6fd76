"""The agent's verdict on the disagreements the autoscaler's own code found (tests/model/vectors/found_by_oracle.json).

Each case is a dump the differential test (tests/autoscaler/test_differential.py) found the agent and the release's
own packages disagreeing on, shrunk to one node; ``expect`` is what the autoscaler computes (tests/autoscaler/
test_vectors.py asks the oracle so), and the agent must compute the same, through explain's own reading of a dump.
"""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path

import pytest

from agent.explain.view import explain_view, pods_dump, verdicts
from agent.model.autoscaler_settings import parse_autoscaler_args
from agent.model.rules import NEWEST

FOUND = json.loads((Path(__file__).parent / "vectors" / "found_by_oracle.json").read_text())
EMPTY_PDBS = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudgetList", "items": []}


@pytest.mark.parametrize("case", FOUND["cases"], ids=lambda c: f"{c['release']}: {c['name']}")
def test_the_agent_computes_what_the_autoscaler_does(case):
    read = pods_dump([case["dump"], EMPTY_PDBS])
    now = float(calendar.timegm(time.strptime(FOUND["now"], "%Y-%m-%dT%H:%M:%SZ")))
    settings = parse_autoscaler_args(case["args"], release=case["release"])
    got = verdicts(explain_view(read.pods, read.nodes, NEWEST), read.pdbs, settings, now,
                   controllers=read.controllers)[case["node"]]
    want = case["expect"]
    assert (got.state, got.threshold, got.utilization.value, got.utilization.resource) == \
        (want["state"], want["threshold"], want["value"], want["resource"])
    assert (got.utilization.gpu is not None) is want["gpu_node"]


def test_the_vectors_name_their_release():
    assert FOUND["cases"] and all(c["release"] in FOUND["releases"] for c in FOUND["cases"])
