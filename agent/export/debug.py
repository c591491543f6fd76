"""The node-local debug endpoint: health probes, what the agent sees, /metrics, a page.

Read-only by construction: GET and HEAD only, every other method is 405.
The server (``http_server``) gives each connection a whole-request deadline
and answers the probes at once however many slow clients are connected; views
only read immutable snapshots, so no client can block event handling or
exports. Nothing here shows environment variables, secrets or
annotations other than the two NeonVM ones the value is computed from.
"""

from __future__ import annotations

import html
import json
import logging
from typing import Any

from agent.pipeline.health import HealthLimits, liveness, readiness
from agent.model.quantity import format_bytes, format_cores
from agent.export.views import pods_report, runtime_report, summary_report
from agent.model.node_summary import QUANTITIES, pod_totals
from agent.pipeline.state import NodeSnapshot, NodeState
from agent.pipeline.stats import RuntimeStats
from agent.export.http_server import HttpServer, Response, listen_socket

__all__ = ["DebugServer", "parse_address"]

log = logging.getLogger(__name__)


PROBES = frozenset({"/healthz", "/readyz"})


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[v6]:PORT``, or ``:PORT``: every interface, IPv6 and IPv4 ("" host)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"debug address must be HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


class DebugServer:
    def __init__(
        self,
        address: str,
        state: NodeState,
        stats: RuntimeStats,
        limits: HealthLimits,
        need_node: bool = True,
        timeout: float = 5.0,
        max_clients: int = 512,
    ) -> None:
        """Binds at once, so a port in use is an OSError here, before the agent starts."""
        self.state = state
        self.stats = stats
        self.limits = limits
        self.need_node = need_node
        self._server = HttpServer(listen_socket(*parse_address(address)), self._respond, inline_paths=PROBES,
                                  head_deadline=timeout, max_clients=max_clients, name="debug-http")
        self.port = self._server.port

    def start(self) -> "DebugServer":
        self._server.start()
        log.info("debug endpoint on port %d", self.port)
        return self

    def stop(self) -> None:
        self._server.stop()

    def _respond(self, path: str) -> Response:
        status, content_type, body = self.route(path)
        return Response(status, content_type, body)

    def ready_conditions(self, snapshot: NodeSnapshot) -> dict[str, bool]:
        conditions = {"pods synced": snapshot.synced}
        if self.need_node:
            conditions["node read"] = snapshot.node_listed
        return conditions

    # -- views ---------------------------------------------------------------
    def route(self, path: str) -> tuple[int, str, bytes]:
        if path == "/healthz":
            verdict = liveness(self.stats.snapshot(), self.limits)
            return self._json(200 if verdict.ok else 503, {"ok": verdict.ok, "checks": verdict.checks})
        if path == "/readyz":
            verdict = readiness(self.ready_conditions(self.state.snapshot()), self.stats.snapshot(), self.limits)
            return self._json(200 if verdict.ok else 503, {"ok": verdict.ok, "checks": verdict.checks})
        if path == "/debug/pods":
            return self._json(200, {"node": self.state.node_name, **pods_report(self.state.snapshot().pods)})
        if path == "/debug/node":
            return self._json(200, summary_report(self.state.snapshot().summary()))
        if path == "/debug/runtime":
            return self._json(200, runtime_report(self.stats.snapshot(), self.state.snapshot()))
        if path == "/metrics":
            # prometheus_client (~1.4 MiB RSS) loads on the first scrape: an agent that only pushes OTLP never pays it.
            from agent.export.prometheus import CONTENT_TYPE, render_metrics

            return 200, CONTENT_TYPE, render_metrics(self.state.snapshot(), self.stats.snapshot())
        if path in ("/", "/index.html"):
            return 200, "text/html; charset=utf-8", self._page().encode()
        return self._json(404, {"error": f"no such path {path!r}",
                                "paths": ["/", "/healthz", "/readyz", "/metrics", "/debug/pods", "/debug/node", "/debug/runtime"]})

    @staticmethod
    def _json(status: int, body: Any) -> tuple[int, str, bytes]:
        return status, "application/json", (json.dumps(body, indent=2) + "\n").encode()

    def _page(self, top: int = 20) -> str:
        node = self.state.snapshot()
        pods = [p for p in node.pods if p.reported]
        snapshot = self.stats.snapshot()
        live = liveness(snapshot, self.limits)
        ready = readiness(self.ready_conditions(node), snapshot, self.limits)
        e = html.escape
        totals = pod_totals(pods)
        cpu, mem, vms = totals.cpu, totals.memory, totals.by_vm_usage
        rows = "".join(
            f"<tr><td>{e(p.namespace)}</td><td>{e(p.name)}</td><td>{e(p.source)}</td>"
            f"<td class=n>{e(format_cores(p.cpu))}</td><td class=n>{e(format_bytes(p.memory))}</td>"
            f"<td>{e('; '.join(str(x) for x in p.problems))}</td></tr>"
            for p in sorted(pods, key=lambda p: (-p.cpu, -p.memory, p.namespace, p.name))[:top])
        health = "".join(f"<tr><td>{e(k)}</td><td>{e(v)}</td></tr>" for k, v in {**live.checks, **ready.checks}.items())
        last_export = snapshot.last_export_success_age_seconds
        facts = {
            "queue depth": str(snapshot.queue_depth),
            "events handled": str(snapshot.events_handled),
            "watch (re)starts": ", ".join(f"{r} {k} {v}" for (r, k), v in sorted(snapshot.watch_starts.items())) or "none",
            "relists": ", ".join(f"{r} {v}" for r, v in sorted(snapshot.relists.items())) or "none",
            "last event or bookmark": "never" if snapshot.last_event_age_seconds is None else f"{snapshot.last_event_age_seconds:.1f} s ago",
            "last successful export": "never" if last_export is None else f"{last_export:.1f} s ago",
            "export results": ", ".join(f"{k} {v}" for k, v in sorted(snapshot.exports.items())) or "none yet",
        }
        fact_rows = "".join(f"<tr><td>{e(k)}</td><td>{e(v)}</td></tr>" for k, v in facts.items())
        summary = node.summary()
        cpu_q, mem_q = summary.cpu.quantities(), summary.memory.quantities()
        comparison = "".join(
            f"<tr><td>{e(q)}</td><td class=n>{e(format_cores(cpu_q[q])) if q in cpu_q else '-'}</td>"
            f"<td class=n>{e(format_bytes(mem_q[q])) if q in mem_q else '-'}</td>"
            f"<td class=n>{_share_of_allocatable(cpu_q, q)}</td></tr>" for q in QUANTITIES)
        status = "healthy" if live.ok and ready.ok else "degraded"
        return f"""<!doctype html>
<html lang=en><head><meta charset=utf-8><title>node-requests-agent: {e(self.state.node_name)}</title>
<style>body{{font:14px system-ui,sans-serif;margin:1.5em;color:#222}}table{{border-collapse:collapse;margin:.5em 0 1.5em}}
td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:left}}th{{background:#f3f3f3}}.n{{text-align:right}}
.healthy{{color:#176f2c}}.degraded{{color:#a11}}</style></head><body>
<h1>Node {e(self.state.node_name)} <small class={status} id=status>{status}</small></h1>
<h2>Node comparison</h2>
<table id=comparison><tr><th>quantity</th><th>CPU</th><th>memory</th><th>CPU of allocatable</th></tr>{comparison}</table>
<h2>What the cluster-autoscaler sees</h2>
<table id=node><tr><th>pods reported</th><th>valued by VM usage</th><th>CPU (pod or VM)</th><th>memory (pod or VM)</th></tr>
<tr><td class=n>{len(pods)}</td><td class=n>{vms}</td><td class=n>{e(format_cores(cpu))}</td><td class=n>{e(format_bytes(mem))}</td></tr></table>
<h2>Top {min(top, len(pods))} pods by CPU</h2>
<table id=pods><tr><th>namespace</th><th>pod</th><th>source</th><th>CPU</th><th>memory</th><th>problems</th></tr>{rows}</table>
<h2>Agent health</h2>
<table id=health><tr><th>check</th><th>state</th></tr>{health}</table>
<table id=runtime><tr><th>signal</th><th>value</th></tr>{fact_rows}</table>
<p><a href=/debug/pods>/debug/pods</a> · <a href=/debug/node>/debug/node</a> · <a href=/debug/runtime>/debug/runtime</a> · <a href=/metrics>/metrics</a></p>
</body></html>
"""


def _share_of_allocatable(values: dict[str, int], quantity: str) -> str:
    if quantity not in values or not values.get("allocatable"):
        return "-"
    return f"{values[quantity] / values['allocatable']:.0%}"
