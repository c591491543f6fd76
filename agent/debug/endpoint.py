"""The node-local debug endpoint: health probes, what the agent sees, /metrics, a page.

Read-only by construction: GET and HEAD only, every other method is 405.
The server (``http_server``) gives each connection a whole-request deadline
and answers the probes at once however many slow clients are connected; views
only read immutable snapshots, so no client can block event handling or
exports. Nothing here shows environment variables, secrets or
annotations other than the two NeonVM ones the value is computed from.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from agent.config import parse_address
from agent.pipeline.health import HealthLimits, liveness, readiness
from agent.report.views import pods_report, runtime_report, summary_report
from agent.pipeline.state import NodeSnapshot, NodeState
from agent.pipeline.interfaces import StatsReader
from agent.debug.http_server import HttpServer, Response, listen_socket
from agent.debug.page import render_page

__all__ = ["DebugServer"]

log = logging.getLogger(__name__)


PROBES = frozenset({"/healthz", "/readyz"})


class DebugServer:
    def __init__(
        self,
        address: str,
        state: NodeState,
        stats: StatsReader,
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
            from agent.export.prometheus.exposition import CONTENT_TYPE, render_metrics

            return 200, CONTENT_TYPE, render_metrics(self.state.snapshot(), self.stats.snapshot())
        if path in ("/", "/index.html"):
            return 200, "text/html; charset=utf-8", self._page().encode()
        return self._json(404, {"error": f"no such path {path!r}",
                                "paths": ["/", "/healthz", "/readyz", "/metrics", "/debug/pods", "/debug/node", "/debug/runtime"]})

    @staticmethod
    def _json(status: int, body: Any) -> tuple[int, str, bytes]:
        return status, "application/json", (json.dumps(body, indent=2) + "\n").encode()

    def _page(self) -> str:
        node = self.state.snapshot()
        snapshot = self.stats.snapshot()
        return render_page(node, snapshot, liveness(snapshot, self.limits),
                           readiness(self.ready_conditions(node), snapshot, self.limits), time.time())
