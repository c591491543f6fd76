"""The page budget of /debug/pods counts what is served (agent/report/json_body.py): a page's pods counted one by one
with item_bytes add up to the served document's size, whatever they hold."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.report.json_body import item_bytes, json_body

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
                    max_leaves=20)


@given(st.lists(JSON, max_size=6), JSON)
def test_items_counted_one_by_one_are_the_served_size(items, totals):
    frame = {"pods": [], "totals": totals, "remaining": 7}
    served = len(json_body({**frame, "pods": items}))
    counted = len(json_body(frame)) + sum(item_bytes(item, 2) for item in items)
    assert served <= counted + 2 * bool(items) <= served + 2  # the last item has no comma; "[]" opens onto lines
