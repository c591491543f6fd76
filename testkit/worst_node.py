"""The worst node the API server allows (issue 29, item 2): a tenant's running pods and a Job's completed ones on one
node, every pod's annotations at the API server's limit of 256 KiB per object (one ``vm.neon.tech/usage`` annotation
the agent refuses). The suite's test (tests/cluster/test_cluster_worst_node.py) builds it scaled down, the benchmark
(``bench/run.py worst-node``) at full size.
"""

from __future__ import annotations

import functools
import gc
import json
import tracemalloc
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from agent.config import from_sources
from agent.model.pdb import MAX_SELECTOR_BYTES, SMALL_SELECTOR_BYTES
from agent.run.agent import Agent
from testkit.cluster_client import ApiError, ClusterClient
from testkit.waiting import wait_until

USAGE = "vm.neon.tech/usage"
#: The API server's limit on one object's annotations (keys and values), apimachinery TotalAnnotationSizeLimitB.
ANNOTATIONS_LIMIT = 256 * 1024


def huge_usage() -> str:
    """A usage annotation that fills the object's annotation budget to the byte."""
    head = '{"cpu":"1","memory":"1Gi","pad":"'
    return head + "x" * (ANNOTATIONS_LIMIT - len(USAGE) - len(head) - 2) + '"}'


def tenant_pod(name: str, job: bool, usage: str, node: str, namespace: str = "default",
               labels: dict[str, str] | None = None, owner: dict | None = None,
               containers: list[dict] | None = None) -> dict:
    """A pod bound to ``node`` (no scheduler, no kubelet: its status is written as a kubelet would), tolerating the
    taints a node without a kubelet gets, so the taint manager never evicts it during the run. ``usage`` "": no
    annotation; ``labels``: more labels; ``owner``: its controller's ownerReference; ``containers``: its containers
    (default: one asking 100m and 128Mi)."""
    labels = ({"job-name": "batch"} if job else {"app": "tenant"}) | (labels or {})
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels,
                            "annotations": {USAGE: usage} if usage else {}}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "restartPolicy": "Never" if job else "Always",
                     "tolerations": [{"operator": "Exists"}],
                     "containers": containers or [{"name": "app", "image": "example.invalid/app:1",
                                                   "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}


def add_node(cluster: ClusterClient, node: str, pods: int) -> None:
    """A Node with room for ``pods`` pods and no kubelet behind it (the tenant's pods tolerate the taints it gets)."""
    capacity = {"cpu": "64", "memory": "256Gi", "pods": str(pods)}
    cluster.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
                                          "status": {"capacity": capacity, "allocatable": capacity}})


@contextmanager
def tenant_namespace(cluster: ClusterClient, node: str, pods: int) -> Iterator[str]:
    """A node (add_node) and a new tenant namespace for the test's objects; both deleted after."""
    add_node(cluster, node, pods=pods)
    name = cluster.create_namespace("tenant")
    try:
        yield name
    finally:
        cluster.api("DELETE", f"/api/v1/namespaces/{name}")
        cluster.api("DELETE", f"/api/v1/nodes/{node}")


def create_pods(cluster: ClusterClient, running: int, completed: int, node: str, namespace: str = "default",
                usage: str | None = None, labels: dict[str, str] | None = None, owner: dict | None = None,
                containers: list[dict] | None = None, prefix: str = "app") -> None:
    """``running`` pods Running (``<prefix>-<i>``) and ``completed`` Succeeded (``batch-<i>``, as a Job leaves them),
    four requests at a time; each with ``usage`` (default: huge_usage(); "": none) and ``labels``, ``owner``,
    ``containers`` as tenant_pod takes them."""
    usage = huge_usage() if usage is None else usage

    def one(i: int) -> None:
        job = i >= running
        name = f"batch-{i - running}" if job else f"{prefix}-{i}"
        cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods",
                    tenant_pod(name, job, usage, node, namespace, labels, owner, containers), timeout=120)
        cluster.api("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                    {"status": {"phase": "Succeeded" if job else "Running"}}, timeout=120)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(running + completed)))


def agent_bytes() -> int:
    """Bytes alive in the Python heap that were allocated in the agent's own code (tracemalloc must be tracing)."""
    gc.collect()
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, "*/agent/*")])
    return sum(stat.size for stat in snapshot.statistics("filename"))


def start_agent(cluster: ClusterClient, node: str, debug_address: str = "off") -> Agent:
    """The agent in-process against ``cluster`` for ``node``, exporting nothing and reading no /proc."""
    flags = {"node_name": node, "kubeconfig": str(cluster.admin_kubeconfig), "exporter": "none",
             "debug_address": debug_address, "procfs": "off", "read_timeout": 30.0}
    return Agent(from_sources(flags, {})).start()


def held_per_pod(start: Callable[[], Agent], create: Callable[[], None], held: Callable[[Agent], object],
                 check: Callable[[Agent], None], pods: int) -> tuple[float, float]:
    """Bytes the agent's own code keeps per pod, read twice: by an agent running while ``create`` makes the pods (their
    WATCH events), then by a second one started after (its initial LIST). ``held`` says an agent holds them all (it is
    also its wait's message), ``check`` asserts what each agent must show."""
    tracemalloc.start()
    try:
        by_watch = _per_pod(start, create, held, check, pods)
        by_list = _per_pod(start, None, held, check, pods)
    finally:
        tracemalloc.stop()
    return by_watch, by_list


def _per_pod(start: Callable[[], Agent], create: Callable[[], None] | None, held: Callable[[Agent], object],
             check: Callable[[Agent], None], pods: int) -> float:
    before = agent_bytes()
    agent = start()
    try:
        if create is not None:
            wait_until(lambda: agent.state.synced, 60, message="the agent's initial LIST")
            before = agent_bytes()
            create()
        who = "the agent" if create is not None else "the second agent's LIST"
        wait_until(lambda: held(agent), 180, interval=0.5, message=f"{who} holds every pod")
        kept = (agent_bytes() - before) / pods
        check(agent)
        return kept
    finally:
        agent.shutdown(final_export=False)


#: The issue's PDB selector (issue 38, item 1): ``app In [210,000 distinct four-letter values]``, 1.47 MB of JSON,
#: which the API server admits.
SELECTOR_VALUES = 210_000


def selector_pdb(name: str, values: list[str]) -> dict:
    """A PDB whose selector is ``app In values``."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {"minAvailable": 1, "selector": _selector(values)}}


def _selector(values: list[str], key: str = "app") -> dict:
    return {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}


def huge_selector_pdb(name: str, values: int = SELECTOR_VALUES) -> dict:
    """A PDB whose selector is ``app In`` ``values`` distinct four-letter values."""
    return selector_pdb(name, [f"{chr(97 + i // 17576 % 26)}{chr(97 + i // 676 % 26)}{chr(97 + i // 26 % 26)}"
                               f"{chr(97 + i % 26)}" for i in range(values)])


#: Label values of two characters (3,844 of them): five bytes of JSON each, a Python string of about 50 bytes and its
#: pointer once decoded, the most memory per selector byte a distinct value costs (one-character strings are
#: CPython's shared singletons).
_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_PAIRS = [a + b for a in _ALNUM for b in _ALNUM]


def kept_selector_pdb(name: str) -> dict:
    """A PDB whose selector is the largest the agent keeps (MAX_SELECTOR_BYTES of JSON as the API server writes it,
    within a few bytes), in the shape that costs it the most memory per byte: ``app In`` distinct two-character
    values. The agent's shared bounds (agent.model.pdb.SelectorBudget) keep one of them per namespace."""
    empty = len(selector_json([]))
    return selector_pdb(name, _PAIRS[:(MAX_SELECTOR_BYTES - empty + 1) // 5])


def small_selector_values(i: int, key: str = "app") -> list[str]:
    """The ``i``-th of distinct value lists that make a ``key In`` selector the largest the agent always keeps
    (SMALL_SELECTOR_BYTES of JSON), two-character values, each list starting elsewhere in the pairs."""
    count = _small_count(key)
    start = i * count % (len(_PAIRS) - count)
    return _PAIRS[start:start + count]


@functools.cache
def _small_count(key: str) -> int:
    """How many two-character values the agent's own reader keeps within SMALL_SELECTOR_BYTES (it counts the
    selector as it reads it, a few bytes more than the JSON)."""
    from agent.decode.reader import PDB

    def size(count: int) -> int:
        pdb = selector_pdb("x", [])
        pdb["spec"]["selector"] = _selector(_PAIRS[:count], key)
        return PDB.record(json.dumps(pdb).encode()).selector_bytes

    count = 1
    while size(count + 1) <= SMALL_SELECTOR_BYTES:
        count += 1
    return count


def small_selector_pdb(name: str, i: int) -> dict:
    """A PDB of the largest selector the agent keeps whatever the other PDBs hold (small_selector_values)."""
    return selector_pdb(name, small_selector_values(i))


def selector_json(values: list[str], key: str = "app") -> bytes:
    """The JSON of an ``app In values`` selector as the API server writes it (Go's field order, no spaces)."""
    return json.dumps(_selector(values, key), separators=(",", ":")).encode()


def many_labels(count: int, prefix: str = "") -> dict[str, str]:
    """``count`` distinct labels (issue 38, item 3: 30,000 per pod), their keys under ``prefix``
    (``tenant.example.com/``: labels as a tenant's tooling names them)."""
    return {f"{prefix}l{i:05d}": f"v{i:05d}" for i in range(count)}


def minimal_containers(count: int) -> list[dict]:
    """``count`` containers of the least a container needs (a name and an image) and requests (issue 38, item 4)."""
    return [{"name": f"c{i}", "image": "example.invalid/app:1",
             "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}} for i in range(count)]


#: What leaves a tenant's object small: an object at etcd's limit cannot be deleted as it is (the API server writes
#: the deletion into the object first, and etcd refuses that write too).
SHRUNK = {"metadata": {"labels": None, "annotations": None}}


def stored(cluster: ClusterClient, collection: str, obj: dict, status: dict | None = None,
           shrink: dict | None = None) -> bool:
    """Whether the API server stores ``obj`` in ``collection`` (and then ``status``, as a kubelet or controller
    writes it), or refuses it for its size (HTTP 413, or etcd's "request is too large"); found by trying, the
    object deleted at once after (no grace period: no kubelet confirms it; made small by the merge patch ``shrink``,
    default SHRUNK, first when it is too large to delete). Any other refusal is an error."""
    name = obj["metadata"]["name"]
    try:
        cluster.api("POST", collection, obj, timeout=120)
    except ApiError as exc:
        if _too_large(exc):
            return False
        raise
    try:
        if status is not None:
            cluster.api("PATCH", f"{collection}/{name}/status", {"status": status}, timeout=120)
        return True
    except ApiError as exc:
        if _too_large(exc):
            return False
        raise
    finally:
        _delete(cluster, f"{collection}/{name}", SHRUNK if shrink is None else shrink)


def _delete(cluster: ClusterClient, path: str, shrink: dict) -> None:
    now = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    try:
        cluster.api("DELETE", path, now, timeout=120)
    except ApiError as exc:
        if not _too_large(exc):
            raise
        cluster.api("PATCH", path, shrink, timeout=120)
        cluster.api("DELETE", path, now, timeout=120)


def _too_large(exc: ApiError) -> bool:
    return exc.status == 413 or "too large" in exc.body or "larger than max" in exc.body


def largest(fits: Callable[[int], bool], low: int, high: int) -> int:
    """The largest n in [low, high) for which ``fits(n)``, by bisection: ``low`` must fit and ``high`` must not
    (checked, so a bound that moved says so rather than returning a wrong number)."""
    if not fits(low) or fits(high):
        raise RuntimeError(f"the search for the largest size needs {low} to fit and {high} not to")
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low
