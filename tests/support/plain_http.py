"""A plain-HTTP server on loopback that answers as told: a stand-in for what a proxy in front of the API server
might send, or a proxy itself, and the kubeconfig that points the agent at it."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

__all__ = ["QuietHandler", "answer", "plain_http_kubeconfig", "serve"]


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


def serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """``handler`` served on a loopback port of the kernel's choice, on a thread of its own."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


def answer(handler: BaseHTTPRequestHandler, status: int, content_type: str | None, body: bytes) -> None:
    """One whole answer with a Content-Length (no Content-Type when ``content_type`` is None)."""
    handler.send_response(status)
    if content_type:
        handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
