"""Liveness restarts the agent only when restarting can help (issue 21, item 6); readiness says "synced".

A wedged loop (the handler, the export loop or a source not turning) fails liveness. An API server that is
down or hung does not: the sources keep turning (retrying with backoff, or cycling through read timeouts), a
restart would only add a LIST to the API server's recovery, and readiness already reports the frozen numbers.
"""

from __future__ import annotations

import json

from agent.telemetry.health import HealthLimits, liveness, readiness
from agent.telemetry.stats import StatsSnapshot
from testkit.waiting import wait_until
from testkit.factory import node, pod
from testkit.http import get

LIMITS = HealthLimits.for_config(read_timeout=120.0, export_interval=15.0, export_timeout=10.0)
TURNING = {"source:pods": 2.0, "source:nodes": 2.0, "handler": 0.1, "export": 3.0}


def test_an_hour_without_the_api_server_is_alive_but_not_ready():
    s = StatsSnapshot(loop_idle_seconds=TURNING, source_progress_age={"pods": 3600.0, "nodes": 3600.0})
    alive = liveness(s, LIMITS)
    assert alive.ok, alive.checks
    assert not any("progress" in k for k in alive.checks)
    ready = readiness({"pods synced": True, "node read": True}, s, LIMITS)
    assert not ready.ok and ready.checks["pods current"].startswith("stale")


def test_readiness_is_synced_and_current():
    s = StatsSnapshot(loop_idle_seconds=TURNING, source_progress_age={"pods": 10.0, "nodes": 10.0})
    assert readiness({"pods synced": True, "node read": True}, s, LIMITS).ok
    assert not readiness({"pods synced": False, "node read": True}, s, LIMITS).ok


def test_each_wedged_loop_fails_liveness():
    for loop, idle in (("source:pods", LIMITS.source + 1), ("handler", LIMITS.handler + 1),
                       ("export", LIMITS.export + 1)):
        s = StatsSnapshot(loop_idle_seconds={**TURNING, loop: idle})
        probe = liveness(s, LIMITS)
        assert not probe.ok and probe.checks[loop].startswith("stuck"), (loop, probe.checks)
    stuck_event = StatsSnapshot(loop_idle_seconds=TURNING, unfinished_work_seconds=LIMITS.handler + 1)
    assert not liveness(stuck_event, LIMITS).ok
    # A source blocked in one read for the whole read timeout (a hung API server) is still within its limit.
    assert liveness(StatsSnapshot(loop_idle_seconds={**TURNING, "source:pods": 120.0 + 30.0}), LIMITS).ok


def test_an_api_server_outage_fails_readiness_never_liveness(apiserver, make_agent):
    apiserver.create(node("node-a"), kind="nodes")
    apiserver.create(pod("web"))
    agent = make_agent(read_timeout=0.5, debug_address="127.0.0.1:0")
    port = agent.debug.port
    wait_until(lambda: get(port, "/readyz")[0] == 200, timeout=15)
    apiserver.stop()  # down: every connection refused from now on
    wait_until(lambda: get(port, "/readyz")[0] == 503, timeout=15)
    # Past ten read timeouts (liveness used to fail after five), with the sources still retrying.
    failed = agent.stats.snapshot().requests_failed
    wait_until(lambda: sum(agent.stats.snapshot().requests_failed.values()) >= sum(failed.values()) + 2, timeout=15)
    wait_until(lambda: min(agent.stats.snapshot().source_progress_age.values()) > 10 * 0.5, timeout=15)
    status, _, body = get(port, "/healthz")
    assert status == 200, body
    checks = json.loads(body)["checks"]
    assert checks["source:pods"] == "ok" and checks["source:nodes"] == "ok"
