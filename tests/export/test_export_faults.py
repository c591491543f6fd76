"""A Collector that misbehaves: success means the points were accepted, and every export is bounded in time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from testkit.waiting import wait_until
from testkit.factory import pod


def exporting_agent(make_agent, monkeypatch, receiver, protocol="http/protobuf", **kw):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    return make_agent(exporter="otlp", otlp_protocol=protocol, **kw)


@pytest.mark.parametrize("mode, reason", [
    ("redirect", "http_3xx"),
    ("html", "unexpected_body"),
    ("reject_all", "rejected"),
])
def test_an_answer_that_accepted_nothing_is_a_failure(apiserver, make_agent, monkeypatch, http_receiver, mode, reason):
    apiserver.create(pod("p"))
    http_receiver.mode = mode
    agent = exporting_agent(make_agent, monkeypatch, http_receiver, export_interval=0.2)
    wait_until(lambda: agent.stats.snapshot().exports.get("failure", 0) >= 3, timeout=15)
    s = agent.stats.snapshot()
    assert s.exports["success"] == 0 and s.last_export_success_unixtime is None
    assert s.export_failures[reason] >= 3
    http_receiver.mode = None  # the Collector is fixed: success again, and the timestamp moves
    wait_until(lambda: agent.stats.snapshot().exports["success"] >= 1, timeout=15)
    assert agent.stats.snapshot().last_export_success_unixtime is not None


def test_a_partial_rejection_is_counted_and_logged_once(apiserver, make_agent, monkeypatch, http_receiver, caplog):
    apiserver.create(pod("p"))
    http_receiver.mode = "reject_some"
    with caplog.at_level("WARNING", logger="agent.export.otlp.exporter"):
        agent = exporting_agent(make_agent, monkeypatch, http_receiver, export_interval=0.2)
        wait_until(lambda: agent.stats.snapshot().exports["success"] >= 4, timeout=15)
    s = agent.stats.snapshot()
    assert s.rejected_points >= 4 and s.exports["failure"] == 0
    assert sum("rejected 1 point" in r.getMessage() for r in caplog.records) == 1


def test_a_trickling_collector_cannot_hold_an_export_past_the_timeout(apiserver, make_agent, monkeypatch,
                                                                      http_receiver):
    http_receiver.mode, http_receiver.trickle_seconds = "trickle", 0.3  # a whole answer would take ~20 s
    agent = exporting_agent(make_agent, monkeypatch, http_receiver, export_interval=0.5, export_timeout=1.0)
    wait_until(lambda: agent.stats.snapshot().exports.get("failure", 0) >= 2, timeout=20)
    s = agent.stats.snapshot()
    assert s.export_failures["timeout"] >= 2
    # Each export's duration is bounded by the timeout (plus scheduling slack), not by the Collector.
    h = s.export_duration
    assert h.count >= 2 and h.sum / h.count <= 1.5, (h.sum, h.count)


def test_a_hanging_grpc_collector_is_bounded_too(apiserver, make_agent, monkeypatch, grpc_receiver):
    grpc_receiver.mode = "hang"
    agent = exporting_agent(make_agent, monkeypatch, grpc_receiver, protocol="grpc", export_interval=0.5,
                            export_timeout=1.0)
    wait_until(lambda: agent.stats.snapshot().exports.get("failure", 0) >= 2, timeout=20)
    s = agent.stats.snapshot()
    assert s.export_failures["timeout"] >= 2 and s.export_duration.sum / s.export_duration.count <= 1.5


def test_sigterm_ends_the_agent_promptly_whatever_the_collector_does(apiserver, tmp_path, http_receiver):
    http_receiver.mode, http_receiver.trickle_seconds = "trickle", 1.0
    apiserver.create(pod("p"))
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": http_receiver.endpoint, "DEBUG_ADDRESS": "127.0.0.1:0"}
    proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "--node-name", "node-a", "--kubeconfig",
                             apiserver.kubeconfig(tmp_path / "kc"), "--export-interval", "1", "--export-timeout", "10"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(http_receiver.requests) >= 1, timeout=20)  # an export is now stuck in the trickle
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        took = time.monotonic() - sent
        assert took < 10, took  # the DaemonSet gives 30 s; the final export gets at most 5
    finally:
        proc.kill()
        proc.communicate()
