"""Issue 29, item 1: no connection flood from any peer makes the kubelet's probes fail.

The running agent (its real debug endpoint, 512 slots, listening on every interface as in the DaemonSet) is
flooded by a subprocess holding about 700 idle connections, each reopened as soon as the server closes it, while
a separate client probes /healthz and /readyz as the kubelet does (a new connection each time, the DaemonSet's
3-second timeout). Peers are loopback addresses: the flood comes from 127.0.0.2 and up, the kubelet from
127.0.0.1. Was: the full pool answered 503 before reading the path, and most probes failed.
"""

from __future__ import annotations

import socket
import time

import psutil
import pytest

from agent.debug.http_server import MAX_PER_PEER
from testkit.factory import node, pod
from testkit.flood import Flood
from testkit.waiting import wait_until

PROBE_TIMEOUT = 3.0  # the DaemonSet's timeoutSeconds
FLOOD = 700


def probe(port: int, path: str) -> str:
    """What the kubelet would see: the status code, or why there was none."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except OSError as exc:
        return type(exc).__name__
    return data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/1.1 ") else f"no answer {data[:40]!r}"


def descriptors() -> int:
    """This process's open descriptors. Less those before the flood, the connections the agent holds: the flood runs
    in another process, and listing descriptors is quick enough to count sockets that live a few milliseconds,
    which matching them in /proc/net/tcp under a churn of thousands a second is not."""
    return psutil.Process().num_fds()


@pytest.fixture
def agent(apiserver, make_agent):
    apiserver.create(node("node-a"), kind="nodes")
    apiserver.create(pod("web"))
    running = make_agent(debug_address=":0")
    wait_until(lambda: running.state.synced and running.state.node_listed and len(running.state) == 1)
    assert probe(running.debug.port, "/readyz") == "200"
    return running


def probes_during(port: int, flood: Flood, seconds: float, before: int) -> tuple[list[str], int, int]:
    """The probes' outcomes, a probe every 0.25 s for ``seconds`` once the flood holds a pool's worth of
    connections (past the 5-second head deadline, so the server's own closes are part of it); the most
    connections the agent held meanwhile, and the fewest the flood held established."""
    wait_until(lambda: flood.latest["open"] >= 500, timeout=20, message="the flood holds 500 connections")
    outcomes, most, fewest = [], 0, FLOOD
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        outcomes += [probe(port, "/healthz"), probe(port, "/readyz")]
        fewest = min(fewest, flood.latest["open"])
        if len(outcomes) % 8 == 0:
            most = max(most, descriptors() - before)
        time.sleep(0.25)
    return outcomes, most, fewest


def test_probes_answer_during_a_flood_of_idle_connections_from_many_peers(agent):
    """Fourteen peers, 50 connections each (under the per-peer cap): only closing idle connections saves the probes."""
    port = agent.debug.port
    sources = [f"127.0.0.{i}" for i in range(2, 16)]
    assert FLOOD // len(sources) <= MAX_PER_PEER
    before = descriptors()
    flood = Flood(port, FLOOD, 14, sources)
    try:
        outcomes, most, fewest = probes_during(port, flood, 8, before)
        last = flood.wait(30)
    finally:
        flood.stop()
    failed = [o for o in outcomes if o != "200"]
    print(f"probes answered 200 during the flood: {len(outcomes) - len(failed)} of {len(outcomes)}; the flood held "
          f"at least {fewest} established and reopened {last['reopened']}; the agent held at most {most}")
    assert not failed, f"{len(failed)} of {len(outcomes)} probes failed: {sorted(set(failed))}"
    assert fewest >= 500  # the pool stayed full of the flood's connections all along
    assert 500 <= most <= 2 * 512  # the agent held them, and never more than its hard limit


def test_one_peer_holds_at_most_its_share_and_the_probes_answer(agent):
    port = agent.debug.port
    before = descriptors()
    flood = Flood(port, FLOOD, 10, ["127.0.0.2"])
    try:
        wait_until(lambda: flood.latest["reopened"] > 0, timeout=20, message="the server closes some of the flood")
        outcomes, held = [], []
        for _ in range(12):
            outcomes += [probe(port, "/healthz"), probe(port, "/readyz")]
            held.append(descriptors() - before)
            time.sleep(0.25)
        flood.wait(30)
    finally:
        flood.stop()
    failed = [o for o in outcomes if o != "200"]
    assert not failed, f"{len(failed)} of {len(outcomes)} probes failed: {sorted(set(failed))}"
    # The peer's share, full (the margin: the agent's own connections to the API server come and go meanwhile,
    # and those of earlier tests may be collected); today's main held 512 of them.
    assert MAX_PER_PEER - 16 <= max(held) <= MAX_PER_PEER + 16, held
