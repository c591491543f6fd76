"""One field specification, two ways to fill it: the fast path and the tolerant one give the same records.

The fast path must be taken for well-formed objects (or it would be tested
against itself), everything it refuses must come out of the tolerant reader
exactly as that reader alone makes it, and every declared field must have a
tolerant reading (a new field cannot be added to one path only).
"""

from __future__ import annotations

import json
import sys

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.decode import spec
from agent.decode.reader import NODE, POD
from agent.decode.tolerant import fill
from agent.model.fields import DecodeError
from agent.source.documents import nodes_of, pods_of, read_documents
from agent.source.replay import SAMPLE, load_capture
from testkit.factory import container, pod, realistic_pod, vm_pod
from testkit.strategies import messy_pods


def outcome(decode, obj):
    try:
        return decode(obj)
    except DecodeError as exc:
        return DecodeError, str(exc)


def assert_same(obj, must_be_typed: bool = False, kind=POD) -> None:
    """Every entry point (LIST item bytes, watch line, parsed object) agrees with the tolerant reader alone."""
    want = outcome(kind.tolerant, obj)
    data = json.dumps(obj).encode()
    if must_be_typed:
        kind.list_item(data)  # raises if the fast path refused it
    assert outcome(kind.record, data) == want
    assert outcome(kind.record, obj) == want
    event = kind.watch_line(json.dumps({"type": "MODIFIED", "object": obj}).encode())
    if must_be_typed:
        assert event is not None, "a well-formed object must take the fast path"
    if event is not None:
        assert event[0] == "MODIFIED"
        assert outcome(kind.record, event[1]) == want


def recorded():
    docs = read_documents(load_capture(SAMPLE))
    return [p for doc in docs for p in pods_of(doc)], [n for doc in docs for n in nodes_of(doc)]


def test_recorded_pods_and_nodes_take_the_typed_path_and_match():
    pods, nodes = recorded()
    assert len(pods) > 5 and nodes
    for p in pods:
        assert_same(p, must_be_typed=True)
    for n in nodes:
        assert_same(n, must_be_typed=True, kind=NODE)


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
    assert_same(n, kind=NODE)


@pytest.mark.parametrize("obj", [
    pod("numbers", containers=[{"name": "a", "resources": {"requests": {"cpu": 2, "memory": 1073741824}}}]),
    vm_pod("r", "vm1", "1", "1Gi") | {"metadata": {"name": "r", "annotations": {"vm.neon.tech/usage": {"cpu": "1"}}}},
    pod("list-spec") | {"spec": []},
    pod("null-container", containers=[None, container("b", "1", "1Gi")]),
    {"metadata": {"name": 7}},
], ids=["yaml-numbers", "annotation-object", "spec-list", "null-container", "name-number"])
def test_what_the_structs_refuse_comes_out_of_the_tolerant_reader_unchanged(obj):
    assert POD.watch_line(json.dumps({"type": "MODIFIED", "object": obj}).encode()) is None
    assert outcome(POD.record, json.dumps(obj).encode()) == outcome(POD.tolerant, obj)
    assert outcome(POD.record, obj) == outcome(POD.tolerant, obj)


def test_a_pod_with_no_identity_is_refused_by_both_paths():
    event = POD.watch_line(b'{"type": "DELETED", "object": {"metadata": {"namespace": "a"}}}')
    with pytest.raises(DecodeError):
        POD.record(event[1])
    with pytest.raises(DecodeError):
        POD.record(b'{"metadata": {}}')
    with pytest.raises(DecodeError):
        POD.record(["not", "a", "pod"])


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
    assert POD.watch_line(line) is None


def test_a_bad_byte_in_a_list_item_is_read_as_a_replacement_character():
    data = json.dumps(pod("bad-byte-X")).encode().replace(b"X", b"\xff")
    assert POD.record(data).name == "bad-byte-\ufffd"


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


STRUCTS = [cls for cls in vars(spec).values() if isinstance(cls, type) and issubclass(cls, msgspec.Struct)
           and cls.__module__ == spec.__name__ and not cls.__name__.startswith("_")]


@pytest.mark.parametrize("cls", STRUCTS, ids=lambda c: c.__name__)
def test_every_declared_field_has_a_tolerant_reading(cls):
    """A wrong type in every field of every Struct: one problem each, never an exception; scalars, maps and
    lists read as absent, objects as empty objects. A field kept as JSON text (spec.Undecoded) keeps the value
    written back; records checks it where it decodes it (test_bounded.py)."""
    fields = msgspec.inspect.type_info(cls).fields
    problems: list[str] = []
    # A number is wrong everywhere but in an integer field, where a string is.
    filled = fill(cls, {f.encode_name: "12345" if _kind(f.type) == "IntType" else 12345 for f in fields}, problems)
    typed = [f for f in fields if _kind(f.type) != "RawType"]
    assert problems == [f"{f.encode_name} is not {_WHAT[_kind(f.type)]}" for f in typed]
    for f in fields:
        value = getattr(filled, f.name)
        if _kind(f.type) == "RawType":
            assert bytes(value) == b"12345", f.name
        else:
            assert value is None if _kind(f.type) != "StructType" else value == _inner(f.type).cls(), f.name


_WHAT = {"StrType": "a string", "BoolType": "a boolean", "DictType": "an object", "StructType": "an object",
         "ListType": "a list", "IntType": "an integer"}


def _inner(t):
    return next(m for m in t.types if not isinstance(m, msgspec.inspect.NoneType)) if hasattr(t, "types") else t


def _kind(t) -> str:
    return type(_inner(t)).__name__


def test_the_tolerant_reader_names_the_path_and_keeps_the_rest():
    p = pod("odd", containers=[container("a", "1", "1Gi"), {"name": "b", "resources": {"requests": {"cpu": [1]}}},
                               "not-a-container"])
    p["spec"]["overhead"] = {"cpu": 2, "memory": 0.5}  # YAML numbers: the quantities the API server would have made
    record = POD.record(p)
    assert [c.name for c in record.containers] == ["a", "b", "#2"]
    assert record.containers[0].requests == {"cpu": "1", "memory": "1Gi"} and record.containers[1].requests == {}
    assert record.overhead == {"cpu": "2", "memory": "0.5"}
    assert record.problems == ("spec.containers[1].resources.requests.cpu is not a quantity string",
                               "spec.containers[2] is not an object")


def test_records_share_the_strings_pods_repeat():
    """Two pods decoded from separate bytes, both paths: the values every pod of a node repeats are one object each,
    so a record costs its own identity, not another copy of its node's name or its quantities (on interpreters
    where interned strings are freed; the suite runs on 3.11)."""
    a, b = (json.dumps(realistic_pod(i)).encode() for i in (1, 22))  # both in team-1, app memory 2Gi
    for decode in (POD.record, lambda data: POD.tolerant(json.loads(data))):
        x, y = decode(a), decode(b)
        assert x.namespace == y.namespace and x.namespace is y.namespace, f"not shared on Python {sys.version}"
        assert x.node_name is y.node_name and x.phase is y.phase
        for cx, cy in zip(x.containers + x.init_containers, y.containers + y.init_containers, strict=True):
            assert cx.name is cy.name
            assert cx.requests["memory"] == cy.requests["memory"] and cx.requests["memory"] is cy.requests["memory"]
        assert x.statuses[0].name is y.statuses[0].name
        assert x.uid != y.uid and x.name != y.name  # identities stay their own


def test_records_share_request_maps_and_containers_and_a_changed_request_is_its_own():
    """A node's pods repeat the same containers and requests in every event: each distinct one is one object, shared
    by every record that has it (less memory, less for the garbage collector, nothing rebuilt per event); a request
    that changes, or changes back, is read as it now is, never from an earlier event."""
    def app(cpu: str, memory: str = "1Gi") -> dict:
        return pod("p", containers=[container("app", cpu, memory), container("log", "10m")],
                   container_statuses=[{"name": "app", "allocatedResources": {"cpu": cpu, "memory": memory}}])

    for decode in (POD.record, lambda obj: POD.tolerant(json.loads(json.dumps(obj)))):
        first, again, other = decode(app("100m")), decode(app("100m")), decode(app("200m"))
        assert first.containers[0] is again.containers[0] and first.containers[1] is other.containers[1]
        assert first.containers[0].requests is again.statuses[0].allocated  # one map for the same two quantities
        assert other.containers[0].requests == {"cpu": "200m", "memory": "1Gi"} == other.statuses[0].allocated
        assert decode(app("100m")).containers[0].requests == {"cpu": "100m", "memory": "1Gi"}  # back, not stale
        assert decode(app("100m", "2Gi")).containers[0].requests == {"cpu": "100m", "memory": "2Gi"}


@pytest.mark.parametrize("created", ["2026-11-30T06:00:00Z", "yesterday"])
def test_a_creation_time_is_read_alike_at_every_event(created):
    """Times are parsed once per distinct text; an unreadable one is still a problem of every record that has it."""
    p = pod("p")
    p["metadata"]["creationTimestamp"] = created
    records = [POD.record(json.dumps(p).encode()) for _ in range(3)]
    assert len({r.eviction.created for r in records}) == 1
    readable = created != "yesterday"
    assert [r.eviction.created is not None for r in records] == [readable] * 3
    assert [any("creationTimestamp" in x for x in r.problems) for r in records] == [not readable] * 3


def test_a_memoryview_the_typed_path_refuses_decodes_like_its_bytes():
    # The fast path takes bytes, bytearray or a memoryview; what it refuses was parsed by json.loads, which takes no
    # memoryview: the tolerant path raised TypeError for it (found by mypy) instead of reading the pod.
    raw = json.dumps({"metadata": {"name": "web", "uid": "u1"}, "spec": 5}).encode()
    record = POD.record(memoryview(raw))
    assert record == POD.record(raw)
    assert record.name == "web" and record.problems == ("spec is not an object",)
