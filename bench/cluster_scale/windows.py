"""Measuring windows: the API server settling, a window's counts, a cold start of every agent, and the agents'
share of a quantity between windows without them."""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from dataclasses import dataclass

from bench.cluster_scale.agents import agent_pod_count, wait_each
from bench.cluster_scale.apiserver_metrics import Sampler, Snapshot, histogram_quantile, scrape
from bench.cluster_scale.control_plane import Api, apiserver_pid, live_heap_mib
from bench.cluster_scale.process_usage import cpu_seconds, rss_mib
from bench.cluster_scale.progress import log
from bench.cluster_scale.sizes import SETTLE_LIMIT
from testkit.kubelet import AgentContainer
from testkit.ports import free_ports
from testkit.trust import TrustCluster


@dataclass
class Window:
    """Counts over a window: API server requests by verb and resource, CPU seconds of processes."""

    seconds: float
    requests: Counter
    agents: float
    cpu: dict[str, float]
    apiserver_live_heap_mib: float
    apiserver_rss_mib: float


def measure_window(cluster: TrustCluster, api: Api, seconds: float,
                   pids: dict[str, int]) -> tuple[Window, Snapshot, Snapshot]:
    """Counts over ``seconds``; the API server's RSS sampled every 10 s (median), its live heap read three times
    right after the window (the forced collections stay out of the CPU counted)."""
    before = scrape(cluster)
    cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
    rss = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(min(10.0, max(0.0, end - time.monotonic())))
        rss.append(rss_mib(apiserver_pid(cluster)))
    after = scrape(cluster)
    cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
    heaps = []
    for _ in range(3):
        heaps.append(live_heap_mib(api))
        time.sleep(2)
    elapsed = after.at - before.at
    requests = Counter({k: after.requests[k] - before.requests[k] for k in set(after.requests) | set(before.requests)})
    window = Window(elapsed, requests, after.agents - before.agents, cpu, statistics.median(heaps),
                    statistics.median(rss) if rss else math.nan)
    return window, before, after


def settle(cluster: TrustCluster, window: float = 30.0) -> list[float]:
    """Wait until the API server's CPU is steady: two consecutive windows within 0.05 cores or 10 % of each other
    (at most SETTLE_LIMIT). The population leaves work behind (KWOK's last status writes, the controllers'
    resyncs), and a baseline taken in it was busier than the window with the agents, leaving their share unresolved."""
    pid, rates = apiserver_pid(cluster), []
    deadline = time.monotonic() + SETTLE_LIMIT
    while time.monotonic() < deadline:
        before = cpu_seconds(pid)
        time.sleep(window)
        rates.append((cpu_seconds(pid) - before) / window)
        log(f"settling: kube-apiserver {rates[-1]:.3f} cores over {window:.0f} s")
        if len(rates) >= 2 and abs(rates[-2] - rates[-1]) <= max(0.05, 0.1 * rates[-2]):
            break
    return rates


@dataclass(frozen=True, kw_only=True)
class ColdStart:
    """Every agent started at once, until each had listed its node's pods: the API server's LISTs meanwhile."""

    started: float  # wall clock
    synced: dict[str, float]  # node -> wall clock its agent reported every pod
    lists: float
    peak_lists: float
    list_p50: float
    list_p99: float

    @property
    def seconds(self) -> float:
        return max(self.synced.values()) - self.started


def cold_start(cluster: TrustCluster, agents: list[AgentContainer], expected: dict[str, int]) -> ColdStart:
    with Sampler(cluster) as sampler:
        time.sleep(2)
        started = time.time()
        before = sampler.samples[-1]
        for agent, port in zip(agents, free_ports(len(agents)), strict=True):
            agent.start(port)
        synced = wait_each(agents, lambda a: agent_pod_count(a) == expected[a.node], 600)
        time.sleep(3)
    after = sampler.samples[-1]
    return ColdStart(started=started, synced=synced, lists=after.lists - before.lists,
                     peak_lists=max((r for _, r in sampler.rates(lambda s: s.lists, since=started)), default=0.0),
                     list_p50=histogram_quantile(0.50, before.list_buckets, after.list_buckets),
                     list_p99=histogram_quantile(0.99, before.list_buckets, after.list_buckets))


@dataclass(frozen=True, kw_only=True)
class Share:
    """The agents' share of an API-server quantity: the window with them minus the mean of a window before and one
    after without them; half the gap between those two is the resolution, so drift is not counted as the agents'."""

    before: float
    after: float
    steady: float
    agents: int

    @property
    def per_agent(self) -> float:
        return (self.steady - (self.before + self.after) / 2) / self.agents

    @property
    def resolution(self) -> float:
        return abs(self.before - self.after) / 2 / self.agents

    @property
    def resolved(self) -> bool:
        return self.per_agent - self.resolution > 0

    @property
    def bound(self) -> float:
        """At most this much per agent: the estimate, taken as zero when it came out negative (the window with the
        agents quieter than the mean without them is noise, not a saving), plus the resolution."""
        return max(0.0, self.per_agent) + self.resolution

    def scaled(self, factor: float, unit: str) -> str:
        """The agents' share times ``factor`` (5,000 nodes), as an estimate with its resolution or as a bound."""
        if self.resolved:
            return f"{self.per_agent * factor:.2f} ± {self.resolution * factor:.2f} {unit}"
        return f"at most {self.bound * factor:.2f} {unit}"

    def describe(self, unit: str, scale: float = 1.0) -> str:
        if self.resolved:
            return f"{self.per_agent * scale:+.2f} ± {self.resolution * scale:.2f} {unit} per agent"
        return (f"below this run's resolution ({self.per_agent * scale:+.2f} ± {self.resolution * scale:.2f}): "
                f"at most {self.bound * scale:.2f} {unit} per agent")
