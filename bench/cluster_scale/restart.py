"""An API server restart with every client connected, timed until each client saw a pod created right after."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from bench.cluster_scale.apiserver_metrics import Sampler
from bench.cluster_scale.control_plane import Api
from bench.cluster_scale.sizes import DOWN_SECONDS
from testkit.factory import for_create
from testkit.trust import TrustCluster


def restart_storm(cluster: TrustCluster, api: Api, namespace: str, nodes: list[str], prefix: str,
                  seen: Callable[[dict[str, str]], dict[str, float]]) -> dict:
    """Restart the API server, create one marker pod per node as soon as it is back, and time the return."""
    with Sampler(cluster) as sampler:
        time.sleep(3)
        stopped = time.time()
        back_mono = cluster.restart_apiserver(down_seconds=DOWN_SECONDS)
        back = time.time() - (time.monotonic() - back_mono)
        markers = {}
        for node in nodes:
            name = f"marker-{prefix}-{node}"
            body = json.dumps(for_create({"metadata": {"name": name}, "spec": {"containers": [
                {"name": "m", "image": "registry.invalid/m:1", "resources": {"requests": {"cpu": "10m"}}}]}},
                nodeName=node)).encode()
            status, text = api.request("POST", f"/api/v1/namespaces/{namespace}/pods", body)
            if status != 201:
                raise RuntimeError(f"marker on {node}: HTTP {status}: {text[:300]!r}")
            markers[node] = f"{namespace}/{name}"
        markers_at = time.time()
        resynced = seen(markers)
        time.sleep(10)
    # From the SIGTERM: the restarted API server serves requests well before /readyz says ok, and clients
    # reconnect then (a pair across the restart is skipped: the new process's counters start at zero).
    agent_rates = sampler.rates(lambda s: s.agents, since=stopped)
    all_rates = sampler.rates(lambda s: s.total, since=stopped)
    list_rates = sampler.rates(lambda s: s.lists, since=stopped)
    fresh = [s for s in sampler.samples if s.at >= stopped]
    return {"stopped": stopped, "back": back, "markers_at": markers_at, "resynced": resynced,
            "peak_agents": max((r for _, r in agent_rates), default=0.0),
            "peak_all": max((r for _, r in all_rates), default=0.0),
            "peak_lists": max((r for _, r in list_rates), default=0.0),
            "agent_requests": fresh[-1].agents if fresh else float("nan"),
            "per_second": [(round(t - back, 1), round(r, 1)) for t, r in agent_rates]}
