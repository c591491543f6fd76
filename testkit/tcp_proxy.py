"""A loopback TCP forwarder between a client and its server (the agent and the API server, a Collector and
Prometheus): the network between them, made faulty.

TLS passes through untouched (the API server's certificate names 127.0.0.1), so the client talks to the real
server; the proxy only counts connection attempts, cuts established connections (a load balancer reset),
refuses new ones for a while (a partition) or holds them, neither forwarded nor answered (a hung server).
"""

from __future__ import annotations

import socket
import threading
import time

__all__ = ["TcpProxy", "close_socket", "shut_down"]

# What the proxy does with a new connection.
FORWARD, REFUSE, HOLD = "forward", "refuse", "hold"


class TcpProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._mode = FORWARD
        self._stopped = False
        #: monotonic times of every accepted connection (each is one attempt by a client)
        self.attempts: list[float] = []
        #: the connections accepted while holding, never answered
        self.held: list[socket.socket] = []

    def start(self) -> TcpProxy:
        threading.Thread(target=self._accept, name="tcp-proxy", daemon=True).start()
        return self

    def attempts_between(self, start: float, end: float) -> int:
        with self._lock:
            return sum(1 for t in self.attempts if start <= t <= end)

    def cut(self) -> None:
        """Reset every established connection; new ones are forwarded again at once."""
        with self._lock:
            sockets, self._open = list(self._open), set()
        for s in sockets:
            close_socket(s)

    def refuse(self) -> None:
        """Cut everything and close each new connection as soon as it is accepted, until ``accept()``."""
        self._switch(REFUSE)

    def hold(self) -> None:
        """Cut everything and keep each new connection open, neither forwarded nor answered, until ``accept()``."""
        self._switch(HOLD)

    def accept(self) -> None:
        """Forward new connections again; the held ones are closed."""
        self._switch(FORWARD)

    def _switch(self, mode: str) -> None:
        with self._lock:
            self._mode = mode
            if mode == FORWARD:
                ended, self.held = self.held, []
            else:
                ended, self._open = list(self._open), set()
        for s in ended:
            close_socket(s)

    def stop(self) -> None:
        self._stopped = True
        close_socket(self._listener)
        self.cut()
        self.accept()  # closes the held connections

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.attempts.append(time.monotonic())
                mode = self._mode
                if mode == HOLD:
                    self.held.append(client)
            if mode == REFUSE:
                close_socket(client)
            elif mode == FORWARD:
                threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.upstream, timeout=5)
            server.settimeout(None)
        except OSError:  # upstream down: the client sees its connection closed, as behind a load balancer
            close_socket(client)
            return
        with self._lock:
            if self._mode != FORWARD:  # switched while connecting: as if cut at once
                close_socket(client)
                close_socket(server)
                return
            self._open.update((client, server))
        for source, sink in ((client, server), (server, client)):
            threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(source)
                self._open.discard(sink)
            close_socket(source)
            close_socket(sink)


def shut_down(s: socket.socket) -> None:
    """End both directions of a connection (its reader sees the end at once), if it is not gone already."""
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def close_socket(s: socket.socket) -> None:
    shut_down(s)
    s.close()
