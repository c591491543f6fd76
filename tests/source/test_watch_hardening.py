"""No hot loops, no log floods, dead connections noticed (issue 21, item 7).

- A watch or LIST answered with something the API server never sends (an HTML page with status 200, an empty
  200, garbage) is a failure that backs off like any other: the real Reflector and KubeApi run against a tiny
  HTTP server that answers that way, on virtual time, and both the requests and the log lines stay bounded.
- A warning that repeats is logged once per interval with a count (RateLimitedLog, on virtual time).
- Every API connection carries TCP keepalive 30/5/3 s: read back with getsockopt from the socket of a live
  watch against the fake API server.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time

import psutil
import pytest

from agent.telemetry.log_limit import RateLimitedLog
from agent.pipeline.queue import EventQueue
from agent.telemetry.stats import RuntimeStats
from agent.source.backoff import Backoff
from agent.config import ClusterAccess
from agent.source.kube import KEEPALIVE_COUNT, KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KubeApi, load_configuration
from agent.source.reflector import PodsOfNode, Reflector, ReflectorSettings
from testkit.factory import pod
from testkit.plain_http import QuietHandler, answer, plain_http_kubeconfig, serve
from testkit.virtual_time import VirtualClock
from testkit.waiting import wait_until

HTML = b"<!DOCTYPE html>\n<html>\n<head><title>Sign in</title></head>\n<body>\n<p>Please log in</p>\n</body>\n</html>\n"
GOOD_LIST = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"},
                        "items": [pod("web", resource_version="7")]}).encode()

# name -> (status, content type or None, body) answering every request of that kind
ANSWERS = {
    "html": (200, "text/html; charset=utf-8", HTML),
    "html labelled json": (200, "application/json", HTML),
    "empty": (200, "application/json", b""),
    "garbage": (200, "application/json", b"\x00\xff garbage \x01\n" * 20),
    "empty object": (200, "application/json", b"{}"),
}


class OddServer:
    """Answers LISTs and WATCHes of /api/v1/pods as told: what a proxy or captive portal in the way might send."""

    def __init__(self, list_answer=(200, "application/json", GOOD_LIST), watch_answer=(200, "application/json", b"")):
        self.list_answer, self.watch_answer = list_answer, watch_answer
        self.requests: list[tuple[float, bool]] = []  # (monotonic time, is a watch)
        odd = self

        class Handler(QuietHandler):
            def do_GET(self):  # noqa: N802
                watch = "watch=true" in self.path
                odd.requests.append((time.monotonic(), watch))
                answer(self, *(odd.watch_answer if watch else odd.list_answer))

        self._server = serve(Handler)
        self.port = self._server.server_address[1]

    def count(self, watch: bool) -> int:
        return sum(1 for _, w in self.requests if w == watch)

    def kubeconfig(self, path) -> str:
        return plain_http_kubeconfig(path, self.port)

    def stop(self):
        self._server.shutdown()
        self._server.server_close()


def run_on_virtual_time(tmp_path, caplog, horizon: float = 120.0, real_limit: float = 15.0, **answers):
    """The real Reflector and KubeApi against an OddServer answering as told, until ``horizon`` virtual seconds
    have been waited; (hot, the server, the clock, the stats, the warnings logged).

    A hot loop never waits, so virtual time never reaches the horizon: the real-time limit stops it and the
    test then sees the thread was still running.
    """
    server = OddServer(**answers)
    clock = VirtualClock(horizon=horizon)
    api = KubeApi(load_configuration(ClusterAccess(kubeconfig=server.kubeconfig(tmp_path / "kubeconfig"))))
    stats = RuntimeStats()
    queue = EventQueue(metrics=stats, maxsize=100_000)
    reflector = Reflector(api=api, watched=PodsOfNode(node_name="node-a"), emit=queue.put, metrics=stats,
                          settings=ReflectorSettings(read_timeout=5.0, min_watch_timeout=300, max_watch_timeout=600),
                          backoff=Backoff(clock=clock), clock=clock, wait=clock.wait)
    stop = threading.Event()
    thread = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
    try:
        with caplog.at_level(logging.INFO, logger="agent.source.reflector"):
            thread.start()
            thread.join(real_limit)
            hot = thread.is_alive()
            stop.set()
            api.close()
            thread.join(5)
    finally:
        server.stop()
    return hot, server, clock, stats, [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("answer", ["html", "html labelled json", "garbage"])
def test_a_watch_answered_with_a_page_backs_off_and_logs_a_few_lines(answer, tmp_path, caplog):
    hot, server, clock, stats, lines = run_on_virtual_time(tmp_path, caplog, watch_answer=ANSWERS[answer])
    watches = server.count(watch=True)
    assert not hot, f"hot loop: {watches} watches and {len(lines)} warnings without ever waiting"
    # Backoff 0.8 s doubling to 30 s, jittered: at most ~10 attempts in two virtual minutes, each a relist too.
    assert 3 <= watches <= 12, watches
    assert all(w >= 0.8 for w in clock.waits), clock.waits
    # One line per kind of warning per minute of (virtual) time, not one per attempt or per line of the page.
    assert len(lines) <= 6, [r.getMessage() for r in lines]
    # Every such watch is counted as a failure, under the reason the decision took.
    assert stats.snapshot().requests_failed.get(("pods", "undecodable"), 0) >= watches - 1


@pytest.mark.parametrize("answer", ["html", "empty", "garbage", "empty object"])
def test_a_list_answered_with_something_else_backs_off(answer, tmp_path, caplog):
    hot, server, _, _, lines = run_on_virtual_time(tmp_path, caplog, list_answer=ANSWERS[answer],
                                                   watch_answer=(200, "application/json", b""))
    lists = server.count(watch=False)
    assert not hot, f"hot loop: {lists} LISTs"
    assert 3 <= lists <= 12, lists
    assert server.count(watch=True) == 0, "a LIST that is not a List must never be taken for one"
    assert len(lines) <= 4, [r.getMessage() for r in lines]


def test_an_empty_watch_answer_backs_off(tmp_path, caplog):
    hot, server, _, _, _ = run_on_virtual_time(tmp_path, caplog, watch_answer=ANSWERS["empty"])
    assert not hot and 3 <= server.count(watch=True) <= 12, server.count(watch=True)


# -- the rate-limited log, on virtual time ------------------------------------------------------------------------
def test_a_repeated_warning_is_one_line_per_interval_with_a_count(caplog):
    clock = VirtualClock()
    limited = RateLimitedLog(logging.getLogger("test.limit"), interval=60.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="test.limit"):
        for _ in range(500):  # 500 a second for 3 minutes
            for _ in range(500):
                limited.warning("html", "watch answered with %s", "HTML")
            limited.warning("other", "another kind")
            clock.advance(1.0)
            if clock.now >= 180:
                break
    messages = [r.getMessage() for r in caplog.records]
    html = [m for m in messages if m.startswith("watch answered")]
    assert len(html) == 3, html  # t=0, t=60, t=120
    assert html[0] == "watch answered with HTML"
    assert html[1] == "watch answered with HTML (29999 more like this in the last 60 s)"
    assert len([m for m in messages if m.startswith("another kind")]) == 3  # keys are independent
    limited.reset()
    with caplog.at_level(logging.WARNING, logger="test.limit"):
        assert limited.warning("html", "watch answered with %s", "HTML")  # after reset: logged at once


# -- TCP keepalive on the live watch's connection -----------------------------------------------------------------
class WatchTimeouts:
    """The real KubeApi, noting the read timeout each watch the reflector opens asks for."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self.read_timeouts: list[float] = []

    def get_chunks(self, path, params, read_timeout=60.0):
        return self.api.get_chunks(path, params, read_timeout)

    def stream_lines(self, path, params, read_timeout):
        self.read_timeouts.append(read_timeout)
        return self.api.stream_lines(path, params, read_timeout)


def test_the_watch_connection_has_tcp_keepalive(apiserver, tmp_path):
    kube = KubeApi(load_configuration(ClusterAccess(kubeconfig=apiserver.kubeconfig(tmp_path / "kubeconfig"))))
    api = WatchTimeouts(kube)
    stats = RuntimeStats()
    reflector = Reflector(api=api, watched=PodsOfNode(node_name="node-a"), emit=EventQueue(metrics=stats).put,
                          metrics=stats,
                          settings=ReflectorSettings(read_timeout=120.0, min_watch_timeout=300, max_watch_timeout=600))
    stop = threading.Event()
    thread = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: apiserver.count(watch=True) >= 1, message="the watch is open")

        def watch_socket():
            for c in psutil.Process().net_connections(kind="tcp"):
                if c.raddr and c.raddr.port == apiserver.port and c.status == psutil.CONN_ESTABLISHED and c.fd >= 0:
                    return c.fd
            return None

        fd = wait_until(watch_socket, message="the agent's connection to the API server")
        sock = socket.socket(fileno=os.dup(fd))
        try:
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE == 30
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == KEEPALIVE_INTERVAL == 5
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == KEEPALIVE_COUNT == 3
            assert KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_COUNT <= 45  # a dead peer noticed within 45 s
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1  # urllib3's default kept
        finally:
            sock.close()
        # The read timeout that quiet watches need between bookmarks is the one the watch is opened with.
        assert api.read_timeouts and set(api.read_timeouts) == {120.0}
    finally:
        stop.set()
        kube.close()
        thread.join(5)
