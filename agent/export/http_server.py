"""A small read-only HTTP/1.1 server that slow or idle clients cannot starve.

Why not ``http.server``: a thread per connection with a per-read timeout lets
32 clients sending one byte every 2 seconds hold every slot, and the
kubelet's probes then fail on a healthy agent. Here an asyncio loop holds any
number of idle connections at almost no cost, each connection must deliver
its whole request head within ``head_deadline`` seconds, and the probe paths
are answered on the loop at once while heavier views run on a small pool.
One request per connection (``Connection: close``): probes and scrapes open
a new connection each time anyway.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["HttpServer", "Response", "listen_socket"]

log = logging.getLogger(__name__)

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
            414: "URI Too Long", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}
MAX_REQUEST_LINE = 8192
MAX_HEADER_BYTES = 32768
MAX_HEADERS = 100


@dataclass(frozen=True)
class Response:
    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


def listen_socket(host: str, port: int, backlog: int = 1024) -> socket.socket:
    """A listening socket. An empty host means every interface, IPv6 and IPv4 (dual-stack) where the kernel allows."""
    if host == "":
        try:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            family_host = "::"
        except OSError:  # no IPv6 on this host
            sock, family_host = socket.socket(socket.AF_INET, socket.SOCK_STREAM), "0.0.0.0"
    else:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        family_host = host
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((family_host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class HttpServer:
    def __init__(
        self,
        sock: socket.socket,
        route: Callable[[str], Response],
        inline_paths: frozenset[str] = frozenset(),
        head_deadline: float = 5.0,
        max_clients: int = 512,
        workers: int = 2,
        name: str = "http",
    ) -> None:
        self._sock = sock
        self._route = route
        self._inline = inline_paths
        self._head_deadline = head_deadline
        self._max_clients = max_clients
        self._active = 0
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix=f"{name}-view")
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.port = sock.getsockname()[1]

    def start(self) -> "HttpServer":
        self._thread.start()
        self._started.wait(5)
        return self

    def stop(self) -> None:
        if self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._sock.close()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stopped = asyncio.Event()
        server = await asyncio.start_server(self._connection, sock=self._sock, limit=MAX_HEADER_BYTES + 2)
        self._started.set()
        async with server:
            await self._stopped.wait()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._active >= self._max_clients:
            await self._write(writer, Response(503, "application/json", b'{"error": "too many clients"}\n',
                                               (("Retry-After", "1"),)))
            return
        self._active += 1
        try:
            await self._serve_one(reader, writer)
        except Exception:  # noqa: BLE001 - a broken client must never reach the loop
            log.debug("connection failed", exc_info=True)
        finally:
            self._active -= 1
            writer.close()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method, path = await asyncio.wait_for(self._read_head(reader), self._head_deadline)
        except asyncio.TimeoutError:
            await self._write(writer, Response(408, "application/json", b'{"error": "request too slow"}\n'))
            return
        except (_BadRequest, asyncio.IncompleteReadError, ConnectionError) as exc:
            if isinstance(exc, _BadRequest):
                await self._write(writer, Response(exc.status, "application/json",
                                                   f'{{"error": "{exc}"}}\n'.encode()))
            return
        if method not in ("GET", "HEAD"):
            await self._write(writer, Response(405, "application/json",
                                               b'{"error": "read-only endpoint: GET and HEAD only"}\n',
                                               (("Allow", "GET, HEAD"),)))
            return
        path = path.split("?", 1)[0]
        try:
            if path in self._inline:
                response = self._route(path)  # probes: answered on the loop, never queued behind a render
            else:
                response = await self._loop.run_in_executor(self._pool, self._route, path)
        except Exception:  # noqa: BLE001 - a bug in a view is a 500, not a dead connection
            log.exception("view failed on %s", path)
            response = Response(500, "application/json", b'{"error": "internal error"}\n')
        await self._write(writer, response, head=method == "HEAD")

    @staticmethod
    async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str]:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            raise _BadRequest(414, "request line too long") from None
        if len(line) > MAX_REQUEST_LINE:
            raise _BadRequest(414, "request line too long")
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise _BadRequest(400, "malformed request line")
        total, count = 0, 0
        while True:
            try:
                header = await reader.readuntil(b"\n")
            except asyncio.LimitOverrunError:
                raise _BadRequest(431, "header too large") from None
            if header in (b"\r\n", b"\n"):
                return parts[0], parts[1]
            total += len(header)
            count += 1
            if total > MAX_HEADER_BYTES or count > MAX_HEADERS:
                raise _BadRequest(431, "too many or too large headers")

    @staticmethod
    async def _write(writer: asyncio.StreamWriter, r: Response, head: bool = False) -> None:
        lines = [f"HTTP/1.1 {r.status} {_REASONS.get(r.status, 'Unknown')}", f"Content-Type: {r.content_type}",
                 f"Content-Length: {len(r.body)}", "Cache-Control: no-store", "X-Content-Type-Options: nosniff",
                 "Server: node-requests-agent", "Connection: close", *(f"{k}: {v}" for k, v in r.headers)]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if head else r.body))
        try:
            await asyncio.wait_for(writer.drain(), 10.0)
        except (asyncio.TimeoutError, ConnectionError):
            pass
