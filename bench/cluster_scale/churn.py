"""Churn: pods created on and deleted from the nodes at a fixed rate by several writer processes, each timed from
its API write to Prometheus."""

from __future__ import annotations

import json
import math
import multiprocessing
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass

from bench.cluster_scale.control_plane import Api, ApiAddress
from bench.cluster_scale.population import pod_body, pod_templates
from bench.cluster_scale.prometheus import prom_samples
from bench.cluster_scale.sizes import CHURN_KWOK, CHURN_LIFETIME, CHURN_RATE, CHURN_SECONDS, CHURN_WORKERS, WRITERS
from bench.cluster_scale.stats import pct


@dataclass(frozen=True, kw_only=True)
class ChurnPlan:
    """One churn writer's share: operations ``i`` with ``i % shards == shard``, timed from ``start`` (wall clock)."""

    address: ApiAddress
    namespace: str
    nodes: list[str]
    start: float
    rate: float
    seconds: float
    lifetime: float
    shard: int
    shards: int
    threads: int
    kwok: bool  # KWOK sets the pods Running (one status write each), or leaves them alone


def churn_shard(plan: ChurnPlan) -> dict:
    """Run one writer's share in its own process (one interpreter's GIL and TLS could not issue 200 writes per second
    on this machine: the last single-process run reached 65 with a dispatch lag of 70 s). Pods are created bound
    (spec.nodeName, round robin), each deleted with grace 0 ``lifetime`` seconds after its creation was due. Without
    ``plan.kwok`` KWOK leaves them Pending, so the API server takes two writes a pod, the ones the rate names; the
    agents value a bound Pending pod as a Running one (its requests)."""
    api, templates = Api(plan.address), pod_templates()
    total = int(plan.rate * plan.seconds)
    mine = range(plan.shard, total, plan.shards)
    ops = sorted([(i / plan.rate, "create", i) for i in mine]
                 + [(i / plan.rate + plan.lifetime, "delete", i) for i in mine])
    created: dict[str, tuple[str, float]] = {}
    deleted: dict[str, float] = {}
    failures: Counter = Counter()
    late: list[float] = []
    lock = threading.Lock()

    def do(op: str, i: int, due: float) -> None:
        with lock:
            late.append(time.time() - due)
        name, node = f"churn-{i:06d}", plan.nodes[i % len(plan.nodes)]
        if op == "create":
            status, _ = api.request("POST", f"/api/v1/namespaces/{plan.namespace}/pods",
                                    pod_body(templates, i, name, node, plan.kwok))
            with lock:
                if status == 201:
                    created[name] = (node, time.time())
                else:
                    failures[f"create {status}"] += 1
            return
        with lock:
            known = name in created
        if not known:
            with lock:
                failures["delete before its create returned"] += 1
            return
        status, _ = api.request("DELETE", f"/api/v1/namespaces/{plan.namespace}/pods/{name}",
                                json.dumps({"gracePeriodSeconds": 0}).encode())
        with lock:
            if status == 200:
                deleted[name] = time.time()
            else:
                failures[f"delete {status}"] += 1

    cpu0 = time.process_time()
    with ThreadPoolExecutor(plan.threads) as pool:
        futures = []
        for offset, op, i in ops:
            wait = plan.start + offset - time.time()
            if wait > 0:
                time.sleep(wait)
            futures.append(pool.submit(do, op, i, plan.start + offset))
        for f in futures:
            f.result()
    return {"created": created, "deleted": deleted, "failures": failures, "late": late,
            "cpu": time.process_time() - cpu0}


def churn(address: ApiAddress, namespace: str,
          nodes: list[str]) -> tuple[dict[str, tuple[str, float]], dict[str, float], dict]:
    """CHURN_RATE creations per second over ``nodes`` for CHURN_SECONDS, each pod deleted CHURN_LIFETIME seconds
    later, written by CHURN_WORKERS processes; returns per pod (node, creation answered) and deletion answered (wall
    clock), and the achieved rates."""
    start = time.time() + 5.0  # the workers' interpreters start before the first operation is due
    plans = [ChurnPlan(address=address, namespace=namespace, nodes=nodes, start=start, rate=CHURN_RATE,
                       seconds=CHURN_SECONDS, lifetime=CHURN_LIFETIME, shard=k, shards=CHURN_WORKERS,
                       threads=WRITERS * 2, kwok=CHURN_KWOK) for k in range(CHURN_WORKERS)]
    with ProcessPoolExecutor(CHURN_WORKERS, mp_context=multiprocessing.get_context("spawn")) as pool:
        parts = list(pool.map(churn_shard, plans))
    ended = time.time()
    created = {k: v for part in parts for k, v in part["created"].items()}
    deleted = {k: v for part in parts for k, v in part["deleted"].items()}
    failures: Counter[str] = sum((part["failures"] for part in parts), Counter())
    late = [x for part in parts for x in part["late"]]
    stats = {"start": start, "ended": ended, "failures": dict(failures), "ops": 2 * int(CHURN_RATE * CHURN_SECONDS),
             "dispatch_lag_p99": pct(late, 0.99) if late else 0.0,
             "writer_cpu": sum(part["cpu"] for part in parts) / (ended - start),
             "creates_per_s": len(created) / (max(t for _, t in created.values()) - start) if created else 0.0,
             "deletes_per_s": len(deleted) / (max(deleted.values()) - start - CHURN_LIFETIME) if deleted else 0.0}
    return created, deleted, stats


def churn_latencies(prom, created: dict[str, tuple[str, float]], deleted: dict[str, float], measured: set[str],
                    window: float) -> dict:
    """Per churn pod on a measured node: API write to first sample in Prometheus (creation) and to the first export
    of its node without it (deletion). Sample timestamps are the agent's collection times; remote write is
    synchronous, so a sample is queryable once the agent's push has returned."""
    pods = prom_samples(prom, 'pod_or_vm_cpu_requests{k8s_pod_name=~"churn-.*"}', window)
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for labels, values in pods.items():
        name = dict(labels)["k8s_pod_name"]
        first[name] = min(first.get(name, math.inf), values[0][0])
        last[name] = max(last.get(name, -math.inf), values[-1][0])
    exports: dict[str, list[float]] = defaultdict(list)
    for labels, values in prom_samples(prom, "node_requests_agent_synced", window).items():
        exports[dict(labels)["k8s_node_name"]].extend(t for t, _ in values)
    for times in exports.values():
        times.sort()
    create_lat, delete_lat, never, after_delete = [], [], 0, 0
    for name, (node, at) in created.items():
        if node not in measured:
            continue
        if name not in first:
            never += 1
            continue
        create_lat.append(first[name] - at)
        if name in deleted:
            gone = next((t for t in exports[node] if t > last[name]), None)
            if gone is not None:
                delete_lat.append(gone - deleted[name])
            if last[name] > deleted[name] + 1.0:
                after_delete += 1
    return {"create": create_lat, "delete": delete_lat, "never": never, "after_delete": after_delete}
