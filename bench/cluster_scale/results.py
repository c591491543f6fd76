"""What each phase of the run measured: the report's input."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from bench.cluster_scale.population import Population
from bench.cluster_scale.windows import ColdStart, Window


@dataclass(frozen=True, kw_only=True)
class Before:
    """The control plane after the population, before any agent ran."""

    apiserver_rss: float  # MiB
    collector_rss: float  # MiB, idle
    settled: list[float]  # kube-apiserver cores per 30 s window while it settled
    window: Window  # the no-agent window before


@dataclass(frozen=True, kw_only=True)
class Steady:
    """The steady window with every agent running, and what was read right after it."""

    window: Window
    watches_open: dict[str, float]  # resource -> WATCH requests open at its end (all clients)
    apiserver_rss: float  # MiB
    collector_rss: float  # MiB
    agent_rss: list[float]  # MiB per agent
    agent_cpu: list[float]  # % of a core per agent
    all_series: int  # in Prometheus, the agents' job
    pod_series: int
    prom_head: float  # Prometheus head series
    load: str  # the machine's load and busiest processes meanwhile
    watch_starts: int  # by the agents' own count
    relists: int


@dataclass(frozen=True, kw_only=True)
class AgentRestart:
    """The API server restarted with every agent connected."""

    storm: dict  # restart.restart_storm's answer
    failed: int  # the agents' failed requests and broken streams, by their own count
    relisted: dict[str, float]  # node -> wall clock of its agent's first LIST after the stop (from its log)
    resync_all: float  # seconds from ready until every agent reported its marker pod
    ages: list[float]  # per agent: the largest last_event_age_seconds exported during the outage
    marker_first: dict[str, float]  # node -> first sample of its marker pod in Prometheus


@dataclass(frozen=True, kw_only=True)
class Churned:
    """Pods created and deleted at CHURN_RATE, and how fast Prometheus showed each change."""

    settled: list[float]  # kube-apiserver cores per 30 s window before the churn
    apiserver_cpu: float  # cores during the churn
    cpu_by_process: list[tuple[float, str]]  # (cores, process name), busiest first
    stats: dict  # churn.churn's answer
    latencies: dict  # churn.churn_latencies' answer


@dataclass(frozen=True, kw_only=True)
class AnchorRun:
    """client-go's informers (bench/reflector_anchor) in the agents' place, through the same restart."""

    cold: float  # seconds from start until every informer synced
    storm: dict  # restart.restart_storm's answer
    reconnect_kinds: Counter  # its calls after the stop, by kind
    first_ok: dict[str, float]  # node -> first successful pod LIST or streaming list after the stop
    rss: float  # MiB, all its informers


@dataclass(frozen=True, kw_only=True)
class Results:
    release: str  # kube-apiserver's
    nodes_ready: float  # seconds
    population: Population
    expected: dict[str, int]  # measured node -> pods on it
    before: Before
    cold1: ColdStart
    steady: Steady
    after: Window  # the no-agent window after
    cold2: ColdStart
    restart: AgentRestart
    churn: Churned
    anchor: AnchorRun | None  # None when NRA_SCALE_ANCHOR=0
