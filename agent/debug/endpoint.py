"""The node-local debug endpoint: health probes, what the agent sees, /metrics, a page.

Read-only by construction: GET and HEAD only, every other method is 405.
Node-local by default: the probes answer every peer (the kubelet probes the
pod IP), the views (pods, node, runtime, /metrics, the page) only peers on
loopback, which is where ``kubectl port-forward`` arrives; any other pod gets
403. The views also check the Host header against DNS rebinding: a web page
whose name was re-pointed at 127.0.0.1 arrives with its own name in Host and
is refused; loopback names and addresses, the IP literal the client connected
to (the pod IP) and names configured with ``--debug-host`` are accepted.
The server (``http_server``) gives each connection a whole-request deadline
and answers the probes at once however many slow clients are connected; views
only read immutable snapshots, so no client can block event handling or
exports. Nothing here shows environment variables, secrets or
annotations other than the two NeonVM ones the value is computed from.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import logging
import time
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

from agent.config import VIEWS_LOCAL, Address
from agent.debug.http_server import HttpServer, Request, Response, listen_socket
from agent.debug.page import refresh_seconds, render_page
from agent.pipeline.state import NodeSnapshot, NodeState
from agent.report.json_body import json_body
from agent.report.verdict_view import verdict_view
from agent.report.views import pods_report, runtime_report, summary_report, verdict_report
from agent.telemetry.health import HealthLimits, liveness, readiness
from agent.telemetry.stats import StatsReader

__all__ = ["DebugServer", "PAGE_BYTES", "PAGE_PODS", "continue_token", "is_loopback", "host_allowed", "page_query"]

log = logging.getLogger(__name__)


PROBES = frozenset({"/healthz", "/readyz"})
_REFUSED_PEER = ("the debug views answer on loopback only (the probes answer anywhere): reach them with kubectl "
                 "-n NAMESPACE port-forward pod/POD 9808 and http://localhost:9808/, or start the agent with "
                 "--debug-views any behind a NetworkPolicy")
_REFUSED_HOST = ("Host not accepted (DNS rebinding protection): use localhost, 127.0.0.1 or the pod IP, or "
                 "--debug-host NAME")


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # a dual-stack socket shows IPv4 peers as ::ffff:a.b.c.d
    return address


def is_loopback(peer: str) -> bool:
    address = _address(peer)
    return address is not None and address.is_loopback


def host_allowed(host: str, local: str, names: Iterable[str] = ()) -> bool:
    """Whether a Host header names this endpoint as only its own users can: a loopback name or address, the IP
    literal the connection arrived on, or a configured name. A rebinding attacker's page always sends its own name."""
    host = host.strip().lower()
    if host.startswith("["):
        name = host[1:host.find("]")] if "]" in host else host
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    name = name.rstrip(".")
    if name == "localhost" or name in {n.lower().rstrip(".") for n in names}:
        return True
    address = _address(name)
    return address is not None and (address.is_loopback or address == _address(local))


#: The most pods one /debug/pods page lists (the default), and the most bytes it is served in: a page past either ends
#: early and says where the next begins. An honest pod's report is under 1 KB, so an honest node is one page.
PAGE_PODS = 500
PAGE_BYTES = 1 << 20
_MAX_TOKEN = 4096


def continue_token(pod: dict[str, Any]) -> str:
    """Where the page after ``pod`` (a pod_report) begins: its sort key, opaque to clients."""
    key = json.dumps([pod["namespace"], pod["name"], pod["uid"]], separators=(",", ":"))
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def page_query(query: str) -> tuple[tuple[str, str, str] | None, int]:
    """(after, limit) of ``?limit=N&continue=TOKEN``; ValueError with a one-line reason for anything else."""
    try:
        fields = urllib.parse.parse_qs(query, strict_parsing=bool(query), max_num_fields=4)
    except ValueError:
        raise ValueError("query must be limit=N and/or continue=TOKEN") from None
    unknown = set(fields) - {"limit", "continue"}
    if unknown or any(len(v) > 1 for v in fields.values()):
        raise ValueError("query must be limit=N and/or continue=TOKEN, each at most once")
    limit = PAGE_PODS
    if "limit" in fields:
        text = fields["limit"][0]
        if not (text.isascii() and text.isdigit() and len(text) <= 6 and 1 <= int(text) <= PAGE_PODS):
            raise ValueError(f"limit must be a whole number from 1 to {PAGE_PODS}")
        limit = int(text)
    after = None
    if "continue" in fields:
        token = fields["continue"][0]
        try:
            if len(token) > _MAX_TOKEN:
                raise ValueError
            key = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            if not (isinstance(key, list) and len(key) == 3 and all(isinstance(k, str) for k in key)):
                raise ValueError
        except ValueError:
            raise ValueError("continue must be a token a previous page gave") from None
        after = (key[0], key[1], key[2])
    return after, limit


class DebugServer:
    def __init__(
        self,
        address: Address,
        state: NodeState,
        stats: StatsReader,
        limits: HealthLimits,
        need_node: bool = True,
        timeout: float = 5.0,
        max_clients: int = 512,
        views: str = VIEWS_LOCAL,
        hosts: Iterable[str] = (),
        wall: Callable[[], float] = time.time,
    ) -> None:
        """Binds at once, so a port in use is an OSError here, before the agent starts (as a missing page template
        is a ConfigError at this module's import: debug/template.py reads them).

        ``views`` is one of config's DEBUG_VIEWS: local (loopback peers only) or any (every peer). ``wall`` is the
        Unix time: when the page says it was rendered, and when the autoscaler's verdict is judged.
        """
        self.wall = wall
        self.state = state
        self.stats = stats
        self.limits = limits
        self.need_node = need_node
        self.views = views
        self.hosts = tuple(hosts)
        self._server = HttpServer(listen_socket(address.host, address.port), self._respond, inline_paths=PROBES,
                                  head_deadline=timeout, max_clients=max_clients, name="debug-http",
                                  admit=self.admit, keep_query=True)
        self.port = self._server.port

    def start(self) -> DebugServer:
        self._server.start()
        log.info("debug endpoint on port %d", self.port)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._server.stop(timeout)

    def admit(self, request: Request) -> Response | None:
        """Probes for everyone; views for loopback peers (unless --debug-views any) whose Host is acceptable."""
        if request.path in PROBES:
            return None
        if self.views == VIEWS_LOCAL and not is_loopback(request.peer):
            return self._refusal(_REFUSED_PEER)
        # No Host at all is no browser, so no rebinding: curl -0 and the like are let through.
        if request.host is not None and not host_allowed(request.host, request.local, self.hosts):
            return self._refusal(_REFUSED_HOST)
        return None

    def _refusal(self, message: str) -> Response:
        return Response(403, "application/json", json_body({"error": message}))

    def _respond(self, target: str) -> Response:
        path, _, query = target.partition("?")
        status, content_type, body = self.route(path, query)
        return Response(status, content_type, body)

    def ready_conditions(self, snapshot: NodeSnapshot) -> dict[str, bool]:
        conditions = {"pods synced": snapshot.synced}
        if self.need_node:
            conditions["node read"] = snapshot.node_listed
        return conditions

    # -- views ---------------------------------------------------------------
    def route(self, path: str, query: str = "") -> tuple[int, str, bytes]:
        if path == "/healthz":
            probe = liveness(self.stats.snapshot(), self.limits)
            return self._json(200 if probe.ok else 503, {"ok": probe.ok, "checks": probe.checks})
        if path == "/readyz":
            probe = readiness(self.ready_conditions(self.state.snapshot()), self.stats.snapshot(), self.limits)
            return self._json(200 if probe.ok else 503, {"ok": probe.ok, "checks": probe.checks})
        if path == "/debug/pods":
            return self._pods(query)
        if path == "/debug/node":
            node = self.state.snapshot()
            verdict = verdict_report(verdict_view(node.verdict(self.wall())))
            return self._json(200, {**summary_report(node.summary()), "autoscaler": verdict})
        if path == "/debug/runtime":
            return self._json(200, runtime_report(self.stats.snapshot(), self.state.snapshot()))
        if path == "/metrics":
            # prometheus_client (~1.4 MiB RSS) loads on the first scrape: an agent that only pushes OTLP never pays it.
            from agent.export.prometheus.exposition import CONTENT_TYPE, render_metrics

            return 200, CONTENT_TYPE, render_metrics(self.state.snapshot(), self.stats.snapshot(), self.wall())
        if path in ("/", "/index.html"):
            return 200, "text/html; charset=utf-8", self._page(refresh_seconds(query)).encode()
        return self._json(404, {"error": f"no such path {path!r}",
                                "paths": ["/", "/healthz", "/readyz", "/metrics", "/debug/pods", "/debug/node",
                                          "/debug/runtime"]})

    def _pods(self, query: str) -> tuple[int, str, bytes]:
        """One page of /debug/pods: its memory bounded whatever the pods hold (PAGE_PODS pods, PAGE_BYTES of JSON);
        ``continue`` resumes after the page's last pod, ``remaining`` says how many follow."""
        try:
            after, limit = page_query(query)
        except ValueError as exc:
            return self._json(400, {"error": str(exc)})
        # The keys added here, the longest continue token a query may carry included: counted in the page's budget.
        reserved = len(json_body({"node": self.state.node_name, "continue": "A" * _MAX_TOKEN}))
        page = pods_report(self.state.snapshot().pods, after, limit, PAGE_BYTES, reserved)
        more = page["remaining"] > 0 and page["pods"]
        token = continue_token(page["pods"][-1]) if more else None
        return self._json(200, {"node": self.state.node_name, **page, "continue": token})

    @staticmethod
    def _json(status: int, body: Any) -> tuple[int, str, bytes]:
        return status, "application/json", json_body(body)

    def _page(self, refresh: int) -> str:
        node = self.state.snapshot()
        snapshot = self.stats.snapshot()
        return render_page(node, snapshot, liveness(snapshot, self.limits),
                           readiness(self.ready_conditions(node), snapshot, self.limits), self.wall(), refresh)
