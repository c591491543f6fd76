"""Text the agent refuses is not kept (issue 29, item 2): a tenant's pod with annotations at the API server's limit
(256 KiB per object) leaves a record, a value and reasons of bounded size, whichever way the pod was read.

Sizes are measured as the pickled record (every string and tuple it holds, shared ones included), so a record that
kept the text would weigh at least the 250,000 characters.
"""

from __future__ import annotations

import json
import pickle

import pytest

from agent.decode.reader import POD
from agent.model.fields import MAX_ANNOTATION
from agent.model.pod import (DAEMONSET_POD_ANNOTATION, OVERCOMMIT_ANNOTATION, SAFE_TO_EVICT_ANNOTATION,
                             SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION, USAGE_ANNOTATION)
from agent.model.rules import NEWEST
from agent.model.scale_down import LOCAL_STORAGE, scale_down_verdict
from agent.model.autoscaler_settings import DEFAULT_AUTOSCALER
from agent.model.valuation import SOURCE_POD_REQUESTS, evaluate
from testkit.factory import pod, vm_pod

HUGE = 250_000
OWNER = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}]
#: What one pod's record may weigh, whatever its annotations hold (a realistic record is 1-2 KiB pickled).
RECORD_BOUND = 12 * 1024


def huge(prefix: str = "") -> str:
    return prefix + "x" * (HUGE - len(prefix))


def size(obj) -> int:
    return len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def ways(p: dict):
    """The pod as each reader meets it: LIST item bytes (fast path), a watch line's object, a parsed object, and the
    tolerant path alone."""
    data = json.dumps(p).encode()
    yield "bytes", POD.record(data)
    line = POD.watch_line(json.dumps({"type": "MODIFIED", "object": p}).encode())
    assert line is not None
    yield "watch", POD.record(line[1])
    yield "parsed", POD.record(json.loads(data))
    yield "tolerant", POD.tolerant(json.loads(data))


HOSTILE = {
    "usage": {USAGE_ANNOTATION: huge('{"cpu":"1","memory":"1Gi","pad":"')},
    "overcommit": {USAGE_ANNOTATION: '{"cpu":"1","memory":"1Gi"}', OVERCOMMIT_ANNOTATION: huge('{"cpu":"2"')},
    "safe-to-evict": {SAFE_TO_EVICT_ANNOTATION: huge("true")},
    "daemonset-pod": {DAEMONSET_POD_ANNOTATION: huge("true")},
    "local-volumes": {SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION: ",".join(f"v{i}" for i in range(40_000))},
    "another": {"example.com/blob": huge()},
}


@pytest.mark.parametrize("which", HOSTILE)
def test_a_refused_annotation_leaves_a_record_of_bounded_size(which):
    p = pod("hostile", annotations=HOSTILE[which])
    assert len(json.dumps(p)) > HUGE
    for way, record in ways(p):
        assert size(record) < RECORD_BOUND, (way, size(record))
        value = evaluate(record, NEWEST)
        assert size(value) < 2 * RECORD_BOUND, (way, size(value))
        for problem in value.problems:
            assert len(problem.message) < 400, (way, problem.message[:200])


def test_an_oversized_usage_is_refused_as_before_with_its_length_and_an_excerpt():
    p = vm_pod("vm-hostile", "vm", "1", "1Gi")
    p["metadata"]["annotations"][USAGE_ANNOTATION] = huge('{"cpu":"1","memory":"1Gi","pad":"')
    for way, record in ways(p):
        value = evaluate(record, NEWEST)
        assert value.source == SOURCE_POD_REQUESTS, way
        (problem,) = [q for q in value.problems if q.subject == "usage"]
        assert problem.reason == "out_of_range"
        assert f"longer than {MAX_ANNOTATION} characters" in problem.message
        assert f"{HUGE:,} characters" in problem.message
        assert '{"cpu":"1","memory":"1Gi","pad":"xxx' in problem.message


def test_an_annotation_at_the_limit_is_still_read():
    text = '{"cpu":"250m","memory":"1Gi"' + " " * (MAX_ANNOTATION - 29) + "}"
    assert len(text) == MAX_ANNOTATION
    p = vm_pod("vm-wide", "vm", "1", "1Gi")
    p["metadata"]["annotations"][USAGE_ANNOTATION] = text
    (_, record), *_ = ways(p)
    assert record.usage_annotation == text
    assert evaluate(record, NEWEST).source != SOURCE_POD_REQUESTS


def test_a_long_local_volumes_list_keeps_what_the_drain_rules_read():
    """The names of the pod's local volumes in the list keep their effect; the rest is dropped with a problem."""
    p = pod("scratchy", annotations={SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION: ",".join(
        [f"v{i}" for i in range(20_000)] + ["scratch"] + [f"w{i}" for i in range(20_000)])})
    p["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}, {"name": "logs", "hostPath": {"path": "/var/log"}}]
    p["metadata"]["ownerReferences"] = OWNER
    for way, record in ways(p):
        assert size(record) < RECORD_BOUND, way
        local = record.eviction.local_storage
        assert local is not None and (local.blocking, local.unknown) == (("logs",), ()), way
        assert any("only the names of the pod's local volumes" in q for q in record.problems), way
        value = evaluate(record, NEWEST)
        verdict = scale_down_verdict(node_name="node-a", node=None, pods=[value], pdbs=(),
                                     settings=DEFAULT_AUTOSCALER, now=0.0)
        (blocker,) = verdict.blockers
        assert blocker.reason == LOCAL_STORAGE and "logs" in blocker.detail and "scratch" not in blocker.detail


def test_unknown_local_volume_names_are_shown_bounded():
    names = ",".join(f"not-a-volume-{i}-" + "y" * 50 for i in range(60))
    assert len(names) < MAX_ANNOTATION
    p = pod("listed", annotations={SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION: names})
    p["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    p["metadata"]["ownerReferences"] = OWNER
    record = POD.record(json.dumps(p).encode())
    verdict = scale_down_verdict(node_name="node-a", node=None, pods=[evaluate(record, NEWEST)], pdbs=(),
                                 settings=DEFAULT_AUTOSCALER, now=0.0)
    (problem,) = [q for q in verdict.problems if "safe-to-evict-local-volumes" in q]
    assert "and 55 more" in problem and len(problem) < 400
