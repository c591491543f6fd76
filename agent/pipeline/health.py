"""Liveness and readiness, decided from the stats snapshot (pure functions).

A loop is stuck when it has shown no progress for longer than it can
legitimately be quiet: the source may sit in one watch read for the read
timeout plus the longest backoff; the exporter waits an interval plus an
export's timeout; the handler wakes every 0.2 s and no event should take
anywhere near its limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.pipeline.stats import StatsSnapshot

__all__ = ["HealthLimits", "Verdict", "liveness", "readiness"]


@dataclass(frozen=True)
class HealthLimits:
    source: float = 120.0 + 30.0 + 30.0
    handler: float = 30.0
    export: float | None = 15.0 * 2 + 10.0 + 10.0  # None: no periodic export (--once, exporter none)

    @classmethod
    def for_config(cls, read_timeout: float, export_interval: float | None, export_timeout: float) -> "HealthLimits":
        return cls(source=read_timeout + 60.0, handler=30.0,
                   export=None if export_interval is None else 2 * export_interval + export_timeout + 10.0)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    checks: dict[str, str]


def liveness(s: StatsSnapshot, limits: HealthLimits) -> Verdict:
    checks: dict[str, str] = {}
    wanted = {"handler": limits.handler, "export": limits.export}
    # One source loop per watched resource ("source:pods", "source:nodes"), or "source" for a replay.
    sources = [k for k in s.loop_idle_seconds if k.split(":")[0] == "source"] or ["source"]
    wanted.update({k: limits.source for k in sources})
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
        checks["handler"] = f"stuck: one event in the handler for {s.unfinished_work_seconds:.0f} s"
    return Verdict(all(v == "ok" for v in checks.values()), checks)


def readiness(conditions: dict[str, bool]) -> Verdict:
    """Ready when every condition holds: the initial LIST handled (and, later, the Node read)."""
    checks = {name: "ok" if ok else "waiting" for name, ok in conditions.items()}
    return Verdict(all(ok for ok in conditions.values()), checks)
