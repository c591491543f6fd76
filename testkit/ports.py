"""Free loopback ports for the servers tests and benchmarks start: never a fixed one, which anything may hold."""

from __future__ import annotations

import random
import socket
from pathlib import Path


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports for servers, from below the kernel's ephemeral range; all stay bound until every
    one is chosen, so none repeats.

    A port from the ephemeral range (a bind to port 0) can become the local end of an outgoing connection before
    its server binds it: 50 agents of the scale benchmark starting at once open some 200 connections, and one found
    its debug port taken. Below the range only an explicit bind can take a port."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    candidates = random.sample(range(max(1024, low - 10000), low), max(0, min(10000, low - 1024)))
    sockets: list[socket.socket] = []
    try:
        for port in candidates:
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            sockets.append(s)
            if len(sockets) == count:
                return [s.getsockname()[1] for s in sockets]
        raise RuntimeError(f"fewer than {count} free loopback ports below {low}")
    finally:
        for s in sockets:
            s.close()
