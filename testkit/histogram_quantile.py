"""The agent's histograms downstream: a Collector in its default configuration, and histogram_quantile checked
against the agent's own buckets.

"Default configuration" is what a user of the project's Collector build writes who sets nothing but the
pipeline: the otlp receiver and the ``prometheusremotewrite`` exporter with only its endpoint, so the
exporter's defaults apply (unit and type suffixes, ``target_info``, scope labels, its sending queue). Two
additions only serve the test fixture and touch no metric: the health_check extension (``Collector`` waits for
it) and no telemetry listener (its default port is fixed).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import yaml

from testkit.agent_process import AgentProcess
from testkit.collector import Prometheus
from testkit.waiting import wait_until

__all__ = ["QUEUE_DURATION", "default_collector_config", "agent_buckets", "quantile_matches_agent"]

# The histogram every agent fills from its first event on: what the shipped rules and dashboard plot.
QUEUE_DURATION = "node_requests_agent_workqueue_queue_duration_seconds"


def default_collector_config(directory: Path, remote_write_url: str) -> Path:
    """otlp receiver -> prometheusremotewrite (endpoint only), on the ports ``Collector`` puts in the environment."""
    config = {
        "extensions": {"health_check": {"endpoint": "${env:HEALTH_CHECK_ENDPOINT}"}},
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": "${env:OTLP_HTTP_ENDPOINT}"}}}},
        "exporters": {"prometheusremotewrite": {"endpoint": remote_write_url}},
        "service": {"extensions": ["health_check"], "telemetry": {"metrics": {"level": "none"}},
                    "pipelines": {"metrics": {"receivers": ["otlp"], "exporters": ["prometheusremotewrite"]}}},
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "collector-default.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def agent_buckets(agent: AgentProcess, name: str = QUEUE_DURATION) -> dict[float, float]:
    """The agent's own cumulative buckets of ``name`` from its /metrics: upper bound -> count."""
    return {float(dict(labels)["le"]): value for (sample, labels), value in agent.samples().items()
            if sample == name + "_bucket"}


def _bucket_of_quantile(buckets: dict[float, float], q: float) -> tuple[float, float]:
    """The (lower, upper] bounds of the bucket that holds the q-quantile's rank (the +Inf bucket reads as its
    lower bound, as histogram_quantile returns it)."""
    bounds = sorted(buckets)
    rank = q * buckets[math.inf]
    upper = next(b for b in bounds if buckets[b] >= rank)
    i = bounds.index(upper)
    lower = bounds[i - 1] if i else 0.0
    return (lower, lower) if upper == math.inf else (lower, upper)


def quantile_matches_agent(prom: Prometheus, agent: AgentProcess, selector: str, q: float = 0.9,
                           name: str = QUEUE_DURATION, timeout: float = 30.0) -> float:
    """``histogram_quantile(q, name_bucket{selector})`` once Prometheus holds buckets the agent's /metrics showed.

    Fails unless the series are there under ``name_bucket`` with an ``le`` each, equal to one state of the agent's
    own buckets (polled alongside: what arrives is an export or two old), and the value is finite and lies in the
    bucket where those counts put the q-quantile. Also the rate form that the shipped rules use
    must give a finite value. Returns the instant value.
    """
    seen: list[dict[float, float]] = []  # the agent's buckets as polled: Prometheus lags by an export or two

    def at(promql: str, when: str) -> list[dict]:
        return prom.api("query", {"query": promql, "time": when})["result"]

    def agreed() -> tuple[dict[float, float], float] | None:
        seen.append(agent_buckets(agent, name))
        when = f"{time.time():.3f}"  # both queries see the same samples
        theirs = {float(r["metric"]["le"]): float(r["value"][1]) for r in at(f"{name}_bucket{{{selector}}}", when)}
        if not theirs or theirs not in seen:
            return None
        rows = at(f"histogram_quantile({q}, sum by (le) ({name}_bucket{{{selector}}}))", when)
        return (theirs, float(rows[0]["value"][1])) if rows else None

    buckets, value = wait_until(agreed, timeout=timeout, interval=0.2,
                                message=f"{name}_bucket{{{selector}}} in Prometheus equal to the agent's own buckets")
    lower, upper = _bucket_of_quantile(buckets, q)
    assert math.isfinite(value) and lower <= value <= upper, (value, lower, upper, buckets)
    rated = wait_until(lambda: [r for r in prom.query(
        f"histogram_quantile({q}, sum by (le) (rate({name}_bucket{{{selector}}}[1m])))")
        if math.isfinite(float(r["value"][1]))], timeout=timeout, interval=0.5, message="a finite rate quantile")
    print(f"histogram_quantile({q}, {name}_bucket{{{selector}}}) = {value!r} (agent's bucket ({lower}, {upper}], "
          f"{buckets[math.inf]:g} observations); over rate[1m] = {rated[0]['value'][1]}")
    return value
