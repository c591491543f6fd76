"""A pod with thousands of containers (issue 38, item 4): the API server sets no bound (etcd's request size does); the agent keeps at most
MAX_CONTAINERS of each list one by one and the rest as sums, and the pod's requests stay exact.

The exact value is computed from a record built with every container (PodRecord's public constructor, as decoding
would have built it before the bound), under every release's rules, so the folding is checked against the arithmetic
itself rather than against numbers written here.
"""

from __future__ import annotations

import json
import pickle
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.decode.reader import POD
from agent.model.autoscaler_requests import go_requests, requests_of_release
from agent.model.container_bound import MAX_CONTAINERS, bound_containers
from agent.model.go_amount import go_amount, milli_value
from agent.model.pod import ContainerRequests, StatusRequests
from agent.model.pod_requests import aggregate, pod_requests
from agent.model.quantity import QuantityError, parse_quantity
from agent.model.rules import RULES_1_36, RULES_1_37
from agent.model.valuation import evaluate
from testkit.factory import container, pod, vm_pod

MANY = 10_000
#: What a record of a pod with 10,000 containers and 10,000 init containers may weigh pickled (a 10,000-container
#: record kept one by one weighs over 600 KiB).
RECORD_BOUND = 24 * 1024


def many(n: int, prefix: str = "c", seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    return [container(f"{prefix}{i}", f"{rng.randint(1, 900)}m", f"{rng.randint(1, 512)}Mi") for i in range(n)]


def mixed_init(n: int, seed: int = 2) -> list[dict]:
    """Init containers and sidecars interleaved, the last a regular init container larger than all the sidecars
    together: its peak (its request plus every sidecar before it) decides, so the tail's order matters."""
    rng = random.Random(seed)
    out = [container(f"i{i}", f"{rng.randint(1, 4000)}m", f"{rng.randint(1, 4096)}Mi",
                     restart_policy="Always" if rng.random() < 0.3 else None) for i in range(n - 1)]
    return [*out, container("last", "100000", "10000Gi")]


def whole(record, raw: dict):
    """The record with every container kept one by one: what the arithmetic gives without the bound."""
    def requests(c: dict) -> dict:
        return dict(c.get("resources", {}).get("requests", {}))

    spec = raw["spec"]
    app = tuple(ContainerRequests(c["name"], requests(c)) for c in spec["containers"])
    init = tuple(ContainerRequests(c["name"], requests(c), c.get("restartPolicy") == "Always")
                 for c in spec.get("initContainers", ()))
    statuses = tuple(StatusRequests(s["name"], s.get("allocatedResources") or None, "resources" in s,
                                    (s.get("resources") or {}).get("requests") or None)
                     for s in raw["status"].get("containerStatuses", ()))
    return record._replace(containers=app, init_containers=init, statuses=statuses, problems=())


def records(p: dict):
    data = json.dumps(p).encode()
    yield POD.record(data)
    yield POD.tolerant(json.loads(data))


@pytest.mark.parametrize("shape", ["containers", "init", "both"])
def test_ten_thousand_containers_are_kept_bounded_and_exact(shape):
    app = many(MANY) if shape != "init" else many(3)
    init = mixed_init(MANY) if shape != "containers" else []
    p = pod("wide", containers=app, init_containers=init)
    for record in records(p):
        assert len(record.containers) <= MAX_CONTAINERS + 1
        assert len(record.init_containers) <= MAX_CONTAINERS + 2
        assert len(pickle.dumps(record)) < RECORD_BOUND
        assert any("per-container detail dropped" in x for x in record.problems)  # the truncation is said
        full = whole(record, p)
        for rules in (RULES_1_36, RULES_1_37):
            bounded, exact = pod_requests(record, rules), pod_requests(full, rules)
            assert (bounded.cpu, bounded.memory, bounded.spec_cpu, bounded.spec_memory) == (
                exact.cpu, exact.memory, exact.spec_cpu, exact.spec_memory)
            value = evaluate(record, rules)
            assert value.reported and (value.cpu, value.memory) == (exact.cpu, exact.memory)
            assert len(value.contributions) <= 2 * MAX_CONTAINERS + 4


def test_statuses_that_repeat_the_spec_are_folded_too():
    """A running pod: the kubelet reports every container's allocatedResources and resources."""
    app = many(MANY)
    statuses = [{"name": c["name"], "allocatedResources": c["resources"]["requests"],
                 "resources": {"requests": c["resources"]["requests"]}} for c in app]
    p = pod("running", containers=app, container_statuses=statuses)
    record = POD.record(json.dumps(p).encode())
    assert len(record.statuses) == MAX_CONTAINERS + 1
    full = whole(record, p)
    for rules in (RULES_1_36, RULES_1_37):
        got, exact = pod_requests(record, rules), pod_requests(full, rules)
        assert (got.cpu, got.memory) == (exact.cpu, exact.memory)


def test_a_resize_past_the_bound_still_counts_the_pod():
    """Statuses that differ from the spec past the bound: folded as one container, the pod still counted, at least
    its spec and at most what every status one by one gives (docs/requests.md says how it is read)."""
    app = many(MAX_CONTAINERS + 50)
    statuses = [{"name": c["name"], "allocatedResources": {"cpu": "1", "memory": "1Gi"},
                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}} for c in app[MAX_CONTAINERS:]]
    p = pod("resizing", containers=app, container_statuses=statuses)
    record = POD.record(json.dumps(p).encode())
    full = whole(record, p)
    for rules in (RULES_1_36, RULES_1_37):
        got, exact = pod_requests(record, rules), pod_requests(full, rules)
        assert exact.spec_cpu <= got.cpu <= exact.cpu and exact.spec_memory <= got.memory <= exact.memory
        assert got.cpu > exact.spec_cpu


def test_the_first_container_stays_for_neons_patch():
    p = vm_pod("vm", "vm", "2", "4Gi")
    p["spec"]["containers"] = [p["spec"]["containers"][0], *many(MANY)]
    record = POD.record(json.dumps(p).encode())
    assert record.containers[0].name == p["spec"]["containers"][0]["name"]
    full = whole(record, p)
    got, exact = evaluate(record, RULES_1_37), evaluate(full, RULES_1_37)
    assert got.source == exact.source and (got.cpu, got.memory) == (exact.cpu, exact.memory)


def test_within_the_bound_nothing_changes():
    app, init = many(MAX_CONTAINERS), mixed_init(MAX_CONTAINERS)
    record = POD.record(json.dumps(pod("p", containers=app, init_containers=init)).encode())
    assert [c.name for c in record.containers] == [c["name"] for c in app]
    assert [c.name for c in record.init_containers] == [c["name"] for c in init]
    assert record.problems == ()
    kept = bound_containers(record.containers, record.init_containers, record.statuses)
    assert kept.containers is record.containers and kept.problems == ()


def gpu_total(entries, resource: str, parse=parse_quantity) -> int:
    """A pod's request of ``resource`` from EvictionFacts.gpu, as the verdict reads it (KEP-753 over the entries, an
    unreadable quantity read as absent)."""
    def value(text: str) -> dict | None:
        try:
            return {"gpu": parse(text)}
        except QuantityError:
            return None

    return aggregate((kind, value(q) if r == resource else None) for kind, _, r, q in entries).get("gpu", 0)


def test_gpu_requests_past_the_bound_are_folded_exactly():
    rng = random.Random(3)

    def gpu(c: dict, resource: str) -> dict:
        c["resources"]["requests"][resource] = str(rng.randint(1, 4))
        return c

    app = [gpu(c, "nvidia.com/gpu") for c in many(MANY)]
    init = [gpu(c, "nvidia.com/gpu" if i % 2 else "amd.com/gpu") for i, c in enumerate(mixed_init(MANY))]
    for resource in ("nvidia.com/gpu", "amd.com/gpu"):  # the last regular init container's peak decides
        init[-1]["resources"]["requests"][resource] = "100000"
    p = pod("gpus", containers=app, init_containers=init)
    record = POD.record(json.dumps(p).encode())
    kept = record.eviction.gpu
    assert len(kept) <= 2 * MAX_CONTAINERS + 6
    full = [("container", c["name"], "nvidia.com/gpu", c["resources"]["requests"]["nvidia.com/gpu"]) for c in app]
    for c in init:
        kind = "sidecar" if c.get("restartPolicy") == "Always" else "init"
        full += [(kind, c["name"], r, q) for r, q in c["resources"]["requests"].items() if r.endswith("/gpu")]
    for resource in ("nvidia.com/gpu", "amd.com/gpu"):
        assert gpu_total(kept, resource) == gpu_total(full, resource) > 0


# -- the Go form of folded sums (what the verdict reads past int64 milli-units) -------------------------------------

#: Every suffix ParseQuantity knows, and exponents: each gives the sum a different power of ten, or a big decimal.
SUFFIXES = ("n", "u", "m", "", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3", "e-2", "e18")
AMOUNTS = st.one_of(st.integers(0, 999), st.integers(0, 10**19), st.sampled_from((10**9, 2**63 - 1, 92233720368547758)))
QUANTITIES = st.builds(lambda n, fraction, suffix: f"{n}{fraction}{suffix}", AMOUNTS,
                       st.sampled_from(("", "", ".5", ".000000001")), st.sampled_from(SUFFIXES))
RELEASES = ("neon", "1.32", "1.36", "1.37")
GPU = "nvidia.com/gpu"


def go_forms(record) -> list[tuple[str, str, int]]:
    """go_requests of the pod under each release: the amounts with their Go form, and their MilliValue()."""
    out = []
    for release in RELEASES:
        how = requests_of_release(release)
        for amount in go_requests(evaluate(record, how.rules), how):
            out.append((release, repr(amount), milli_value(amount)))
    return out


@st.composite
def wide_pods(draw) -> dict:
    # A few quantities per pod, repeated: sums of like quantities keep one power of ten, where the form matters.
    palette = draw(st.lists(QUANTITIES, min_size=1, max_size=3))

    def requests() -> dict:
        return {r: draw(st.sampled_from(palette)) for r in ("cpu", "memory", GPU) if draw(st.booleans())}

    def containers(prefix: str, n: int, sidecars: bool) -> list[dict]:
        out = []
        for i in range(n):
            c = {"name": f"{prefix}{i}", "resources": {"requests": requests()}}
            if sidecars and draw(st.booleans()):
                c["restartPolicy"] = "Always"
            out.append(c)
        return out

    app = containers("c", draw(st.integers(MAX_CONTAINERS + 1, MAX_CONTAINERS + 12)), False)
    init = containers("i", draw(st.sampled_from((0, 3, MAX_CONTAINERS + 1, MAX_CONTAINERS + 9))), True)
    return pod("wide", containers=app, init_containers=init)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wide_pods())
def test_a_folded_pod_keeps_the_go_form_of_its_requests(p):
    """go_requests of the folded record equals that of the same pod kept container by container: the same exact
    values, the same Go form (int64Amount and its power of ten, or inf.Dec) and so the same MilliValue()."""
    every = [("sidecar" if c.get("restartPolicy") == "Always" else "init" if init else "container", c["name"], GPU, q)
             for init, key in ((False, "containers"), (True, "initContainers"))
             for c in p["spec"].get(key, ()) if (q := c["resources"]["requests"].get(GPU)) is not None]
    for record in records(p):
        assert go_forms(record) == go_forms(whole(record, p))
        folded, exact = gpu_total(record.eviction.gpu, GPU, go_amount), gpu_total(every, GPU, go_amount)
        assert (repr(folded), milli_value(folded)) == (repr(exact), milli_value(exact))


def test_thirty_three_huge_memory_requests_keep_the_autoscalers_milli_value():
    """33 containers of 1000000000G: Go's sum is an int64Amount of 33000000000 at 10**9, whose MilliValue() is 0;
    written back as nano-units it read as a big decimal, whose MilliValue() wraps."""
    p = pod("huge", containers=[container(f"c{i}", "1", "1000000000G") for i in range(MAX_CONTAINERS + 1)])
    record = POD.record(json.dumps(p).encode())
    assert len(record.containers) == MAX_CONTAINERS + 1  # folded
    how = requests_of_release("1.36")
    _, memory = go_requests(evaluate(record, how.rules), how)
    assert (memory.dec, memory.exp10, milli_value(memory)) == (False, 9, 0)
    assert go_forms(record) == go_forms(whole(record, p))
