"""Plain HTTP requests against the agent, the Collector and Prometheus: connection failures raise OSError, HTTP
errors return their status."""

from __future__ import annotations

import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping


def request(url: str, method: str = "GET", timeout: float = 5.0, data: bytes | None = None,
            headers: Mapping[str, str] | None = None,
            context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body; an https ``url`` verified with ``context`` (None: the system CAs)."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=dict(headers or {}), method=method),
                                    timeout=timeout, context=context) as r:
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


def raw_get(address: str, port: int, path: str, host: str | None = "default", extra: bytes = b"") -> tuple[int, bytes]:
    """One raw HTTP/1.1 GET; ``host`` "default" sends the address connected to, None sends no Host header."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect((address, port))
        if host == "default":
            host = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
        head = f"GET {path} HTTP/1.1\r\n".encode() + (f"Host: {host}\r\n".encode() if host is not None else b"")
        s.sendall(head + extra + b"Connection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.partition(b"\r\n\r\n")[2]
