"""The worst node the API server allows (issue 29, item 2): a tenant's running pods and a Job's completed ones on one
node, every pod's annotations at the API server's limit of 256 KiB per object (one ``vm.neon.tech/usage`` annotation
the agent refuses). The suite's test (tests/cluster/test_cluster_worst_node.py) builds it scaled down, the benchmark
(``bench/run.py worst-node``) at full size.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from testkit.cluster_client import ClusterClient

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
