"""The node-local debug endpoint: health probes, what the agent sees, /metrics, a page.

Read-only by construction: GET and HEAD only, every other method is 405.
Each connection has a socket timeout (a stalled client is dropped), at most
``max_clients`` are served at once (the rest get 503 at once), and request
handling only reads immutable snapshots, so no client can block event
handling or exports. Nothing here shows environment variables, secrets or
annotations other than the two NeonVM ones the value is computed from.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent.pipeline.health import HealthLimits, liveness, readiness
from agent.export.page import render_page
from agent.export.views import pods_report, runtime_report, summary_report
from agent.pipeline.state import NodeSnapshot, NodeState
from agent.pipeline.stats import RuntimeStats
from agent.export.prometheus import CONTENT_TYPE as METRICS_CONTENT_TYPE
from agent.export.prometheus import render_metrics

__all__ = ["DebugServer", "parse_address"]

log = logging.getLogger(__name__)


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (all interfaces) or ``[v6]:PORT``."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"debug address must be HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type, max_clients: int) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self._slots = threading.BoundedSemaphore(max_clients)
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class DebugServer:
    def __init__(
        self,
        address: str,
        state: NodeState,
        stats: RuntimeStats,
        limits: HealthLimits,
        need_node: bool = True,
        timeout: float = 5.0,
        max_clients: int = 32,
    ) -> None:
        self.state = state
        self.stats = stats
        self.limits = limits
        self.need_node = need_node
        debug = self

        class Handler(_Handler):
            server_ref = debug

        Handler.timeout = timeout
        self._server = _Server(parse_address(address), Handler, max_clients)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="debug-http", daemon=True)

    def start(self) -> "DebugServer":
        self._thread.start()
        log.info("debug endpoint on port %d", self.port)
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

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
            verdict = readiness(self.ready_conditions(self.state.snapshot()))
            return self._json(200 if verdict.ok else 503, {"ok": verdict.ok, "checks": verdict.checks})
        if path == "/debug/pods":
            return self._json(200, {"node": self.state.node_name, **pods_report(self.state.snapshot().pods)})
        if path == "/debug/node":
            return self._json(200, summary_report(self.state.snapshot().summary()))
        if path == "/debug/runtime":
            return self._json(200, runtime_report(self.stats.snapshot(), self.state.snapshot()))
        if path == "/metrics":
            return 200, METRICS_CONTENT_TYPE, render_metrics(self.state.snapshot(), self.stats.snapshot())
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
        return render_page(node, snapshot, liveness(snapshot, self.limits), readiness(self.ready_conditions(node)),
                           time.time())


class _Handler(BaseHTTPRequestHandler):
    server_ref: DebugServer
    protocol_version = "HTTP/1.1"
    def version_string(self) -> str:
        return "node-requests-agent"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, content_type: str, body: bytes, head: bool = False, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _serve(self, head: bool) -> None:
        path = self.path.split("?", 1)[0]
        try:
            status, content_type, body = self.server_ref.route(path)
        except Exception:  # a bug in a view must not kill the connection thread silently
            log.exception("debug endpoint failed on %s", path)
            status, content_type, body = 500, "application/json", b'{"error": "internal error"}\n'
        self._send(status, content_type, body, head)

    def do_GET(self) -> None:  # noqa: N802
        self._serve(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve(head=True)

    def _not_allowed(self) -> None:
        # Drain nothing: the connection is closed after the answer.
        self.close_connection = True
        self._send(405, "application/json", b'{"error": "read-only endpoint: GET and HEAD only"}\n',
                   extra={"Allow": "GET, HEAD", "Connection": "close"})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed  # noqa: N815
