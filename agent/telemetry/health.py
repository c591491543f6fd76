"""Liveness and readiness, decided from the stats snapshot (pure functions).

Liveness asks "would a restart help?": only a wedged loop says yes. A loop is
stuck when it has not turned for longer than it can legitimately be quiet:
the source may sit in one watch read for the read timeout plus the longest
backoff; the exporter waits an interval plus an export's timeout; the handler
wakes every 5 s when idle and no event should take anywhere near its limit. A source
waiting on a dead or unreachable API server keeps turning (it retries with
backoff), so it is alive: restarting every agent of the cluster cannot bring
the API server back. That condition is readiness's ("synced and current").
"""

from __future__ import annotations

import msgspec

from agent.pipeline.interfaces import EXPORT_LOOP, HANDLER_LOOP, SOURCE_LOOP
from agent.telemetry.stats import StatsSnapshot

__all__ = ["HealthLimits", "ProbeResult", "liveness", "readiness"]


# The longest a source waits for one read, plus the longest backoff, with room to spare.
_SOURCE_SLACK = 60.0
_HANDLER_LIMIT = 30.0


def _source_limit(read_timeout: float) -> float:
    return read_timeout + _SOURCE_SLACK


def _export_limit(export_interval: float, export_timeout: float) -> float:
    return 2 * export_interval + export_timeout + 10.0


class HealthLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Seconds each loop may show no progress, from the configuration's timeouts (``for_config``).

    A source that keeps running but makes no progress (an API server that is
    down, a CA that does not match) serves frozen numbers: after ``stale``
    (two read timeouts) the agent stops being ready. It stays live: its loops
    turn, and a restart would only add a LIST to an API server's recovery.
    """

    source: float
    handler: float
    export: float | None  # None: no periodic export (--once, exporter none)
    stale: float

    @classmethod
    def for_config(cls, read_timeout: float, export_interval: float | None, export_timeout: float) -> HealthLimits:
        return cls(source=_source_limit(read_timeout), handler=_HANDLER_LIMIT,
                   export=None if export_interval is None else _export_limit(export_interval, export_timeout),
                   stale=2 * read_timeout)


class ProbeResult(msgspec.Struct, frozen=True, kw_only=True):
    """A liveness or readiness probe's answer: ok, and each check's state ("ok" or why not)."""

    ok: bool
    checks: dict[str, str]


def liveness(s: StatsSnapshot, limits: HealthLimits) -> ProbeResult:
    """Live while every loop turns within its limit; never failed by the API server or the Collector being away."""
    checks: dict[str, str] = {}
    wanted = {HANDLER_LOOP: limits.handler, EXPORT_LOOP: limits.export}
    # One source loop per watched resource ("source:pods", "source:nodes"), or "source" for a replay.
    sources = [k for k in s.loop_idle_seconds if k.split(":")[0] == SOURCE_LOOP] or [SOURCE_LOOP]
    wanted.update(dict.fromkeys(sources, limits.source))
    for loop, limit in wanted.items():
        if limit is None:
            continue
        idle = s.loop_idle_seconds.get(loop)
        if idle is None:
            checks[loop] = "not started"
        elif idle > limit:
            checks[loop] = f"stuck: no progress for {idle:.0f} s (limit {limit:.0f} s)"
        else:
            checks[loop] = "ok"
    if s.unfinished_work_seconds > limits.handler:
        checks[HANDLER_LOOP] = f"stuck: one event in the handler for {s.unfinished_work_seconds:.0f} s"
    return ProbeResult(ok=all(v == "ok" for v in checks.values()), checks=checks)


def readiness(conditions: dict[str, bool], s: StatsSnapshot | None = None,
              limits: HealthLimits | None = None) -> ProbeResult:
    """Ready when every condition holds (initial LISTs handled) and every source is current."""
    checks = {name: "ok" if ok else "waiting" for name, ok in conditions.items()}
    if s is not None and limits is not None:
        for resource, age in s.source_progress_age.items():
            checks[f"{resource} current"] = "ok" if age <= limits.stale else \
                f"stale: no progress for {age:.0f} s (limit {limits.stale:.0f} s)"
    return ProbeResult(ok=all(v == "ok" for v in checks.values()), checks=checks)
