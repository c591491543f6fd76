"""The scale benchmark's table, one group of rows per phase, and the 5,000-node arithmetic from its slopes."""

from __future__ import annotations

import math
import statistics

from bench.cluster_scale.results import AgentRestart, AnchorRun, Churned, Results
from bench.cluster_scale.sizes import (
    AGENT_FLOW,
    AGENTS,
    CHURN_KWOK,
    CHURN_RATE,
    CHURN_WORKERS,
    EXPORT_INTERVAL,
    NODES,
    PODS_PER_NODE,
)
from bench.cluster_scale.stats import pct, spread
from bench.cluster_scale.windows import Share
from bench.common import machine


def row(measure: str, value: str) -> None:
    print(f"| {measure} | {value} |", flush=True)


def report(results: Results) -> None:
    print(f"\n### Cluster scale by simulation: {NODES} KWOK nodes x {PODS_PER_NODE} pods, {AGENTS} agents, "
          f"kube-apiserver {results.release}\n")
    print("| measure | value |\n|---|---:|")
    api_cpu, api_heap = apiserver_shares(results)
    population_rows(results)
    cold_start_rows(results)
    steady_rows(results)
    footprint_rows(results, api_cpu, api_heap)
    restart_rows(results.restart)
    churn_rows(results.churn)
    if results.anchor is not None:
        anchor_rows(results.anchor)
    projection(results, api_cpu, api_heap)


def apiserver_shares(results: Results) -> tuple[Share, Share]:
    """The agents' share of kube-apiserver's CPU (cores) and live heap (MiB)."""
    before, steady, after = results.before.window, results.steady.window, results.after
    api_cpu = Share(before=before.cpu["apiserver"] / before.seconds, steady=steady.cpu["apiserver"] / steady.seconds,
                    after=after.cpu["apiserver"] / after.seconds, agents=AGENTS)
    api_heap = Share(before=before.apiserver_live_heap_mib, steady=steady.apiserver_live_heap_mib,
                     after=after.apiserver_live_heap_mib, agents=AGENTS)
    return api_cpu, api_heap


def population_rows(results: Results) -> None:
    population = results.population
    row("machine", f"{machine()}; {results.steady.load} during the steady window")
    row("KWOK nodes Ready", f"{NODES} in {results.nodes_ready:.0f} s")
    row("workload pods created (unbound, POST from 16 threads)",
        f"{population.pods} in {population.created_seconds:.0f} s "
        f"({population.pods / population.created_seconds:.0f}/s)")
    row("all pods (DaemonSet's included) bound by kube-scheduler / Running by KWOK",
        f"{population.scheduled_seconds:.0f} s ({NODES * PODS_PER_NODE / population.scheduled_seconds:.0f} pods/s) / "
        f"{population.running_seconds:.0f} s after the first create")
    row("settling after the population: kube-apiserver CPU per 30 s window",
        ", ".join(f"{r:.2f}" for r in results.before.settled) + " cores")


def cold_start_rows(results: Results) -> None:
    for label, cold in (("cold start", results.cold1),
                        ("second cold start (after the no-agent window)", results.cold2)):
        row(f"{label}: all agents started at once, until every one had listed its pods and was ready",
            f"{cold.seconds:.1f} s ({spread(cold.synced.values(), cold.started)})")
        row(f"{label}: LISTs of pods and nodes (all clients) / peak LIST rate",
            f"{cold.lists:.0f} / {cold.peak_lists:.0f} per s")
        row(f"{label}: LIST latency of pods and nodes, p50 / p99 (apiserver_request_duration_seconds)",
            f"{cold.list_p50 * 1000:.0f} / {cold.list_p99 * 1000:.0f} ms")


def steady_rows(results: Results) -> None:
    n, steady, window = AGENTS, results.steady, results.steady.window
    before, after = results.before.window, results.after
    row("steady window", f"{window.seconds:.0f} s")
    row(f"steady: agents' requests (APF flow schema `{AGENT_FLOW}`)",
        f"{window.agents:.0f} = {window.agents / n / window.seconds * 60:.2f} per agent per minute")
    row("steady: agents' own count: watch starts / LISTs",
        f"{steady.watch_starts} / {steady.relists} "
        f"({steady.watch_starts / n / window.seconds * 60:.2f} watch starts per agent per minute)")
    base_seconds = before.seconds + after.seconds
    for verb in ("LIST", "WATCH", "GET"):
        for resource in ("pods", "nodes"):
            key = (verb, resource)
            value = window.requests[key] - (before.requests[key] + after.requests[key]) * window.seconds / base_seconds
            row(f"steady: apiserver_request_total {verb} {resource}, net of the no-agent windows",
                f"{value:+.0f} ({value / n / window.seconds * 60:+.3f} per agent per minute)")
    row("steady: WATCH requests open on pods / nodes (all clients; agents' share: 2 per agent)",
        f"{steady.watches_open['pods']:.0f} / {steady.watches_open['nodes']:.0f}")


def footprint_rows(results: Results, api_cpu: Share, api_heap: Share) -> None:
    steady, before, after = results.steady, results.before, results.after
    row("kube-apiserver CPU without (before) / with / without (after) the agents",
        f"{api_cpu.before:.3f} / {api_cpu.steady:.3f} / {api_cpu.after:.3f} cores: "
        f"{api_cpu.describe('millicores', 1000)}")
    row("kube-apiserver live heap (after a forced collection, median of 3 at each window's end), "
        "without (before) / with / without (after) the agents",
        f"{api_heap.before:.0f} / {api_heap.steady:.0f} / {api_heap.after:.0f} MiB: {api_heap.describe('MiB')}")
    row("kube-apiserver RSS, median over each window, without (before) / with / without (after) the agents",
        f"{before.window.apiserver_rss_mib:.0f} / {steady.window.apiserver_rss_mib:.0f} / "
        f"{after.apiserver_rss_mib:.0f} MiB "
        f"(after the population {before.apiserver_rss:.0f}; after the steady window {steady.apiserver_rss:.0f})")
    agent_rss, agent_cpu = steady.agent_rss, steady.agent_cpu
    row("agent RSS (min / median / max)",
        f"{min(agent_rss):.1f} / {statistics.median(agent_rss):.1f} / {max(agent_rss):.1f} MiB")
    row("agent CPU (median / max)", f"{statistics.median(agent_cpu):.2f} / {max(agent_cpu):.2f} % of a core")
    col_cpu = _collector_cores(results)
    row("series in Prometheus (agents' job) / of them per pod / Prometheus head series",
        f"{steady.all_series} / {steady.pod_series} / {steady.prom_head:.0f}")
    row("Collector CPU / RSS (idle before the agents; with them)",
        f"{col_cpu * 1000:.1f} millicores / {before.collector_rss:.0f}; {steady.collector_rss:.0f} MiB")
    row("Collector per 1,000 series", f"{col_cpu * 1000 / steady.all_series * 1000:.2f} millicores, "
        f"{(steady.collector_rss - before.collector_rss) / steady.all_series * 1000:.2f} MiB above idle")


def restart_rows(restart: AgentRestart) -> None:
    n, storm = AGENTS, restart.storm
    row("restart: SIGTERM to ready again", f"{storm['back'] - storm['stopped']:.1f} s")
    row("restart: peak requests/s on the new API server, all clients (agents' flow schema) / LISTs",
        f"{storm['peak_all']:.0f} ({storm['peak_agents']:.0f}) / {storm['peak_lists']:.0f}")
    row("restart: agents' requests on the new API server until 10 s after the last resync",
        f"{storm['agent_requests']:.0f} ({storm['agent_requests'] / n:.1f} per agent)")
    row("restart: agents' failed requests and broken streams, by their own count (while down included)",
        f"{restart.failed} ({restart.failed / n:.1f} per agent)")
    row("restart: agents' relists after the API server was back (from their logs)",
        f"{len(restart.relisted)} of {n}: {spread(restart.relisted.values(), storm['back'])}")
    row("restart: agents' requests per second on the new API server (s after ready: rate)",
        ", ".join(f"{t:g}: {r:g}" for t, r in storm["per_second"][:40]))
    row("restart: API server ready until every agent reported a pod created right after",
        f"{restart.resync_all:.1f} s ({spread(storm['resynced'].values(), storm['back'])})")
    row("restart: that pod in Prometheus, after the API server was ready (per agent)",
        spread(restart.marker_first.values(), storm["back"]))
    ages = restart.ages
    row("restart: exported last_event_age_seconds during the outage (per agent max: min / median)",
        f"{min(ages, default=math.nan):.0f} / {statistics.median(ages) if ages else math.nan:.0f} s "
        f"(outage {storm['back'] - storm['stopped']:.0f} s)")


def churn_rows(churned: Churned) -> None:
    stats, lat = churned.stats, churned.latencies
    row("churn: creations / deletions per second achieved (target)",
        f"{stats['creates_per_s']:.1f} / {stats['deletes_per_s']:.1f} ({CHURN_RATE:.0f}); "
        f"failures {stats['failures'] or 'none'}; dispatch lag p99 {stats['dispatch_lag_p99']:.2f} s; "
        f"{CHURN_WORKERS} writer processes used {stats['writer_cpu']:.2f} cores")
    row("churn: kube-apiserver CPU during churn", f"{churned.apiserver_cpu:.2f} cores (settled before: "
        + ", ".join(f"{r:.2f}" for r in churned.settled) + " cores)")
    row("churn: CPU by process during churn (cores)", ", ".join(f"{k} {v:.2f}" for v, k in churned.cpu_by_process[:8]))
    row("churn: KWOK sets the churn pods Running", "yes (one status write each)" if CHURN_KWOK
        else "no (each pod is one create and one delete)")
    row(f"churn: API write to value in Prometheus, creations on measured nodes ({len(lat['create'])}), p50 / p99 / max",
        f"{pct(lat['create'], .5):.1f} / {pct(lat['create'], .99):.1f} / {max(lat['create'], default=math.nan):.1f} s "
        f"(export interval {EXPORT_INTERVAL:.0f} s; never seen: {lat['never']})")
    row(f"churn: API write to absence in Prometheus, deletions ({len(lat['delete'])}), p50 / p99 / max",
        f"{pct(lat['delete'], .5):.1f} / {pct(lat['delete'], .99):.1f} / {max(lat['delete'], default=math.nan):.1f} s "
        f"(exported after the deletion: {lat['after_delete']})")


def anchor_rows(anchor: AnchorRun) -> None:
    n, storm = AGENTS, anchor.storm
    row("anchor (client-go informers, same nodes and tokens): all synced after start", f"{anchor.cold:.1f} s")
    row("anchor restart: SIGTERM to ready again", f"{storm['back'] - storm['stopped']:.1f} s")
    row("anchor restart: peak requests/s (flow schema) / LISTs",
        f"{storm['peak_agents']:.0f} / {storm['peak_lists']:.0f}")
    row("anchor restart: requests on the new API server until 10 s after the last resync",
        f"{storm['agent_requests']:.0f} ({storm['agent_requests'] / n:.1f} per node)")
    row("anchor restart: first successful pod LIST or streaming list per node",
        f"{len(anchor.first_ok)} of {n}: {spread(anchor.first_ok.values(), storm['back'])}")
    row("anchor restart: its calls after the stop, by kind",
        ", ".join(f"{k} {v}" for k, v in sorted(anchor.reconnect_kinds.items())))
    resync_anchor = (max(storm["resynced"].values()) - storm["back"]) if storm["resynced"] else math.nan
    row("anchor restart: ready until every informer saw its marker pod",
        f"{resync_anchor:.1f} s ({len(storm['resynced'])} of {n}; "
        f"{spread(storm['resynced'].values(), storm['back'])})")
    row("anchor restart: requests per second (s after ready: rate)",
        ", ".join(f"{t:g}: {r:g}" for t, r in storm["per_second"][:40]))
    row("anchor process RSS (all its informers)", f"{anchor.rss:.0f} MiB")


def projection(results: Results, api_cpu: Share, api_heap: Share) -> None:
    """5,000 nodes x 110 pods from the measured slopes."""
    n, steady, window = AGENTS, results.steady, results.steady.window
    big_nodes, big_pods = 5000, 110
    per_node_series = (steady.all_series - steady.pod_series) / n
    per_pod_series = steady.pod_series / sum(results.expected.values())
    big_series = big_nodes * (per_node_series + big_pods * per_pod_series)
    col_cores = big_series / 1000 * (_collector_cores(results) / steady.all_series * 1000)
    col_mib = big_series / 1000 * ((steady.collector_rss - results.before.collector_rss) / steady.all_series * 1000)
    api_big = (f"CPU {api_cpu.scaled(big_nodes, 'cores')}, live heap {api_heap.scaled(big_nodes / 1024, 'GiB')} "
               f"(per agent: {api_cpu.describe('millicores', 1000)}; {api_heap.describe('MiB')})")
    print(f"\n5,000 nodes x 110 pods, from the slopes above: series {per_node_series:.1f} per node + "
          f"{per_pod_series:.2f} per pod -> {big_series:,.0f}; API server {api_big}; steady requests "
          f"{window.agents / n / window.seconds * big_nodes:.1f}/s; Collector {col_cores:.2f} cores, "
          f"{col_mib:,.0f} MiB above idle -> {max(1, math.ceil(col_cores / 1.0)):d} replica(s) of 1 core")


def _collector_cores(results: Results) -> float:
    """The Collector's CPU over the steady window, in cores."""
    window = results.steady.window
    return window.cpu["collector"] / window.seconds
