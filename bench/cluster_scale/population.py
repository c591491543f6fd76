"""Population: workload pods created unbound, bound by the real scheduler, set Running by KWOK."""

from __future__ import annotations

import json
import time
import urllib.parse
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bench.cluster_scale.control_plane import Api, scheduler_metric
from bench.cluster_scale.progress import log
from bench.cluster_scale.sizes import WRITERS
from bench.common import load
from testkit.factory import for_create, realistic_pod
from testkit.kwok import CUSTOM_STATUS_ANNOTATION
from testkit.trust import TrustCluster


def pod_templates(count: int = 35) -> list[dict]:
    """Realistic pod bodies (env, probes, init containers and a sidecar; every fifth a NeonVM runner) as a client
    POSTs them: no node, no status; the API server adds the service-account volume itself."""
    out = []
    for i in range(count):
        body = for_create(realistic_pod(i))
        body["spec"].pop("volumes", None)
        for c in body["spec"]["containers"] + body["spec"].get("initContainers", []):
            c.pop("volumeMounts", None)
        out.append(body)
    return out


def pod_body(templates: list[dict], i: int, name: str, node: str | None = None, kwok: bool = True) -> bytes:
    """One pod to POST; ``kwok=False`` marks it for KWOK to leave alone (no status is ever written for it)."""
    body = templates[i % len(templates)]
    meta = {**body["metadata"], "name": name}
    if not kwok:
        meta["annotations"] = {**meta.get("annotations", {}), CUSTOM_STATUS_ANNOTATION[0]: CUSTOM_STATUS_ANNOTATION[1]}
    body = {**body, "metadata": meta}
    if node is not None:
        body = {**body, "spec": {**body["spec"], "nodeName": node}}
    return json.dumps(body).encode()


def count_pods(api: Api, selector: str) -> int:
    """Pods matching a field selector, counted from a metadata-only LIST served by the watch cache."""
    status, body = api.request("GET", f"/api/v1/pods?resourceVersion=0&fieldSelector={urllib.parse.quote(selector)}",
                               accept="application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
    if status != 200:
        raise RuntimeError(f"LIST pods {selector}: HTTP {status}: {body[:300]!r}")
    return len(json.loads(body).get("items") or [])


@dataclass
class Population:
    created_seconds: float
    scheduled_seconds: float
    running_seconds: float
    pods: int


def populate(cluster: TrustCluster, api: Api, namespace: str, count: int, expected_scheduled: int) -> Population:
    """``count`` unbound pods POSTed in parallel; the real scheduler binds them, KWOK sets them Running."""
    templates = pod_templates()
    started = time.monotonic()
    failures: Counter = Counter()

    def create(i: int) -> None:
        status, body = api.request("POST", f"/api/v1/namespaces/{namespace}/pods",
                                   pod_body(templates, i, f"app-{i:05d}"))
        if status != 201:
            failures[status] += 1
            if failures[status] <= 3:
                log(f"create app-{i:05d}: HTTP {status}: {body[:300]!r}")

    with ThreadPoolExecutor(WRITERS) as pool:
        for done, _ in enumerate(pool.map(create, range(count)), start=1):
            if done % 2000 == 0:
                log(f"{done}/{count} pods created ({done / (time.monotonic() - started):.0f}/s; {load()})")
    created = time.monotonic() - started
    if failures:
        raise RuntimeError(f"pod creation failed: {dict(failures)}")
    log(f"{count} pods created in {created:.0f} s ({count / created:.0f}/s)")

    def scheduled() -> float:
        return scheduler_metric(cluster, "scheduler_schedule_attempts_total", result="scheduled")

    deadline = time.monotonic() + max(900.0, count / 5)
    while (bound := scheduled()) < expected_scheduled:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {bound:.0f} of {expected_scheduled} pods scheduled")
        log(f"{bound:.0f}/{expected_scheduled} pods bound by the scheduler ({load()})")
        time.sleep(10)
    scheduled_at = time.monotonic() - started
    log(f"all bound {scheduled_at:.0f} s after the first create")
    while (pending := count_pods(api, "status.phase!=Running")) > 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{pending} pods not Running")
        log(f"{pending} pods not yet Running (KWOK)")
        time.sleep(10)
    return Population(created, scheduled_at, time.monotonic() - started, count)
