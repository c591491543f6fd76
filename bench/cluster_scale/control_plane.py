"""The control plane the scale benchmark runs, and the benchmark's own way of talking to it."""

from __future__ import annotations

import http.client
import re
import ssl
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.cluster_scale.sizes import CLIENT_QPS, NODE_GRACE_SECONDS
from bench.common import required
from testkit.trust import TrustCluster


def scale_cluster(workdir: Path, apiserver_flags: Sequence[str] = ()) -> TrustCluster:
    """The trust cluster with the scheduler's and controller-manager's client rate limits raised (default 50 and 20
    QPS): population and churn are then limited by the machine. Node heartbeats at the kubelet's defaults (Lease
    of 40 s renewed every 10 s, grace period 50 s) rather than the test suite's faster ones: at 1,000 nodes the
    suite's 5 s renewals were 200 writes per second of background under the agents' share. The agents' path is
    untouched."""
    rate_limits = [f"--kube-api-qps={CLIENT_QPS}", f"--kube-api-burst={2 * CLIENT_QPS}"]
    return TrustCluster(workdir, apiserver_flags=apiserver_flags, scheduler_flags=rate_limits,
                        controller_manager_flags=[*rate_limits, f"--node-monitor-grace-period={NODE_GRACE_SECONDS}s"])


@dataclass(frozen=True, kw_only=True)
class ApiAddress:
    """Where and as whom the benchmark writes: plain data, so a churn worker process can be handed it."""

    port: int
    ca: str
    cert: str
    key: str

    @classmethod
    def admin(cls, cluster: TrustCluster) -> ApiAddress:
        pki = required(cluster.pki, "the cluster's PKI")
        return cls(port=cluster.ports["apiserver"], ca=str(pki.crt("ca")), cert=str(pki.crt("admin")),
                   key=str(pki.key("admin")))


class Api:
    """The benchmark's own writes: keep-alive HTTPS as the admin, one connection per thread (a TLS handshake per
    request would cost more CPU than the request)."""

    def __init__(self, address: ApiAddress) -> None:
        context = ssl.create_default_context(cafile=address.ca)
        context.load_cert_chain(address.cert, address.key)
        self._context, self._port, self._local = context, address.port, threading.local()

    def request(self, method: str, path: str, body: bytes | None = None, accept: str = "application/json",
                attempts: int = 5) -> tuple[int, bytes]:
        for attempt in range(attempts):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = http.client.HTTPSConnection("127.0.0.1", self._port, context=self._context,
                                                                     timeout=120)
            try:
                conn.request(method, path, body=body, headers={"Content-Type": "application/json", "Accept": accept})
                response = conn.getresponse()
                return response.status, response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt == attempts - 1:
                    raise
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")


def apiserver_pid(cluster: TrustCluster) -> int:
    return required(cluster.component("kube-apiserver").proc, "kube-apiserver's process").pid


def live_heap_mib(api: Api) -> float:
    """kube-apiserver's live heap: its heap profile with ``gc=1`` runs a collection first and reports HeapAlloc
    after it (go_memstats_heap_inuse_bytes moves by hundreds of MiB with the GC cycle at this size)."""
    status, body = api.request("GET", "/debug/pprof/heap?gc=1&debug=1", accept="text/plain")
    found = re.search(rb"^# HeapAlloc = (\d+)$", body, re.M) if status == 200 else None
    if found is None:
        raise RuntimeError(f"kube-apiserver heap profile: HTTP {status}: {body[:200]!r}")
    return int(found.group(1)) / 2**20


def scheduler_metric(cluster: TrustCluster, name: str, **labels: str) -> float:
    """A sum over one kube-scheduler metric's samples matching ``labels`` (its /metrics is readable without auth)."""
    context = ssl.create_default_context(cafile=str(required(cluster.pki, "the cluster's PKI").crt("ca")))
    req = urllib.request.Request(cluster.scheduler_url + "/metrics")
    with urllib.request.urlopen(req, timeout=30, context=context) as response:
        text = response.read().decode()
    lines = "\n".join(line for line in text.splitlines() if line.startswith((name + "{", name + " ")))
    return sum(s.value for f in text_string_to_metric_families(lines + "\n") for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))
