import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.decode.reader import Unparsable
from agent.source.listing import iter_list, read_list

values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                      lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=10)


@given(st.dictionaries(st.text(max_size=6), values, max_size=4), st.lists(values, max_size=5), st.booleans(), st.integers(0, 2))
def test_same_as_json_loads(fields, items, items_first, indent):
    doc = dict(fields)
    doc.pop("items", None)
    ordered = {"items": items, **doc} if items_first else {**doc, "items": items}
    text = json.dumps(ordered, indent=indent or None)
    got_fields, got_items = iter_list(text)
    assert list(got_items) == items
    assert got_fields == doc


def test_list_without_items():
    fields, items = iter_list('{"kind": "PodList", "metadata": {"resourceVersion": "5"}}')
    assert list(items) == [] and fields["metadata"]["resourceVersion"] == "5"


@pytest.mark.parametrize("text", ["", "[]", '{"items": [1, 2', '{"a" 1}', '{"items": [1 2]}'])
def test_malformed_raises_value_error(text):
    with pytest.raises(ValueError):
        fields, items = iter_list(text)
        list(items)


def chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def as_values(items) -> list:
    """Items as values: read_list hands on JSON bytes (its fast path) or, after a fallback, parsed values."""
    return [json.loads(i) if isinstance(i, bytes) else i for i in items]


@given(st.dictionaries(st.text(max_size=6), values, max_size=4), st.lists(values, max_size=5), st.booleans(),
       st.integers(0, 2), st.integers(1, 300))
def test_read_list_same_as_json_loads_whatever_the_chunks(fields, items, items_first, indent, size):
    doc = dict(fields)
    doc.pop("items", None)
    ordered = {"items": items, **doc} if items_first else {**doc, "items": items}
    data = json.dumps(ordered, indent=indent or None).encode()
    got_fields, got_items = read_list(chunked(data, size))
    assert as_values(got_items) == items
    assert got_fields == doc


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")], ids=["compact", "spaced"])
def test_read_list_hands_on_each_item_as_bytes_without_the_whole_body(separators):
    items = [{"metadata": {"name": f"p{i}", "uid": str(i)}, "pad": "x" * 5000} for i in range(200)]
    data = json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": items}, separators=separators).encode()
    fields, got = read_list(chunked(data, 65536))
    got = list(got)
    assert all(isinstance(i, bytes) for i in got) and [json.loads(i) for i in got] == items
    assert fields == {"kind": "PodList", "metadata": {"resourceVersion": "7"}}


def test_read_list_keeps_good_items_around_a_malformed_one():
    body = b'{"metadata": {}, "items": [{"a": 1}, {"b": ,}, {"c": 3}], "after": true}'
    fields, items = read_list(chunked(body, 7))
    got = list(items)
    assert as_values([got[0], got[2]]) == [{"a": 1}, {"c": 3}]
    assert isinstance(got[1], Unparsable) and body[got[1].offset:].startswith(b'{"b"')
    assert fields == {"metadata": {}, "after": True}


@pytest.mark.parametrize("text", ["", "[]", '{"items": [1, 2', '{"a" 1}', '{"items": [1 2]}', '{"items": [{"a": 1}'])
def test_read_list_malformed_raises_value_error(text):
    with pytest.raises(ValueError):
        fields, items = read_list(chunked(text.encode(), 3))
        list(items)


# -- with a typed decoder: each item parsed once, its end found by where the next one starts ------

def _api_server_list(items, separators=(",", ":")) -> bytes:
    """A LIST body as the API server writes it: compact, the List's kind and version, items without theirs."""
    return json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"}, "items": items},
                      separators=separators).encode()


def _records(body: bytes, size: int, typed: bool):
    from agent.decode.reader import POD

    _, items = read_list(chunked(body, size), POD.list_item if typed else None)
    out = list(items)
    return out, [POD.record(i) for i in out]


def _pods(n: int) -> list[dict]:
    from testkit.factory import container, pod

    pods = []
    for i in range(n):
        p = pod(f"p{i}", containers=[container("c", f"{i + 1}00m", "64Mi")])
        del p["kind"], p["apiVersion"]
        pods.append(p)
    return pods


@given(st.integers(1, 12), st.integers(1, 700))
def test_typed_items_are_the_records_the_bytes_give_whatever_the_chunks(n, size):
    body = _api_server_list(_pods(n))
    typed_items, typed = _records(body, size, typed=True)
    plain_items, plain = _records(body, size, typed=False)
    assert typed == plain and [r.name for r in typed] == [f"p{i}" for i in range(n)]
    # Every item but the last came parsed once as a Struct; the last has no next item to end it.
    assert [isinstance(i, bytes) for i in typed_items] == [False] * (n - 1) + [True]


def test_a_marker_inside_an_item_or_a_refused_item_costs_nothing_but_speed():
    pods = _pods(4)
    # An array of objects that start with metadata inside a pod: a false end, whose slice is truncated.
    pods[1]["spec"]["volumes"] = [{"metadata": {"x": 1}}, {"metadata": {"name": "tmpl"}}]
    pods[1]["spec"]["extra"] = [{"a": 1}, {"metadata": {"name": "y"}}]
    # A pod the Structs refuse (a number for a name): the tolerant decoder reads it.
    pods[2]["spec"]["containers"][0]["name"] = 7
    body = _api_server_list(pods)
    assert b'},{"metadata":{' in json.dumps(pods[1]["spec"], separators=(",", ":")).encode()
    items, records = _records(body, 64, typed=True)
    _, plain = _records(body, 64, typed=False)
    assert records == plain and [r.name for r in records] == ["p0", "p1", "p2", "p3"]
    assert records[2].containers[0].name == "#0"  # as the tolerant decoder names a container without a usable name


def test_a_body_without_the_api_servers_layout_is_read_the_skipping_way_once_per_item():
    body = _api_server_list(_pods(50), separators=(", ", ": "))
    items, records = _records(body, 256, typed=True)
    assert all(isinstance(i, bytes) for i in items) and [r.name for r in records] == [f"p{i}" for i in range(50)]


# -- the msgspec behaviour the fast reader is built on ---------------------------------------------------------

def _error(decode, data: bytes) -> str:
    with pytest.raises(msgspec.DecodeError) as failed:
        decode(data)
    return str(failed.value)


@pytest.mark.parametrize("value", [b'7', b'"x,]"', b'[]', b'{"a":[1,{"b":"}"}]}', b'{"metadata":{"name":"p\\""}}'])
@pytest.mark.parametrize("after", [b',{"c":2}', b']', b'  \n,'])
def test_msgspec_names_where_a_complete_value_ends(value, after):
    """The skipping decoder's "trailing characters (byte N)": N - 1 is the first non-blank byte after the value."""
    from agent.source.listing import SKIPPING_DECODER, trailing_end

    message = _error(SKIPPING_DECODER.decode, value + after)
    assert trailing_end(message) == len(value) + len(after) - len(after.lstrip()), message


def test_msgspec_says_truncated_for_bytes_that_stop_inside_a_value_and_nothing_else():
    """Cut inside an item (by the skipping decoder or the typed one): read on. Malformed or refused: never
    "truncated", so the reader hands the item to the tolerant path instead of reading on."""
    from agent.decode.reader import POD
    from agent.source.listing import SKIPPING_DECODER, trailing_end, truncated

    item = _api_server_list(_pods(1))[len(b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9"},'
                                          b'"items":['):-2]
    for cut in (1, len(item) // 2, len(item) - 1):
        assert truncated(_error(SKIPPING_DECODER.decode, item[:cut])) and truncated(_error(POD.list_item, item[:cut]))
    for refused in (_error(SKIPPING_DECODER.decode, b'{"a":,}'), _error(POD.list_item, b'{"metadata":{"name":7}}')):
        assert not truncated(refused) and trailing_end(refused) is None
    assert POD.list_item(item).metadata.name == "p0"  # the whole item decodes: the cut ones failed for the cut


def test_an_api_servers_list_never_leaves_the_fast_path():
    """Each item but the last a typed Struct, the last its bytes, none from the json module's reader (a dict):
    fails if a msgspec upgrade (its messages) or a change here moves the reflector's LISTs to the slow path."""
    from agent.decode.reader import POD

    pods = _pods(300)
    # The next item's marker inside an item: its slice up to there is "truncated", and the next marker is tried.
    pods[5]["spec"]["volumes"] = [{"metadata": {"x": 1}}, {"metadata": {"name": "tmpl"}}]
    body = _api_server_list(pods)
    # Chunks shorter than an item: every item, the last one too, is read on after a "truncated".
    assert max(len(json.dumps(p, separators=(",", ":"))) for p in pods) > 200
    fields, items = read_list(chunked(body, 200), POD.list_item)
    items = list(items)
    assert [type(i).__name__ for i in items] == ["Pod"] * 299 + ["bytes"]
    assert fields == {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"}}
