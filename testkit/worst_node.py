"""The worst node the API server allows (issue 29, item 2): a tenant's running pods and a Job's completed ones on one
node, every pod's annotations at the API server's limit of 256 KiB per object (one ``vm.neon.tech/usage`` annotation
the agent refuses). The suite's test (tests/cluster/test_cluster_worst_node.py) builds it scaled down, the benchmark
(``bench/run.py worst-node``) at full size.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from agent.config import from_sources
from agent.run.agent import Agent
from testkit.cluster_client import ClusterClient
from testkit.waiting import wait_until

USAGE = "vm.neon.tech/usage"
#: The API server's limit on one object's annotations (keys and values), apimachinery TotalAnnotationSizeLimitB.
ANNOTATIONS_LIMIT = 256 * 1024


def huge_usage() -> str:
    """A usage annotation that fills the object's annotation budget to the byte."""
    head = '{"cpu":"1","memory":"1Gi","pad":"'
    return head + "x" * (ANNOTATIONS_LIMIT - len(USAGE) - len(head) - 2) + '"}'


def tenant_pod(name: str, job: bool, usage: str, node: str, namespace: str = "default",
               labels: dict[str, str] | None = None, owner: dict | None = None) -> dict:
    """A pod bound to ``node`` (no scheduler, no kubelet: its status is written as a kubelet would), tolerating the
    taints a node without a kubelet gets, so the taint manager never evicts it during the run. ``usage`` "": no
    annotation; ``labels``: more labels; ``owner``: its controller's ownerReference."""
    labels = ({"job-name": "batch"} if job else {"app": "tenant"}) | (labels or {})
    meta = {"name": name, "namespace": namespace, "labels": labels, "annotations": {USAGE: usage} if usage else {}}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "restartPolicy": "Never" if job else "Always",
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "app", "image": "example.invalid/app:1",
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
                usage: str | None = None, labels: dict[str, str] | None = None, owner: dict | None = None) -> None:
    """``running`` pods Running and ``completed`` Succeeded (as a Job leaves them), four requests at a time; each
    with ``usage`` (default: huge_usage(); "": none) and ``labels``, ``owner`` as tenant_pod takes them."""
    usage = huge_usage() if usage is None else usage

    def one(i: int) -> None:
        job = i >= running
        name = f"batch-{i - running}" if job else f"app-{i}"
        cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods",
                    tenant_pod(name, job, usage, node, namespace, labels, owner), timeout=120)
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


def huge_selector_pdb(name: str, values: int = SELECTOR_VALUES) -> dict:
    """A PDB whose selector is ``app In`` ``values`` distinct four-letter values."""
    letters = [f"{chr(97 + i // 17576 % 26)}{chr(97 + i // 676 % 26)}{chr(97 + i // 26 % 26)}{chr(97 + i % 26)}"
               for i in range(values)]
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {"minAvailable": 1,
                     "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": letters}]}}}


def many_labels(count: int) -> dict[str, str]:
    """``count`` distinct labels (issue 38, item 3: 30,000 per pod)."""
    return {f"l{i:05d}": f"v{i:05d}" for i in range(count)}
