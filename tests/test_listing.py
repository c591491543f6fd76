import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.source.listing import iter_list

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
