"""The worst node's kit (testkit/worst_node.py) builds what bench/worst_node.py says it measures: PDBs whose selector
is the largest the agent keeps, and the search for the largest object
the API server admits."""

from __future__ import annotations

import json

import pytest

from agent.decode.reader import PDB
from agent.model.pdb import MAX_SELECTOR_BYTES, SelectorBudget
from testkit.factory import pdb
from testkit.worst_node import kept_selector_pdb, largest, selector_json


def served(expressions: list[dict]) -> bytes:
    """A PDB of that selector as the API server serves it (Go's JSON: no spaces)."""
    return json.dumps(pdb("kept", namespace="tenant", match_expressions=expressions),
                      separators=(",", ":")).encode()


def test_the_kept_selector_is_the_largest_the_agent_keeps():
    expressions = kept_selector_pdb("kept")["spec"]["selector"]["matchExpressions"]
    values = expressions[0]["values"]
    assert len(set(values)) == len(values) and {len(v) for v in values} == {2}
    kept = PDB.record(served(expressions))
    assert kept.selector_over_bound == 0 and kept.selector is not None
    assert len(selector_json(values)) <= MAX_SELECTOR_BYTES < len(selector_json([*values, "zz"]))
    longer = PDB.record(served([{**expressions[0], "values": [*values, "zz"]}]))
    assert longer.selector_over_bound == len(selector_json([*values, "zz"]))
    # The shared bounds keep the first of a namespace (its share holds one such selector, as the agent counts it)
    # and refuse the second.
    budget = SelectorBudget()
    assert [budget.admit(kept).selector_over_bound == 0 for _ in range(2)] == [True, False]


def test_the_search_finds_the_largest_size_that_fits_and_refuses_a_wrong_bracket():
    tried = []

    def fits(n: int) -> bool:
        tried.append(n)
        return n <= 3_187

    assert largest(fits, 1, 10_000) == 3_187
    assert len(tried) <= 17  # a bisection, not a walk
    with pytest.raises(RuntimeError, match="needs 1 to fit and 3000 not to"):
        largest(fits, 1, 3_000)
