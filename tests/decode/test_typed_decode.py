"""The typed decoder (msgspec) and the tolerant one give the same records, whatever the input.

The typed path must be taken for well-formed objects (or it would be tested
against itself), and everything it refuses must come out of the fallback
exactly as the tolerant decoder alone makes it.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.model.fields import DecodeError
from agent.model.node import decode_node
from agent.model.pod import decode_pod
from agent.source.documents import nodes_of, pods_of, read_documents
from agent.source.replay import SAMPLE, load_capture
from agent.source.typed_decode import node_event, node_record, pod_event, pod_record
from bench.common import realistic_pod
from tests.support.factory import container, pod, vm_pod
from tests.support.strategies import messy_pods


def tolerant(decode, obj):
    try:
        return decode(obj)
    except DecodeError as exc:
        return DecodeError, str(exc)


def typed(decode, data):
    try:
        return decode(data)
    except DecodeError as exc:
        return DecodeError, str(exc)


def assert_same(obj, must_be_typed: bool = False) -> None:
    """Both entry points of the typed decoder (LIST item bytes, watch line) agree with decode_pod."""
    want = tolerant(decode_pod, obj)
    data = json.dumps(obj).encode()
    assert typed(pod_record, data) == want
    event = pod_event(json.dumps({"type": "MODIFIED", "object": obj}).encode())
    if must_be_typed:
        assert event is not None, "a well-formed pod must take the typed path"
    if event is not None:
        assert event[0] == "MODIFIED"
        assert typed(pod_record, event[1]) == want


def recorded():
    docs = read_documents(load_capture(SAMPLE))
    return [p for doc in docs for p in pods_of(doc)], [n for doc in docs for n in nodes_of(doc)]


def test_recorded_pods_and_nodes_take_the_typed_path_and_match():
    pods, nodes = recorded()
    assert len(pods) > 5 and nodes
    for p in pods:
        assert_same(p, must_be_typed=True)
    for n in nodes:
        assert node_record(json.dumps(n).encode()) == decode_node(n)
        event = node_event(json.dumps({"type": "ADDED", "object": n}).encode())
        assert event is not None and node_record(event[1]) == decode_node(n)


@pytest.mark.parametrize("i", range(0, 40, 3))
def test_realistic_pods_take_the_typed_path_and_match(i):
    assert_same(realistic_pod(i), must_be_typed=True)


@settings(max_examples=400, deadline=None)
@given(messy_pods())
def test_messy_pods_decode_alike(p):
    assert_same(p)


# Well-typed variations the Structs accept: missing, null and empty fields everywhere the
# tolerant decoder has a rule for them, so the typed path's own handling is what is compared.
maybe_str = st.one_of(st.none(), st.just(""), st.sampled_from(["a", "Always", "Never", "Infeasible",
                                                               "PodResizePending", "vm.neon.tech/v1"]))
quantity_map = st.one_of(st.none(), st.dictionaries(st.sampled_from(["cpu", "memory", "ephemeral-storage", "pods",
                                                                     "hugepages-2Mi"]),
                                                    st.sampled_from(["1", "250m", "1Gi", "", "x"]), max_size=3))
resources = st.one_of(st.none(), st.fixed_dictionaries({}, optional={"requests": quantity_map, "limits": quantity_map}))
containers = st.lists(st.fixed_dictionaries({}, optional={"name": maybe_str, "resources": resources,
                                                          "restartPolicy": maybe_str, "image": st.just("x")}),
                      max_size=3)
statuses = st.lists(st.fixed_dictionaries({}, optional={"name": maybe_str, "resources": resources,
                                                        "allocatedResources": quantity_map, "ready": st.booleans()}),
                    max_size=3)
refs = st.lists(st.fixed_dictionaries({}, optional={
    "apiVersion": st.sampled_from(["vm.neon.tech/v1", "apps/v1"]), "kind": st.sampled_from(["VirtualMachineMigration", "ReplicaSet"]),
    "controller": st.one_of(st.none(), st.booleans())}), max_size=2)


def _optional(**fields):
    return st.fixed_dictionaries({}, optional=fields)


well_typed_pods = _optional(
    metadata=st.one_of(st.none(), _optional(
        name=maybe_str, namespace=maybe_str, uid=maybe_str, resourceVersion=maybe_str,
        annotations=st.one_of(st.none(), _optional(**{"vm.neon.tech/usage": st.one_of(st.none(), st.just('{"cpu": "1", "memory": "1Gi"}'), st.just("x")),
                                                      "vm.neon.tech/overcommit": st.one_of(st.none(), st.just('{"cpu": "2", "memory": "1"}')),
                                                      "other": st.just("y")})),
        labels=st.one_of(st.none(), _optional(**{"vm.neon.tech/name": maybe_str, "app": st.just("z")})),
        ownerReferences=st.one_of(st.none(), refs))),
    spec=st.one_of(st.none(), _optional(nodeName=maybe_str, containers=st.one_of(st.none(), containers),
                                        initContainers=st.one_of(st.none(), containers), resources=resources,
                                        overhead=quantity_map)),
    status=st.one_of(st.none(), _optional(
        phase=maybe_str, resources=resources, allocatedResources=quantity_map, containerStatuses=st.one_of(st.none(), statuses), initContainerStatuses=st.one_of(st.none(), statuses),
        conditions=st.one_of(st.none(), st.lists(_optional(type=maybe_str, reason=maybe_str, status=st.just("True")), max_size=3)))),
)


@settings(max_examples=600, deadline=None)
@given(well_typed_pods)
def test_well_typed_variations_take_the_typed_path_and_match(p):
    assert_same(p, must_be_typed=True)


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({}, optional={"metadata": _optional(name=maybe_str, uid=maybe_str, resourceVersion=maybe_str),
                                           "status": _optional(capacity=quantity_map, allocatable=quantity_map)}))
def test_nodes_decode_alike(n):
    want = tolerant(decode_node, n)
    assert typed(node_record, json.dumps(n).encode()) == want
    event = node_event(json.dumps({"type": "MODIFIED", "object": n}).encode())
    if event is not None:
        assert typed(node_record, event[1]) == want


@pytest.mark.parametrize("obj", [
    pod("numbers", containers=[{"name": "a", "resources": {"requests": {"cpu": 2, "memory": 1073741824}}}]),
    vm_pod("r", "vm1", "1", "1Gi") | {"metadata": {"name": "r", "annotations": {"vm.neon.tech/usage": {"cpu": "1"}}}},
    pod("list-spec") | {"spec": []},
    pod("null-container", containers=[None, container("b", "1", "1Gi")]),
    {"metadata": {"name": 7}},
], ids=["yaml-numbers", "annotation-object", "spec-list", "null-container", "name-number"])
def test_what_the_structs_refuse_comes_out_of_the_fallback_unchanged(obj):
    assert pod_event(json.dumps({"type": "MODIFIED", "object": obj}).encode()) is None
    assert typed(pod_record, json.dumps(obj).encode()) == tolerant(decode_pod, obj)


def test_a_pod_with_no_identity_is_refused_by_both_paths():
    event = pod_event(b'{"type": "DELETED", "object": {"metadata": {"namespace": "a"}}}')
    with pytest.raises(DecodeError):
        pod_record(event[1])
    with pytest.raises(DecodeError):
        pod_record(b'{"metadata": {}}')


@pytest.mark.parametrize("line", [
    b'{"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "9"}}}',
    b'{"type": "ERROR", "object": {"kind": "Status", "status": "Failure", "code": 410}}',
    b'{"type": "ERROR", "object": {"kind": "Status", "code": 410}}',
    b'{"object": {"metadata": {"name": "a"}}}',
    b'{"type": "MODIFIED"}',
    b'{"type": "MODIFIED", "object": {"metadata": {"name": "a"}}, "x": NaN}',
    b"[" * 10_000 + b"]" * 10_000,
])
def test_lines_that_are_not_plain_object_events_go_the_tolerant_way(line):
    assert pod_event(line) is None


def test_a_bad_byte_in_a_list_item_is_read_as_a_replacement_character():
    data = json.dumps(pod("bad-byte-X")).encode().replace(b"X", b"\xff")
    assert pod_record(data).name == "bad-byte-\ufffd"


@pytest.mark.parametrize("spec, status", [
    ({"resources": {"requests": {"hugepages-2Mi": "2Mi"}}}, {}),
    ({"resources": {"requests": {"ephemeral-storage": "1Gi"}}}, {}),
    ({"resources": {"requests": {}}}, {}),
    ({"resources": {"requests": {"cpu": "2", "memory": "2Gi"}}},
     {"allocatedResources": {"cpu": "1"}, "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}),
    ({}, {"allocatedResources": {"ephemeral-storage": "1Gi"}}),
    ({}, {"resources": {}}),
    ({}, {"containerStatuses": [{"name": "c", "allocatedResources": {}, "resources": {"requests": {"pods": "1"}}},
                                {"name": "d", "allocatedResources": {"ephemeral-storage": "1"}}]}),
], ids=["pod-level-hugepages-only", "pod-level-other-only", "pod-level-empty", "pod-status-totals",
        "pod-status-other-only", "pod-status-empty-resources", "statuses-empty-and-other-maps"])
def test_absent_empty_and_untracked_maps_are_told_apart_alike(spec, status):
    p = pod("maps")
    p["spec"].update(spec)
    p["status"].update(status)
    assert_same(p, must_be_typed=True)
