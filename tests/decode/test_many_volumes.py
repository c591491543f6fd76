"""A pod with tens of thousands of local volumes (issue 38): the API server sets no bound on a pod's volumes (etcd's
request size does), and a record that kept every volume's name weighed 2.69 MiB. The record keeps only what the
local-storage drain rule reads (agent.model.local_storage), bounded on every decode path, and the verdict reads as
before: which volumes block, which listed names are no volume.
"""

from __future__ import annotations

import json
import pickle

import pytest

from agent.decode.reader import POD
from agent.model.autoscaler_settings import DEFAULT_AUTOSCALER
from agent.model.local_storage import SHOWN_LOCAL_VOLUMES, SHOWN_UNKNOWN_NAMES
from agent.model.pod import SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION
from agent.model.rules import NEWEST
from agent.model.scale_down import LOCAL_STORAGE, scale_down_verdict
from agent.model.valuation import evaluate
from testkit.factory import pod

MANY = 45_000
OWNER = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}]
#: What the record of such a pod may weigh pickled (a bare pod's is 1-2 KiB; kept name by name it was megabytes).
RECORD_BOUND = 8 * 1024


def ways(p: dict):
    """The pod as each reader meets it: LIST item bytes (typed fast path), a parsed object (the dict path of explain
    dumps) and the tolerant path alone."""
    data = json.dumps(p).encode()
    yield "bytes", POD.record(data)
    yield "parsed", POD.record(json.loads(data))
    yield "tolerant", POD.tolerant(json.loads(data))


def wide(listed: str | None = None) -> dict:
    annotations = {} if listed is None else {SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION: listed}
    p = pod("volumes", annotations=annotations)
    p["metadata"]["ownerReferences"] = OWNER
    p["spec"]["volumes"] = [{"name": f"v{i}", "emptyDir": {}} for i in range(MANY)]
    return p


def verdict(record):
    return scale_down_verdict(node_name="node-a", node=None, pods=[evaluate(record, NEWEST)], pdbs=(),
                              settings=DEFAULT_AUTOSCALER, now=0.0)


@pytest.mark.parametrize("listed", [None, "v1,v3,nope"])
def test_many_local_volumes_leave_a_small_record_and_the_same_verdict(listed):
    p = wide(listed)
    assert len(json.dumps(p)) > 1_000_000
    for way, record in ways(p):
        assert len(pickle.dumps(record)) < RECORD_BOUND, way
        got = verdict(record)
        (blocker,) = got.blockers
        blocking = [f"v{i}" for i in range(MANY) if listed is None or f"v{i}" not in listed.split(",")]
        shown = ", ".join(blocking[:SHOWN_LOCAL_VOLUMES])
        assert blocker.reason == LOCAL_STORAGE, way
        assert blocker.detail == (f"local storage: {shown} and {len(blocking) - SHOWN_LOCAL_VOLUMES} more "
                                  "(not in safe-to-evict-local-volumes)"), way
        said = [q for q in got.problems if "safe-to-evict-local-volumes names" in q]
        assert said == ([] if listed is None else
                        ["default/volumes: safe-to-evict-local-volumes names 'nope', no local volume of the pod: "
                         "ignored"]), (way, said)


def test_a_list_naming_every_one_of_many_local_volumes_blocks_nothing():
    """A list past MAX_ANNOTATION (the annotations' own bound is 256 KiB) still decides which volumes block; its names
    that are no volume are then not shown, and a problem says the list was too long."""
    n = 20_000
    p = wide(",".join([f"v{i}" for i in range(n)] + ["gone"]))
    p["spec"]["volumes"] = p["spec"]["volumes"][:n]
    for way, record in ways(p):
        assert len(pickle.dumps(record)) < RECORD_BOUND, way
        assert any("only the names of the pod's local volumes in it are read" in q for q in record.problems), way
        got = verdict(record)
        assert not got.blockers and not [q for q in got.problems if "gone" in q], way
        p["spec"]["volumes"].append({"name": "late", "hostPath": {"path": "/x"}})
        (blocker,) = verdict(POD.record(json.dumps(p).encode())).blockers
        assert blocker.detail == "local storage: late (not in safe-to-evict-local-volumes)"
        p["spec"]["volumes"].pop()
