"""A proxy in front of the real API server answers watches with an HTML page (issue 21, item 7).

The agent talks plain HTTP to a small reverse proxy on loopback, which forwards every request to the real
kube-apiserver over TLS as the admin and streams the answer back (watches included). Switched to "html", it answers
every watch with a 200 HTML page, as a misconfigured ingress or captive portal does, while LISTs still reach the
API server. Before the fix the agent re-watched ~500 times a second with one warning each (3,072 of both in 6 s);
now the watches back off and the warnings stay a handful. Switched back, the agent converges.
"""

from __future__ import annotations

import logging
import http.client
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from agent.run.agent import Agent
from testkit.agents import agent_config
from testkit.cluster import Cluster
from testkit.kwok import Kwok
from testkit.waiting import wait_until
from testkit.factory import for_create, pod
from testkit.plain_http import QuietHandler, answer, plain_http_kubeconfig, serve
from testkit.tcp_proxy import shut_down

pytestmark = pytest.mark.cluster

PAGE = b"<!DOCTYPE html>\n<html><head><title>Gateway</title></head>\n<body>\n<h1>Please sign in</h1>\n</body></html>\n"
WINDOW = 6.0  # seconds, as in the measurement


class ReverseProxy:
    def __init__(self, cluster: Cluster) -> None:
        self.mode = "forward"
        self.requests: list[tuple[float, bool]] = []
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        proxy, upstream, context = self, cluster.server, cluster.admin_tls()

        class Handler(QuietHandler):
            def do_GET(self):  # noqa: N802
                watch = "watch=true" in self.path
                with proxy._lock:
                    proxy.requests.append((time.monotonic(), watch))
                    proxy._open.add(self.connection)
                try:
                    if watch and proxy.mode == "html":
                        return answer(self, 200, "text/html; charset=utf-8", PAGE)
                    request = urllib.request.Request(upstream + self.path, headers={"Accept": "application/json"})
                    try:
                        response = urllib.request.urlopen(request, timeout=700, context=context)
                    except urllib.error.HTTPError as error:
                        return answer(self, error.code, error.headers.get("Content-Type", ""), error.read())
                    with response:
                        self.send_response(response.status)
                        self.send_header("Content-Type", response.headers.get("Content-Type", "application/json"))
                        self.send_header("Transfer-Encoding", "chunked")
                        self.end_headers()
                        while data := response.read1(65536):
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                            self.wfile.flush()
                        self.wfile.write(b"0\r\n\r\n")
                except (OSError, http.client.HTTPException):  # either side hung up mid-stream
                    self.close_connection = True
                finally:
                    with proxy._lock:
                        proxy._open.discard(self.connection)

        self._server = serve(Handler)
        self.port = self._server.server_address[1]

    def cut(self) -> None:
        """End every open connection (the watches among them) so the agent asks again."""
        with self._lock:
            sockets = list(self._open)
        for s in sockets:
            shut_down(s)

    def count(self, since: float, watch: bool) -> int:
        with self._lock:
            return sum(1 for t, w in self.requests if t >= since and w == watch)

    def kubeconfig(self, path) -> str:
        return plain_http_kubeconfig(path, self.port, token="unused-the-proxy-authenticates")

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.cut()


def test_a_proxy_answering_watches_with_html_gets_backoff_not_a_hot_loop(cluster: Cluster, kwok: Kwok, tmp_path,
                                                                         caplog):
    node = "watch-html"
    kwok.add_node(node, cpu="4", memory="8Gi")
    namespace = cluster.create_namespace("html")
    proxy = ReverseProxy(cluster)
    agent = Agent(agent_config(node_name=node, kubeconfig=proxy.kubeconfig(tmp_path / "kubeconfig"), exporter="none",
                               read_timeout=30.0, watch_timeout=(300, 400)))
    try:
        agent.start()
        wait_until(lambda: agent.state.synced and agent.state.node_listed, timeout=60, message="agent synced")
        with caplog.at_level(logging.INFO, logger="agent.source.reflector"):
            proxy.mode = "html"
            started = time.monotonic()
            proxy.cut()
            time.sleep(WINDOW)
            watches = proxy.count(started, watch=True)
            lists = proxy.count(started, watch=False)
            warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        print(f"\nHTML watch answers for {WINDOW:.0f} s: {watches} watch and {lists} LIST requests (both resources), "
              f"{len(warnings)} warning lines")
        # Two reflectors (pods, the Node), each backing off 0.8 s, 1.6 s, 3.2 s... (jittered up to twice that).
        assert 2 <= watches <= 12, watches
        assert lists <= 12, lists
        assert len(warnings) <= 8, [r.getMessage() for r in warnings]
        failed = agent.stats.snapshot().requests_failed
        assert failed.get(("pods", "undecodable"), 0) >= 1, failed

        proxy.mode = "forward"  # the proxy fixed: the agent converges on what changed meanwhile
        cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods",
                    for_create(pod("after-html", namespace=namespace), nodeName=node))
        wait_until(lambda: any(p.name == "after-html" for p in agent.state.pods()), timeout=90,
                   message="the pod created after the fix reaches the agent")
    finally:
        agent.shutdown(final_export=False)
        proxy.stop()
