"""A plain-HTTP server on loopback that answers as told: a stand-in for what a proxy in front of the API server
might send, or a proxy itself, and the kubeconfig that points the agent at it. The test servers (the fake API
server, the OTLP receiver) are built of the same parts."""

from __future__ import annotations

import ssl
import sys
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

__all__ = ["QuietHTTPServer", "QuietHandler", "answer", "plain_http_kubeconfig", "serve"]


def plain_http_kubeconfig(path, port: int, token: str = "t") -> str:
    """A kubeconfig for a plain-HTTP server on loopback ``port`` (a stand-in or a proxy), written to ``path``."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "plain",
        "clusters": [{"name": "plain", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "agent", "user": {"token": token}}],
        "contexts": [{"name": "plain", "context": {"cluster": "plain", "user": "agent"}}],
    }))
    return str(path)


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 (chunked answers, kept-alive connections, as the API server's), and no line per request."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass


class QuietHTTPServer(ThreadingHTTPServer):
    allow_reuse_address = True

    def handle_error(self, request, client_address) -> None:
        # A client that hangs up (an agent stopping mid-watch) is not a server error.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError, ssl.SSLError)):
            super().handle_error(request, client_address)


def serve(handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None) -> QuietHTTPServer:
    """``handler`` served on a loopback port of the kernel's choice, on a thread of its own; over TLS with ``tls``
    (a server context), the handshake on the connection's own thread."""
    server = QuietHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


def answer(handler: BaseHTTPRequestHandler, status: int, content_type: str | None, body: bytes,
           headers: Mapping[str, str] | None = None) -> None:
    """One whole answer with a Content-Length (no Content-Type when ``content_type`` is None), and ``headers``."""
    handler.send_response(status)
    if content_type:
        handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)
