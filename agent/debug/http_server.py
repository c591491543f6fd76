"""A small read-only HTTP/1.1 server that slow or idle clients cannot starve.

Why not ``http.server``: a thread per connection with a per-read timeout lets
32 clients sending one byte every 2 seconds hold every slot, and the
kubelet's probes then fail on a healthy agent. Here one thread multiplexes
every connection with ``selectors`` (idle ones cost a buffer each), each
connection must deliver its whole request head within ``head_deadline``
seconds, and the probe paths are answered on that thread at once while
heavier views run on a small pool. A flood of connections cannot crowd the
probes out (issue 29): when every slot is taken, the oldest connection that
has not yet sent a whole request head is closed to make room, so idle
clients only push each other out; one peer address holds at most
``max_per_peer`` connections; and a connection accepted beyond the slots
(every slot busy with a whole request) still has its head read, and a probe
there is answered while a view gets 503. One request per connection
(``Connection: close``): probes and scrapes open a new connection each time
anyway. Not asyncio: importing it alone was 1.4 MiB of the agent's resident
memory, a quarter of all it holds beyond the mandated packages.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from itertools import chain

import msgspec

__all__ = ["MAX_PER_PEER", "BadRequest", "HttpServer", "Request", "RequestHead", "Response", "listen_socket"]

log = logging.getLogger(__name__)

_REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout",
            414: "URI Too Long", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}
MAX_REQUEST_LINE = 8192
MAX_HEADER_BYTES = 32768
MAX_HEADERS = 100
_LINGER = 0.5  # seconds an answered connection is read (and discarded) until the client closes
_ACCEPT_PAUSE = 0.1  # seconds the listener rests when accepting fails (out of descriptors)
# Connections one peer address may hold. The kubelet opens one per probe, a scraper one per scrape, a browser
# through kubectl port-forward (all on loopback) a handful: 64 is far above any of them and an eighth of the
# default 512 slots, so a single pod cannot fill them. A constant, not a setting: nobody legitimate nears it.
MAX_PER_PEER = 64


class Response(msgspec.Struct, frozen=True):
    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


class Request(msgspec.Struct, frozen=True):
    """What ``admit`` decides on: the request line, the Host header (None when absent), and both ends' addresses."""

    method: str
    path: str  # without the query
    query: str
    host: str | None
    peer: str  # the client's IP address
    local: str  # the IP address the client connected to


def listen_socket(host: str, port: int, backlog: int = 1024) -> socket.socket:
    """A listening socket. An empty host means every interface, IPv6 and IPv4 (dual-stack) where the kernel allows."""
    if host == "":
        try:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        except OSError:  # no IPv6 on this host
            sock, family_host = socket.socket(socket.AF_INET, socket.SOCK_STREAM), "0.0.0.0"
        else:
            try:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                family_host = "::"
            except OSError:  # IPv6 only, no dual-stack: IPv4, so the kubelet's probes still reach it
                sock.close()
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


class BadRequest(Exception):
    """A request head that will never be whole or valid: its status (400, 414, 431) and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class RequestHead:
    """A request head read as it arrives: each received byte is looked at once and each line parsed once.

    Re-parsing the whole partial head on every chunk made a head trickled a byte at a time cost its size squared
    (a 95-line head, issue 38): here a chunk costs its own length, whatever came before it. The limits are checked
    as bytes arrive, so a head that can never fit is refused before it is whole.
    """

    __slots__ = ("_buf", "_line", "_scanned", "_request", "_total", "_count", "_host")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._line = 0  # where the line being received starts
        self._scanned = 0  # how far ``_buf`` has been searched for a line end
        self._request: list[str] | None = None  # the request line's three words, once read
        self._total = 0  # header bytes in whole lines
        self._count = 0  # header lines
        self._host: str | None = None

    def feed(self, data: bytes) -> tuple[str, str, str | None] | None:
        """(method, target, Host) once the head is whole, None while it is not; BadRequest if it never will be."""
        buf = self._buf
        buf += data
        while True:
            end = buf.find(b"\n", self._scanned)
            if end < 0:
                self._scanned = len(buf)
                self._check_partial(len(buf) - self._line)
                return None
            line = bytes(buf[self._line:end + 1])
            self._scanned = self._line = end + 1
            head = self._take(line)
            if head is not None:
                return head

    def _check_partial(self, length: int) -> None:
        if self._request is None:
            if length > MAX_REQUEST_LINE:
                raise BadRequest(414, "request line too long")
        elif self._total + length > MAX_HEADER_BYTES:
            raise BadRequest(431, "header too large")

    def _take(self, line: bytes) -> tuple[str, str, str | None] | None:
        if self._request is None:
            if len(line) > MAX_REQUEST_LINE:
                raise BadRequest(414, "request line too long")
            parts = line.decode("latin-1").split()
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                raise BadRequest(400, "malformed request line")
            self._request = parts
            return None
        if line in (b"\r\n", b"\n"):
            return self._request[0], self._request[1], self._host
        name, sep, value = line.partition(b":")
        if sep and name.strip().lower() == b"host":
            if self._host is not None:
                raise BadRequest(400, "more than one Host header")
            self._host = value.strip().decode("latin-1")
        self._total += len(line)
        self._count += 1
        if self._total > MAX_HEADER_BYTES or self._count > MAX_HEADERS:
            raise BadRequest(431, "too many or too large headers")
        return None


def _encode(r: Response, head: bool = False) -> bytes:
    lines = [f"HTTP/1.1 {r.status} {_REASONS.get(r.status, 'Unknown')}", f"Content-Type: {r.content_type}",
             f"Content-Length: {len(r.body)}", "Cache-Control: no-store", "X-Content-Type-Options: nosniff",
             "Server: node-requests-agent", "Connection: close", *(f"{k}: {v}" for k, v in r.headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if head else r.body)


def _error(status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(status, "application/json", f'{{"error": "{message}"}}\n'.encode(), headers)


class _Connection(msgspec.Struct, eq=False):
    sock: socket.socket
    deadline: float  # for the whole head while reading, for the whole answer while writing
    peer: str = ""
    local: str = ""
    head: RequestHead = msgspec.field(default_factory=RequestHead)
    out: memoryview | None = None  # the answer still to send
    head_only: bool = False
    # Accepted beyond max_clients (no idle one to close): a probe is answered, a view 503 if still full.
    over: bool = False
    waiting: bool = False  # a view is rendering on the pool
    draining: bool = False  # answered; reading what the client still sends, so closing does not reset the answer


class HttpServer:
    def __init__(
        self,
        sock: socket.socket,
        route: Callable[[str], Response],
        inline_paths: frozenset[str] = frozenset(),
        head_deadline: float = 5.0,
        max_clients: int = 512,
        max_per_peer: int = MAX_PER_PEER,
        workers: int = 2,
        name: str = "http",
        write_deadline: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        admit: Callable[[Request], Response | None] | None = None,
        keep_query: bool = False,
    ) -> None:
        """``admit`` sees every request first, on the loop (it must be cheap): None lets it through, a Response
        answers instead. ``keep_query`` hands ``route`` the path with its query."""
        self._sock = sock
        self._route = route
        self._admit = admit
        self._keep_query = keep_query
        self._inline = inline_paths
        self._head_deadline = head_deadline
        self._write_deadline = write_deadline
        self._max_clients = max_clients
        self._max_per_peer = max_per_peer
        self._clock = clock
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix=f"{name}-view")
        self._selector = selectors.DefaultSelector()
        self._connections: dict[int, _Connection] = {}
        # Insertion-ordered, oldest first, so choosing whom to close costs nothing however many are held:
        self._heading: dict[int, _Connection] = {}  # still reading their request head, in a slot
        self._over: dict[int, _Connection] = {}  # still reading their request head, accepted beyond the slots
        self._draining: dict[int, _Connection] = {}  # answered, lingering
        self._by_peer: dict[str, dict[int, _Connection]] = {}
        self._rendered: queue.SimpleQueue[tuple[_Connection, bytes]] = queue.SimpleQueue()
        self._accept_resume: float | None = None  # when accepting, paused after a failure, starts again
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.port = sock.getsockname()[1]

    def start(self) -> HttpServer:
        self._selector.register(self._sock, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping = True
        self._wake()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for conn in list(self._connections.values()):
            self._close(conn)
        self._selector.close()
        self._sock.close()
        self._wake_r.close()
        self._wake_w.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # already awake (the buffer is full) or stopped
            self._wake_w.send(b"x")

    # -- the loop --------------------------------------------------------------
    def _serve(self) -> None:
        while not self._stopping:
            try:
                events = self._selector.select(self._timeout())
            except OSError:
                return  # the selector was closed under us: stopping
            # The listener last: a probe whose request has arrived is answered before new connections are
            # accepted, and it is never the one closed to make room for them.
            events.sort(key=lambda event: event[0].data == "accept")
            for key, mask in events:
                try:
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        self._drain_wake()
                    elif mask & selectors.EVENT_WRITE:
                        self._send(key.data)
                    else:
                        self._receive(key.data)
                except Exception:  # a broken client must never stop the loop
                    log.debug("connection failed", exc_info=True)
                    if isinstance(key.data, _Connection):
                        self._close(key.data)
            try:
                self._expire()
            except Exception:  # as above: the loop outlives any one connection
                log.debug("expiring connections failed", exc_info=True)

    def _timeout(self) -> float | None:
        """Until the nearest deadline; with none, sleep until a connection or a wake-up (idle costs no CPU)."""
        pending = [c.deadline for c in self._connections.values() if not c.waiting]
        if self._accept_resume is not None:
            pending.append(self._accept_resume)
        return max(0.0, min(pending) - self._clock()) if pending else None

    def _expire(self) -> None:
        now = self._clock()
        if self._accept_resume is not None and self._accept_resume <= now:
            self._accept_resume = None
            self._selector.register(self._sock, selectors.EVENT_READ, "accept")
        for conn in [c for c in self._connections.values() if not c.waiting and c.deadline <= now]:
            if conn.out is None:
                self._answer(conn, _error(408, "request too slow"))
            else:
                self._close(conn)  # a client that does not read its answer, or will not stop sending

    def _accept(self) -> None:
        for _ in range(64):  # a burst of connections, without starving the rest
            try:
                sock, address = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                # Out of descriptors (EMFILE, ENFILE, ENOBUFS): the connection stays pending, the listener
                # readable, and selecting on it again at once would spin a core until a descriptor frees.
                log.warning("cannot accept a connection (%s): pausing %.1f s", exc, _ACCEPT_PAUSE)
                self._selector.unregister(self._sock)
                self._accept_resume = self._clock() + _ACCEPT_PAUSE
                return
            sock.setblocking(False)
            peer = str(address[0])
            if not self._make_room(peer):
                sock.close()  # a flood: even the answer that says so would cost what it protects
                continue
            try:
                local = sock.getsockname()[0]
            except OSError:
                local = ""
            conn = _Connection(sock, self._clock() + self._head_deadline, peer=peer, local=str(local))
            fd = sock.fileno()
            self._connections[fd] = conn
            self._by_peer.setdefault(peer, {})[fd] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)
            if self._active() > self._max_clients and self._heading:
                self._close(next(iter(self._heading.values())))  # idle the longest: it makes room, whoever it was
            if self._active() > self._max_clients:
                # Every slot holds a whole request: read this one's path before refusing. Only the hard limit
                # closes these, oldest first, so a probe among them is read long before its turn comes.
                conn.over = True
                self._over[fd] = conn
            else:
                self._heading[fd] = conn

    def _make_room(self, peer: str) -> bool:
        """Whether a new connection from ``peer`` may be accepted, after closing one that sent no whole head yet or
        was already answered: the peer's own oldest when it holds its share, the oldest of all at the hard limit
        (twice the slots). False when every candidate is busy with a whole request."""
        mine = self._by_peer.get(peer)
        if mine is not None and len(mine) >= self._max_per_peer:
            victim = next((c for c in mine.values() if c.draining or self._reading(c)), None)
            if victim is None:
                return False
            self._close(victim)
        if len(self._connections) >= 2 * self._max_clients:
            victim = next(chain(self._draining.values(), self._over.values(), self._heading.values()), None)
            if victim is None:
                return False
            self._close(victim)
        return True

    def _reading(self, conn: _Connection) -> bool:
        """Still reading its request head (in a slot or beyond)."""
        fd = conn.sock.fileno()
        return fd in self._heading or fd in self._over

    def _head_done(self, conn: _Connection) -> None:
        fd = conn.sock.fileno()
        self._heading.pop(fd, None)
        self._over.pop(fd, None)

    def _active(self) -> int:
        """Connections holding a slot: all but those answered and lingering and those accepted beyond the slots."""
        return len(self._connections) - len(self._draining) - len(self._over)

    def _receive(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn)  # gone: before its request was whole, or after reading its answer
            return
        if conn.draining:
            return
        try:
            head = conn.head.feed(data)
        except BadRequest as exc:
            self._answer(conn, _error(exc.status, str(exc)))
            return
        if head is not None:
            self._dispatch(conn, *head)

    def _dispatch(self, conn: _Connection, method: str, target: str, host: str | None = None) -> None:
        if method not in ("GET", "HEAD"):
            self._answer(conn, _error(405, "read-only endpoint: GET and HEAD only", (("Allow", "GET, HEAD"),)))
            return
        conn.head_only = method == "HEAD"
        path, _, query = target.partition("?")
        if conn.over and path not in self._inline and self._active() >= self._max_clients:
            self._answer(conn, _error(503, "too many clients", (("Retry-After", "1"),)))
            return
        if self._admit is not None:
            refused = self._admit(Request(method, path, query, host, conn.peer, conn.local))
            if refused is not None:
                self._answer(conn, refused)
                return
        if path in self._inline:
            self._write(conn, self._render(path, conn.head_only))  # probes: at once, never queued behind a render
            return
        conn.waiting = True
        self._head_done(conn)
        self._selector.unregister(conn.sock)  # one request per connection: nothing more to read
        future = self._pool.submit(self._render, target if self._keep_query else path, conn.head_only)
        future.add_done_callback(functools.partial(self._rendered_one, conn))

    def _rendered_one(self, conn: _Connection, future: concurrent.futures.Future) -> None:
        if future.cancelled():
            return
        self._rendered.put((conn, future.result()))
        self._wake()

    def _render(self, path: str, head_only: bool) -> bytes:
        """The answer, encoded here: a view that raises, or returns what cannot be encoded (a str body), is a 500,
        never a silent close, and never an exception on the loop that would strand the answers queued behind it."""
        try:
            return _encode(self._route(path), head_only)
        except Exception:  # a bug in a view is a 500, not a dead connection
            log.exception("view failed on %s", path)
            return _encode(_error(500, "internal error"), head_only)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        while True:
            try:
                conn, answer = self._rendered.get_nowait()
            except queue.Empty:
                return
            if self._connections.get(conn.sock.fileno()) is conn:
                conn.waiting = False
                self._selector.register(conn.sock, selectors.EVENT_WRITE, conn)
                self._write(conn, answer)

    def _answer(self, conn: _Connection, response: Response) -> None:
        self._write(conn, _encode(response, conn.head_only))

    def _write(self, conn: _Connection, answer: bytes) -> None:
        self._head_done(conn)
        conn.out = memoryview(answer)
        conn.deadline = self._clock() + self._write_deadline
        self._selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
        self._send(conn)

    def _send(self, conn: _Connection) -> None:
        assert conn.out is not None
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        conn.out = conn.out[sent:]
        if conn.out:
            return
        # Lingering close: a client still sending (a request past the limits) would get a reset for
        # its unread bytes, and a reset can discard the answer before the client reads it.
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.draining = True
        self._draining[conn.sock.fileno()] = conn
        conn.deadline = self._clock() + _LINGER
        self._selector.modify(conn.sock, selectors.EVENT_READ, conn)

    def _close(self, conn: _Connection) -> None:
        fd = conn.sock.fileno()
        if fd >= 0 and self._connections.get(fd) is conn:
            del self._connections[fd]
            self._heading.pop(fd, None)
            self._over.pop(fd, None)
            self._draining.pop(fd, None)
            mine = self._by_peer.get(conn.peer)
            if mine is not None:
                mine.pop(fd, None)
                if not mine:
                    del self._by_peer[conn.peer]
            if not conn.waiting:
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(conn.sock)
        conn.sock.close()
