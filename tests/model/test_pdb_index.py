"""The PDB index finds exactly the PDBs a scan of every PDB with ``selects`` finds, in the same order, and its
substring pre-check on the joined label string never turns away a PDB that selects the pod."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.model.pdb import LabelSelector, PdbRecord, Requirement, selects
from agent.model.pdb_index import PdbIndex, by_namespace, covering, may_select
from agent.model.pod import EvictionFacts

WORDS = ["a", "b", "ab", "ba", ""]
OPERATORS = ["In", "NotIn", "Exists", "DoesNotExist", "Bogus"]

requirements = st.builds(lambda key, op, values: Requirement(key=key, operator=op, values=tuple(values)),
                         st.sampled_from(WORDS[:4]), st.sampled_from(OPERATORS),
                         st.lists(st.sampled_from(WORDS), max_size=2))
selectors = st.one_of(st.none(), st.builds(
    lambda labels, exprs: LabelSelector(match_labels=labels, match_expressions=tuple(exprs)),
    st.dictionaries(st.sampled_from(WORDS[:4]), st.sampled_from(WORDS), max_size=2),
    st.lists(requirements, max_size=2)))
# Labels as the decoder joins them (sorted by key), and hand-written strings a replay could hold (a NUL in a key).
label_dicts = st.dictionaries(st.sampled_from(WORDS[:4]), st.sampled_from(WORDS), max_size=4)
joined = st.one_of(label_dicts.map(lambda d: "\0".join(f"{k}\0{v}" for k, v in sorted(d.items()))),
                   st.lists(st.sampled_from(WORDS), max_size=6).map("\0".join))


@given(selector=selectors, labels=joined)
@settings(max_examples=500)
def test_the_substring_check_never_turns_away_a_selecting_pdb(selector, labels):
    pdb = PdbRecord(uid="u", namespace="ns", name="p", selector=selector)
    if selects(pdb, "ns", EvictionFacts(labels=labels).label_map()):
        assert may_select(selector, labels)


def random_pdb(rng: random.Random, uid: str) -> PdbRecord:
    labels = {rng.choice(WORDS[:4]): rng.choice(WORDS) for _ in range(rng.randrange(3))}
    exprs = tuple(Requirement(key=rng.choice(WORDS[:4]), operator=rng.choice(OPERATORS[:4]),
                              values=tuple(rng.sample(WORDS, rng.randrange(3)))) for _ in range(rng.randrange(2)))
    selector = None if rng.random() < 0.1 else LabelSelector(match_labels=labels, match_expressions=exprs)
    return PdbRecord(uid=uid, namespace=rng.choice(["ns1", "ns2", "ns3"]), name=f"p-{uid}", selector=selector,
                     disruptions_allowed=rng.randrange(2), resource_version=str(rng.random()))


def test_the_index_finds_what_a_scan_of_every_pdb_finds_in_the_clusters_order():
    rng = random.Random(38)
    index = PdbIndex()
    held: dict[str, PdbRecord] = {}  # what the state kept before the index: a dict in arrival order
    for _ in range(3000):
        uid = f"u{rng.randrange(40)}"
        if rng.random() < 0.25:
            assert index.pop(uid) == held.pop(uid, None)
        else:
            pdb = random_pdb(rng, uid)
            assert index.put(pdb) == held.get(uid)
            held[uid] = pdb
        assert index.values() == tuple(held.values())
        labels = {rng.choice(WORDS[:4]): rng.choice(WORDS) for _ in range(rng.randrange(4))}
        namespace = rng.choice(["ns1", "ns2", "ns3", "ns4"])
        scan = tuple(p for p in held.values() if selects(p, namespace, labels))
        assert index.covering(namespace, labels) == scan
        assert tuple(covering(by_namespace(list(held.values())).get(namespace, ()), namespace, labels)) == scan
        assert index.in_order(reversed(scan)) == scan


def test_by_namespace_keeps_duplicates_and_order():
    a1, b, a2 = (PdbRecord(uid="x", namespace=ns, name=n) for ns, n in (("a", "1"), ("b", "2"), ("a", "3")))
    assert by_namespace([a1, b, a2]) == {"a": [a1, a2], "b": [b]}
