"""kube-apiserver's own counts, scraped from its /metrics: once, or every second in a thread."""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from bench.cluster_scale.sizes import AGENT_FLOW
from testkit.trust import TrustCluster


@dataclass
class Snapshot:
    """One scrape of kube-apiserver's /metrics, reduced to what the benchmark reads."""

    at: float  # wall clock
    # (verb, resource) -> apiserver_request_total
    requests: defaultdict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    agents: float = 0.0  # apiserver_flowcontrol_dispatched_requests_total of the agents' flow schema
    # resource -> open WATCH requests (apiserver_longrunning_requests)
    watches: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    list_buckets: dict[float, float] = field(default_factory=dict)  # le -> LIST of pods and nodes, duration histogram

    @property
    def lists(self) -> float:
        return self.requests[("LIST", "pods")] + self.requests[("LIST", "nodes")]

    @property
    def total(self) -> float:
        return sum(self.requests.values())


_WANTED = ("apiserver_request_total{", "apiserver_flowcontrol_dispatched_requests_total{",
           "apiserver_longrunning_requests{", "apiserver_request_duration_seconds_bucket{")


def scrape(cluster: TrustCluster) -> Snapshot:
    """The metrics text filtered by line before parsing: the full text of a 1,000-node API server is megabytes."""
    text = cluster.apiserver_metrics_text()
    at = time.time()
    lines = [line for line in text.splitlines() if line.startswith(_WANTED) and (
        not line.startswith(_WANTED[3]) or _lists_pods_or_nodes(line))]
    snap = Snapshot(at)
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for s in family.samples:
            labels = s.labels
            if s.name == "apiserver_request_total":
                snap.requests[(labels.get("verb", ""), labels.get("resource", ""))] += s.value
            elif (s.name == "apiserver_flowcontrol_dispatched_requests_total"
                  and labels.get("flow_schema") == AGENT_FLOW):
                snap.agents += s.value
            elif s.name == "apiserver_longrunning_requests" and labels.get("verb") == "WATCH":
                snap.watches[labels.get("resource", "")] += s.value
            elif s.name == "apiserver_request_duration_seconds_bucket":
                le = float(labels["le"])
                snap.list_buckets[le] = snap.list_buckets.get(le, 0.0) + s.value
    return snap


def _lists_pods_or_nodes(line: str) -> bool:
    return 'verb="LIST"' in line and ('resource="pods"' in line or 'resource="nodes"' in line)


def histogram_quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float:
    """The q-quantile of the observations between two scrapes of a cumulative histogram, interpolated within the
    bucket as Prometheus's histogram_quantile does."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return float("nan")
    rank = q * counts[-1]
    for i, (bound, count) in enumerate(zip(bounds, counts, strict=True)):
        if count >= rank:
            if math.isinf(bound):
                return bounds[i - 1] if i else float("nan")
            lower, below = (bounds[i - 1], counts[i - 1]) if i else (0.0, 0.0)
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
    return float("nan")


class Sampler:
    """Scrapes the API server every ``period`` seconds in a thread; a failed scrape (server down) is skipped."""

    def __init__(self, cluster: TrustCluster, period: float = 1.0) -> None:
        self.cluster, self.period = cluster, period
        self.samples: list[Snapshot] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="apiserver-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            with contextlib.suppress(OSError, ValueError):  # the API server down or restarting: no sample
                self.samples.append(scrape(self.cluster))
            self._stop.wait(max(0.0, self.period - (time.monotonic() - started)))

    def rates(self, value: Callable[[Snapshot], float], since: float = 0.0) -> list[tuple[float, float]]:
        """(time, per-second rate of ``value``) between consecutive samples after ``since``, within one process
        (a counter that went down is a new API server: that pair is skipped)."""
        samples = [s for s in self.samples if s.at >= since]
        out = []
        for a, b in itertools.pairwise(samples):
            if value(b) >= value(a) and b.at > a.at:
                out.append((b.at, (value(b) - value(a)) / (b.at - a.at)))
        return out
