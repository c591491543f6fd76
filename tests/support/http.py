"""Plain HTTP requests against the agent, the Collector and Prometheus: connection failures raise OSError, HTTP
errors return their status."""

from __future__ import annotations

import urllib.error
import urllib.request


def request(url: str, method: str = "GET", timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """Status and body of a GET."""
    status, _, body = request(url, timeout=timeout)
    return status, body


def get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body from a server on loopback ``port``."""
    return request(f"http://127.0.0.1:{port}{path}", method)
